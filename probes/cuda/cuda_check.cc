#include "probes/cuda/cuda_check.h"

#include "probes/cuda/probe_abort.h"

namespace xferd::probes::cuda {

std::string CudaErrorText(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error) + " (error " +
         std::to_string(static_cast<int>(error)) + ")";
}

void ThrowCallFailed(cudaError_t error, const char* call) {
  throw ProbeAbort{ProbeStatus::kError, std::string(call) + " failed: " + CudaErrorText(error)};
}

}  // namespace xferd::probes::cuda
