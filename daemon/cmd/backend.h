// The one place that picks the backend for a command (the simulated device when the config
// says so, file or --simulate, else the CUDA backend sized for the config's probes), the
// busy detector that goes with it, and the devices the config selects on it.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "config/config.h"
#include "core/busy_detector.h"
#include "xferd/probes/backend.h"
#include "xferd/probes/link_errors.h"
#include "xferd/probes/link_watch.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::cmd {

struct Backend {
  std::unique_ptr<probes::TransferBackend> backend;
  probes::SimBackend* sim = nullptr;  // the same object when simulated: faults change on reload
};

// Throws probes::NoDeviceError (no driver, no GPU, a build without CUDA): the backend's one
// line, which ends suggesting `xferd <command> --simulate`.
Backend MakeBackend(const config::Config& config, const char* command,
                    const std::filesystem::path& sysfs_root = "/sys");

// core::SelectDevices with the config's gpus; a GPU it names that is not here is a mistake
// in the file: ConfigError (probe.gpus).
std::vector<probes::DeviceInfo> SelectConfigured(const std::vector<probes::DeviceInfo>& devices,
                                                 const config::Config& config);

// NVML or the simulated load ([simulate]; with `sim`, its link model too), judged against
// the config's thresholds. [busy] enabled = false turns the pre-cycle check off; the link
// is still read around each probe for contention.
std::unique_ptr<core::BusyDetector> MakeBusyDetector(const config::Config& config,
                                                     probes::SimBackend* sim = nullptr);

// The link-error counters of the backend's GPUs: the simulated device's (with `sim`), else
// the AER files under `sysfs_root` and NVML's replay counter.
std::unique_ptr<probes::LinkErrorReader> MakeLinkErrorReader(
    const config::Config& config, probes::SimBackend* sim,
    const std::filesystem::path& sysfs_root = "/sys");

// The link watch's reader of the backend's GPUs' links: the simulated device's (with `sim`:
// its tree or built-in host, its faults and power saving, its traffic plus [simulate]
// pcie_bytes_per_second), else sysfs under `sysfs_root` and NVML.
std::unique_ptr<probes::LinkStateReader> MakeLinkStateReader(
    const config::Config& config, probes::SimBackend* sim,
    const std::filesystem::path& sysfs_root = "/sys");

}  // namespace xferd::cmd
