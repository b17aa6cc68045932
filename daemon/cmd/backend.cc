#include "cmd/backend.h"

#include <algorithm>
#include <string>

#include "core/plan.h"
#include "xferd/probes/cuda_backend.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/nvml.h"

namespace xferd::cmd {

Backend MakeBackend(const config::Config& config, const char* command,
                    const std::filesystem::path& sysfs_root) {
  Backend out;
  if (config.simulate) {
    auto sim = std::make_unique<probes::SimBackend>(config.sim);
    out.sim = sim.get();
    out.backend = std::move(sim);
    return out;
  }
  probes::CudaOptions cuda;
  cuda.sysfs_root = sysfs_root;
  cuda.pinned_cap_bytes = config.pinned_cap_bytes;
  // Buffers are sized once, for the largest probe.
  cuda.max_size_bytes = *std::max_element(config.sizes.begin(), config.sizes.end());
  try {
    out.backend = probes::MakeCudaBackend(cuda);
  } catch (const probes::NoDeviceError& e) {
    // The backend named the cause and its fix; the way to try xferd without a GPU is the
    // command's own, said once, on the same line.
    throw probes::NoDeviceError(std::string(e.what()) + "; or run `xferd " + command +
                                " --simulate` to try the simulated device");
  }
  return out;
}

std::vector<probes::DeviceInfo> SelectConfigured(const std::vector<probes::DeviceInfo>& devices,
                                                 const config::Config& config) {
  try {
    return core::SelectDevices(devices, config.gpus);
  } catch (const core::UnknownGpuError& e) {
    throw config::ConfigError(config.source.string(), 0, "probe.gpus", e.what(),
                              "name GPUs by index or UUID as listed, or leave gpus empty for all");
  }
}

std::unique_ptr<core::BusyDetector> MakeBusyDetector(const config::Config& config,
                                                     probes::SimBackend* sim) {
  const core::BusyThresholds thresholds{config.busy_gpu_utilization_percent,
                                        config.busy_pcie_bytes_per_s};
  if (config.simulate) {
    return core::MakeBusyDetector(probes::MakeSimGpuLoadReader(config.sim_gpu_utilization_percent,
                                                               config.sim_pcie_bytes_per_s, sim),
                                  thresholds, config.busy_detection);
  }
  return core::MakeBusyDetector(probes::MakeNvmlGpuLoadReader(), thresholds, config.busy_detection);
}

std::unique_ptr<probes::LinkErrorReader> MakeLinkErrorReader(
    const config::Config& config, probes::SimBackend* sim,
    const std::filesystem::path& sysfs_root) {
  if (config.simulate && sim != nullptr) return probes::MakeSimLinkErrorReader(*sim);
  return probes::MakeLinkErrorReader(sysfs_root, probes::OpenNvml());
}

std::unique_ptr<probes::LinkStateReader> MakeLinkStateReader(
    const config::Config& config, probes::SimBackend* sim,
    const std::filesystem::path& sysfs_root) {
  if (config.simulate && sim != nullptr) {
    return probes::MakeSimLinkStateReader(*sim, config.sim_pcie_bytes_per_s);
  }
  return probes::MakeLinkStateReader(sysfs_root, probes::OpenNvml());
}

}  // namespace xferd::cmd
