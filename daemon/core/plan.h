// The one plan that `xferd probe`, `xferd run` and `xferd check-config` share: which GPUs
// are probed and which probes run on each, in what order, with what deadline.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
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

enum class Deadlines {
  kAsConfigured,  // the daemon: every probe gets probe_deadline
  // A one-shot run: probe_deadline, or longer when the size and iterations asked for need
  // it at a slow but plausible 0.5 GB/s (a stuck probe still ends).
  kStretchedToSize,
};

// The probes of one cycle on one GPU, in the order they run: per size, each mode of
// `settings.modes` (in that order) h2d then d2h, then pinned both ways when
// `bidirectional` is set and pinned is among the modes.
std::vector<probes::ProbeSpec> PlanProbes(const Settings& settings,
                                          Deadlines deadlines = Deadlines::kAsConfigured);

// The probes that run every cycle whatever the allowance: pinned h2d and d2h of each size
// when pinned is configured, else the first configured mode's pair.
bool IsHeadline(const probes::ProbeSpec& spec, const Settings& settings);

// Whether a probe's durations go into a histogram: every probe's, or the headline ones'
// only ([probe] histograms = "headline").
bool KeepsHistogram(const probes::ProbeSpec& spec, const Settings& settings);

}  // namespace xferd::core
