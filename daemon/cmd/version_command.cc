#include <cstdio>
#include <nlohmann/json.hpp>

#include "cmd/commands.h"
#include "platform/build_info.h"
#include "platform/exit_codes.h"

namespace xferd::cmd {

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

}  // namespace xferd::cmd
