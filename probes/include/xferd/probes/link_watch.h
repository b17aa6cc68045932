// The link watch's readings: the trained speed and width of every link on a GPU's PCIe path,
// read between probes at a cheap rate, and the link's byte counter that tells whether the
// GPU moves data. Reading only: what a change means (a transition, time below capability, a
// flapping link) is core's (core/link_watch.h).
//
// Each link of the path is read once, through one of its two ends: the port above it where
// the path has one (a bridge answers while the device below it retrains, and both ends of a
// link report the one state it trained to), else the device itself (a GPU on a virtual
// machine's root bus). A link that several GPUs share (a switch's uplink) is read once per
// poll. The sysfs attributes are kept open and read with one pread each
// (platform::PolledFile: regular files only, opened non-blocking, a size cap); one that
// cannot be read is tried again at most once a minute, and is "not read", never a speed.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::probes {

// One link of a GPU's path as the watch reads it.
struct WatchedLink {
  std::string bdf;            // the end that is read
  std::string other_end_bdf;  // "" when the path has no other end
  // What the link can train to, the lower of its two ends' maxima; 0: unknown.
  int max_gen = 0, max_width = 0;
};

// The links of `path`, one per link in the path's order (the GPU's own first): pairs of
// ends (probes::PairLinkEnds) read at their upper end, an unpaired last entry at itself.
// None for an integrated GPU or one on NVLink-C2C (no PCIe link carries its copies).
std::vector<WatchedLink> WatchedLinks(const LinkPath& path);

// One link as read: 0 = not read.
struct LinkState {
  int gen = 0, width = 0;
  bool Readable() const { return gen > 0 && width > 0; }
  bool operator==(const LinkState&) const = default;
};

// The GPU to read and its links (as WatchedLinks gave them, or the reader's own Links).
struct WatchedGpu {
  DeviceInfo device;
  std::vector<WatchedLink> links;
};

// One GPU's links at one poll, in the order asked.
struct LinkWatchReading {
  std::vector<LinkState> links;
  std::string source;   // "sysfs", "NVML", "simulated": where the links were read
  std::string problem;  // why a link was not read ("" when every one was)
};

// What the GPU's link carried so far, both directions together.
struct LinkTrafficCount {
  double bytes = 0;
  double at_s = 0;  // when, on the reader's own timeline: only differences mean anything
};

class LinkStateReader {
 public:
  virtual ~LinkStateReader() = default;
  // The links the watch reads for `device` on `path` (WatchedLinks, or what the reader knows
  // better: NVML's view of the GPU's own link where sysfs shows none).
  virtual std::vector<WatchedLink> Links(const DeviceInfo& device, const LinkPath& path) = 0;
  // Every link of every GPU, read now, into `out`: one reading per GPU, in the order given
  // (`out`'s storage is reused from poll to poll: a poll allocates nothing).
  virtual void Read(const std::vector<WatchedGpu>& gpus, std::vector<LinkWatchReading>& out) = 0;
  // The GPU's link byte counter now; nullopt: it cannot be read.
  virtual std::optional<LinkTrafficCount> Traffic(const DeviceInfo& device) = 0;
  // What it reads, for the start-up log.
  virtual std::string Describe() const = 0;
};

class NvmlApi;
class SimBackend;

// sysfs under `sysfs_root` (normally "/sys"); with `nvml` (may be null), the GPU's own link
// where sysfs does not show it (nvmlDeviceGetCurrPcieLinkGeneration/Width, its capability
// from nvmlDeviceGetMaxPcieLinkGeneration/Width) and the link's traffic from NVML's PCIe byte
// counters (nvmlDeviceGetFieldValues).
std::unique_ptr<LinkStateReader> MakeLinkStateReader(std::filesystem::path sysfs_root,
                                                     std::shared_ptr<NvmlApi> nvml);

// The simulated devices': their sysfs tree read as above (or the built-in host's links), with
// what the simulated device does to each GPU's own link on top (a downtrain fault, PCIe power
// saving at idle: [simulate] idle_link_gen), and the traffic of its link model (its probes,
// the foreign traffic) plus a steady `pcie_bytes_per_s` ([simulate] pcie_bytes_per_second).
std::unique_ptr<LinkStateReader> MakeSimLinkStateReader(const SimBackend& sim,
                                                        double pcie_bytes_per_s);

}  // namespace xferd::probes
