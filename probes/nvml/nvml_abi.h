// The few NVML declarations xferd calls through dlopen, from the documented C API
// (nvml.h), so that no NVML header or library is needed at build time. One place for the
// readers in this folder.
#pragma once

namespace xferd::probes::nvml {

// nvmlReturn_t is an enum; 0 is NVML_SUCCESS.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
inline constexpr NvmlReturn kNvmlSuccess = 0;

using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using HandleByPciFn = NvmlReturn (*)(const char*, NvmlDevice*);

}  // namespace xferd::probes::nvml
