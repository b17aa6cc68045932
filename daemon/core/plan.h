// The one plan that `xferd probe`, `xferd run` and `xferd check-config` share: which GPUs
// are probed and which probes run on each, in what order, with what deadline.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/settings.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// A GPU named in the settings (or on the command line) that this machine does not have.
class UnknownGpuError : public std::runtime_error {
 public:
  UnknownGpuError(std::string gpu, std::string known);
  const std::string& gpu() const { return gpu_; }      // the entry as written
  const std::string& known() const { return known_; }  // "0 (GPU-...), 1 (GPU-...)"

 private:
  std::string gpu_, known_;
};

// Does `id` name `device`: its index ("0") or its UUID in any case (nvidia-smi prints
// "GPU-5c3b...", users paste "GPU-5C3B...").
bool NamesDevice(std::string_view id, const probes::DeviceInfo& device);

// The devices `ids` name, in the order given, each once; every device when `ids` is empty.
// Throws UnknownGpuError for an id that names none.
std::vector<probes::DeviceInfo> SelectDevices(const std::vector<probes::DeviceInfo>& devices,
                                              const std::vector<std::string>& ids);

// One series of probes, what the allowance, the scheduler and the tracker key them by.
using ProbeKey = std::tuple<probes::TransferMode, probes::Direction, std::uint64_t>;
inline ProbeKey KeyOf(const probes::ProbeSpec& spec) {
  return {spec.mode, spec.direction, spec.size_bytes};
}

enum class Deadlines {
  kAsConfigured,  // the daemon: every probe gets probe_deadline
  // A one-shot run: probe_deadline, or longer when the size and iterations asked for need
  // it at a slow but plausible 0.5 GB/s (a stuck probe still ends).
  kStretchedToSize,
};

// The link a probe's transfer size is scaled against (PlannedSize): PCIe Gen4 x16, the
// link the default 64 MiB was chosen for (2.7 ms a pinned transfer there).
inline constexpr double kSizeReferenceBytesPerSecond = 16 * 16e9 * 128.0 / 130.0 / 8.0;

// The transfer size a configured `size_bytes` becomes on a GPU whose way to host memory
// carries `link_bytes_per_s` (core::HostLinkRate: what it carries when healthy, so a link
// that trains down keeps its sizes and series): with sizes_follow_link, a size over 4 MiB
// (kBandMinSizeBytes) on a link slower than kSizeReferenceBytesPerSecond is scaled by the
// ratio of the rates, in whole MiB, never under 4 MiB, so one transfer takes as long as on
// Gen4 x16 and a probe costs about the same device time on every link. Otherwise (a
// faster link, NVLink-C2C, an integrated GPU, a rate not known: 0) the size as configured.
std::uint64_t PlannedSize(const Settings& settings, std::uint64_t size_bytes,
                          double link_bytes_per_s);

// The probes of one cycle on one GPU, in the order they run: per size (PlannedSize on a
// link of `link_bytes_per_s`, 0 = the sizes as configured; each once), each mode of
// `settings.modes` (in that order) h2d then d2h, then pinned both ways when
// `bidirectional` is set and pinned is among the modes. Each probe runs until its
// device-time target (probe_time, min_iterations) or `iterations`.
std::vector<probes::ProbeSpec> PlanProbes(const Settings& settings,
                                          Deadlines deadlines = Deadlines::kAsConfigured,
                                          double link_bytes_per_s = 0);

// The probes that run every cycle whatever the allowance: pinned h2d and d2h of each size
// when pinned is configured, else the first configured mode's pair.
bool IsHeadline(const probes::ProbeSpec& spec, const Settings& settings);

// Whether a probe's durations go into a histogram: every probe's, or the headline ones'
// only ([probe] histograms = "headline").
bool KeepsHistogram(const probes::ProbeSpec& spec, const Settings& settings);

}  // namespace xferd::core
