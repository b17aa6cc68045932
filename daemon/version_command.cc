#include <cstdio>
#include <nlohmann/json.hpp>

#include "daemon/commands.h"
#include "daemon/exit_codes.h"
#include "xferd/build_info.h"

namespace xferd::daemon {

int VersionCommand(bool json) {
  if (json) {
    nlohmann::json j{{"version", kVersion},
                     {"build_type", kBuildType},
                     {"cuda_backend", kCudaBuilt},
                     {"cuda_version", kCudaVersion}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("xferd %s (%s; CUDA backend: %s)\n", kVersion, kBuildType,
                kCudaBuilt ? (std::string("CUDA ") + kCudaVersion).c_str() : "not built");
  }
  return kExitOk;
}

}  // namespace xferd::daemon
