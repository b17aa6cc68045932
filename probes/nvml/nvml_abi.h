// The few NVML declarations xferd calls through dlopen, from the documented C API
// (nvml.h), so that no NVML header or library is needed at build time. One place for the
// readers in this folder; return codes are probes::NvmlReturn (xferd/probes/nvml.h).
#pragma once

#include "xferd/probes/nvml.h"

namespace xferd::probes::nvml {

// nvmlDevice_t as the library takes it.
using Device = struct NvmlDeviceOpaque*;

using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using HandleByPciFn = NvmlReturn (*)(const char*, Device*);

}  // namespace xferd::probes::nvml
