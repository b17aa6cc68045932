// CUDA errors as probe failures. Names CUDA runtime types: private to probes/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace xferd::probes::cuda {

// "cudaErrorNoDevice: no CUDA-capable device is detected (error 100)".
std::string CudaErrorText(cudaError_t error);

// Ends the probe: ProbeAbort{kError, "<call> failed: <CudaErrorText>"}.
[[noreturn]] void ThrowCallFailed(cudaError_t error, const char* call);

// Every CUDA call a probe makes goes through it: a failure ends the probe, naming the call.
inline void Check(cudaError_t error, const char* call) {
  if (error != cudaSuccess) ThrowCallFailed(error, call);
}

}  // namespace xferd::probes::cuda
