// The link's own error counters on a GPU's PCIe path, as read: the kernel's AER counters of
// every device on the path (sysfs aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal and,
// on a root port, aer_rootport_total_err_*) and NVML's replay counter of the GPU's link.
// Reading only: what grew, and what that means, is core's (core/link_errors.h).
//
// A source that cannot be read (no AER capability, a virtual machine, a driver without the
// call, an odd file) is "not readable" with the reason, never a zero: every file goes
// through platform::ReadFileBounded, so a FIFO, a directory or a huge file is refused, and
// a file that does not parse as the kernel writes it is refused too.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::probes {

// The AER error classes, as the kernel counts them per device: correctable errors (the
// link retried and nothing was lost), uncorrectable non-fatal (a transaction was lost, the
// link works) and uncorrectable fatal (the link was reset).
enum class AerClass { kCorrectable, kNonFatal, kFatal };
inline constexpr std::array<AerClass, 3> kAllAerClasses = {AerClass::kCorrectable,
                                                           AerClass::kNonFatal, AerClass::kFatal};
std::string_view ToString(AerClass aer_class);  // "correctable", "nonfatal", "fatal"
// The sysfs files of a class: "aer_dev_correctable" and "aer_rootport_total_err_cor", ...
std::string_view DeviceFileOf(AerClass aer_class);
std::string_view RootPortFileOf(AerClass aer_class);

// Counts by class, indexed by AerClass; nullopt: not read.
using AerCounts = std::array<std::optional<std::uint64_t>, 3>;

// One line of an aer_dev_* file: an error kind ("RxErr", "BadTLP", "CmpltTO") and its count.
struct AerKind {
  AerClass aer_class = AerClass::kCorrectable;
  std::string name;
  std::uint64_t count = 0;
};

// One PCI function of the path.
struct AerCounters {
  std::string bdf;
  bool root_port = false;  // the top of the path is a root port: it has the rootport totals
  // TOTAL_ERR_COR, TOTAL_ERR_NONFATAL, TOTAL_ERR_FATAL of its aer_dev_* files.
  AerCounts device{};
  // aer_rootport_total_err_*: error messages the root port received from every device below
  // it (root ports only).
  AerCounts rootport{};
  std::vector<AerKind> kinds;  // every error kind of the files read, in file order
  // Why a file could not be read ("" when every file was): the file, the cause, what it
  // means. With `missing`, the device has no AER files at all (no AER capability, AER off,
  // a virtual machine): expected on many hosts, not a fault.
  std::string problem;
  bool missing = false;
  bool Readable() const { return problem.empty(); }
};

// NVML's PCIe replay counter of the GPU's own link.
struct ReplayCounter {
  std::optional<std::uint64_t> value;  // nullopt: not readable
  std::string problem;                 // why not ("" when read)
  // Not there to read (no NVML, N/A on this GPU, an integrated GPU): no fault.
  bool missing = false;
};

// Everything read of one GPU's path at one moment.
struct LinkErrors {
  std::vector<AerCounters> aer;  // one per device of the path, in its order (the GPU first)
  ReplayCounter replays;
};

// An aer_dev_* file as the kernel writes it: one "<error kind> <count>" line per kind (the
// kinds' names differ between kernels: "RxErr" or "Receiver Error"), unnamed bits as
// "dev_cor_errs_bit[N] <count>", then "TOTAL_ERR_COR <count>" (_NONFATAL, _FATAL). `total`
// is that last line's; `problem` says why the text is not such a file ("" when it is).
struct AerFile {
  std::uint64_t total = 0;
  std::vector<AerKind> kinds;
  std::string problem;
};
AerFile ParseAerFile(std::string_view text, AerClass aer_class);
// An aer_rootport_total_err_* file: one count. nullopt when the text is not one.
std::optional<std::uint64_t> ParseAerCount(std::string_view text);

// The AER counters of every device on `path`, read under `sysfs_root` (normally "/sys";
// /sys/bus/pci/devices/<bdf>/aer_*). The top of the path is a root port when it is a PCI
// bridge (a GPU on a virtual machine's root bus is not).
std::vector<AerCounters> ReadAer(const std::filesystem::path& sysfs_root, const LinkPath& path);

class LinkErrorReader {
 public:
  virtual ~LinkErrorReader() = default;
  // The counters of every device on `path` (`device`'s, read while probing or not: errors
  // are counted whatever the link's speed) and the GPU's replay counter, read now.
  virtual LinkErrors Read(const DeviceInfo& device, const LinkPath& path) = 0;
  // What it reads, for the start-up log.
  virtual std::string Describe() const = 0;
};

class NvmlApi;
class SimBackend;

// AER from `sysfs_root`, replays from NVML (xferd/probes/nvml.h).
std::unique_ptr<LinkErrorReader> MakeLinkErrorReader(std::filesystem::path sysfs_root,
                                                     std::shared_ptr<NvmlApi> nvml);

// The simulated devices' (SimBackend::ReadLinkErrors): its sysfs tree's AER files or the
// built-in host's, and the counts its link_errors faults add.
std::unique_ptr<LinkErrorReader> MakeSimLinkErrorReader(const SimBackend& sim);

}  // namespace xferd::probes
