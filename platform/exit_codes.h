// Documented exit codes (sysexits.h).
#pragma once

namespace xferd {
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // a probe or check failed (probe: a verdict was bad)
inline constexpr int kExitUsage = 64;       // EX_USAGE: bad flags
inline constexpr int kExitNoDevice = 69;    // EX_UNAVAILABLE: no NVIDIA driver / GPU
inline constexpr int kExitSoftware = 70;    // EX_SOFTWARE: an internal error
inline constexpr int kExitOsError = 71;     // EX_OSERR: port in use, cannot write state
inline constexpr int kExitConfig = 78;      // EX_CONFIG: the configuration is invalid
}  // namespace xferd
