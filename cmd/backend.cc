#include "cmd/backend.h"

#include <algorithm>
#include <string>

#include "xferd/probes/cuda_backend.h"

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
    throw probes::NoDeviceError(std::string(e.what()) +
                                "\nno NVIDIA driver/GPU found; run `xferd " + command +
                                " --simulate` to try the simulated device");
  }
  return out;
}

}  // namespace xferd::cmd
