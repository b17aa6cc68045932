// The documented exit codes (sysexits.h) and the one mapping from a kind of failure to
// them. Each layer's user-facing error derives from platform::Error with its kind; the
// executable's main() turns any of them into its exit code (cmd/main.cc).
#pragma once

#include <stdexcept>
#include <string>

namespace xferd {
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;    // a probe or check failed (probe: a verdict was bad)
inline constexpr int kExitUsage = 64;     // EX_USAGE: bad flags
inline constexpr int kExitNoDevice = 69;  // EX_UNAVAILABLE: no NVIDIA driver / GPU
inline constexpr int kExitSoftware = 70;  // EX_SOFTWARE: an internal error
inline constexpr int kExitOsError = 71;   // EX_OSERR: port in use, cannot write state
inline constexpr int kExitConfig = 78;    // EX_CONFIG: the configuration is invalid
}  // namespace xferd

namespace xferd::platform {

enum class Failure {
  kUsage,     // the command line is wrong
  kNoDevice,  // no NVIDIA driver or GPU to probe
  kOsError,   // the system refused: port in use, file not writable
  kConfig,    // the configuration (file or web config) is invalid
  kSoftware,  // xferd's own fault
};

int ExitCode(Failure failure);

// A failure a user can act on: the message names the cause and the fix.
class Error : public std::runtime_error {
 public:
  Error(Failure failure, const std::string& message)
      : std::runtime_error(message), failure_(failure) {}
  Failure failure() const { return failure_; }

 private:
  Failure failure_;
};

}  // namespace xferd::platform
