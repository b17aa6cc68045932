// The one place that picks and builds the transfer backend for a command: the simulated
// device when the config says so (file or --simulate), else the CUDA backend sized for the
// config's probes.
#pragma once

#include <filesystem>
#include <memory>

#include "config/config.h"
#include "xferd/probes/backend.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::cmd {

struct Backend {
  std::unique_ptr<probes::TransferBackend> backend;
  probes::SimBackend* sim = nullptr;  // the same object when simulated: faults change on reload
};

// Throws probes::NoDeviceError (no driver, no GPU, a build without CUDA) with a line that
// suggests `xferd <command> --simulate`.
Backend MakeBackend(const config::Config& config, const char* command,
                    const std::filesystem::path& sysfs_root = "/sys");

}  // namespace xferd::cmd
