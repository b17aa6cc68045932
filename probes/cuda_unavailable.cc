// Stands in for the CUDA backend in builds made without a CUDA toolkit.
#include "xferd/probes/cuda_backend.h"

namespace xferd::probes {

bool CudaBackendBuilt() {
  return false;
}

std::unique_ptr<TransferBackend> MakeCudaBackend(const CudaOptions&) {
  throw NoDeviceError(
      "no NVIDIA GPU can be probed: this xferd was built without the CUDA backend (no CUDA "
      "toolkit at build time): "
      "rebuild with the CUDA toolkit installed");
}

}  // namespace xferd::probes
