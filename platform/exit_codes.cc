#include "platform/exit_codes.h"

namespace xferd::platform {

int ExitCode(Failure failure) {
  switch (failure) {
    case Failure::kUsage: return kExitUsage;
    case Failure::kNoDevice: return kExitNoDevice;
    case Failure::kOsError: return kExitOsError;
    case Failure::kConfig: return kExitConfig;
    case Failure::kSoftware: return kExitSoftware;
  }
  return kExitSoftware;
}

}  // namespace xferd::platform
