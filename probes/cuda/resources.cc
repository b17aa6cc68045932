#include "probes/cuda/resources.h"

#include <cstdlib>

namespace xferd::probes::cuda {

Memory AllocateDevice(std::size_t bytes, cudaError_t* error) {
  void* ptr = nullptr;
  *error = cudaMalloc(&ptr, bytes);
  if (*error != cudaSuccess) return {};
  return Memory(ptr, [](void* p) { cudaFree(p); });
}

Memory AllocateManaged(std::size_t bytes, cudaError_t* error) {
  void* ptr = nullptr;
  *error = cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal);
  if (*error != cudaSuccess) return {};
  return Memory(ptr, [](void* p) { cudaFree(p); });
}

Memory AllocatePinned(std::size_t bytes, unsigned flags, cudaError_t* error) {
  void* ptr = nullptr;
  *error = cudaHostAlloc(&ptr, bytes, flags);
  if (*error != cudaSuccess) return {};
  return Memory(ptr, [](void* p) { cudaFreeHost(p); });
}

Memory AllocatePageable(std::size_t bytes) {
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* ptr = std::aligned_alloc(4096, rounded);
  if (ptr == nullptr) return {};
  return Memory(ptr, [](void* p) { std::free(p); });
}

}  // namespace xferd::probes::cuda
