// Launchers for the probe kernels (kernels.cu). Private to probes/cuda: it names CUDA
// runtime types, so no public header may include it. Each returns the launch error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace xferd::probes::cuda {

// Add the checksum of `bytes` at `data` to *result (zero it first, before any timing).
// `uncached` reads with ld.global.cv so mapped host memory is fetched over the link each
// time instead of from L2. `data` must be 16-byte aligned.
cudaError_t LaunchChecksum(const void* data, std::uint64_t bytes, bool uncached,
                           std::uint64_t* result, int blocks, cudaStream_t stream);

// Write the pattern with `salt` over `bytes` at `data` with 16-byte stores; when
// `checksum` is not null, also add the checksum of what was written to it.
cudaError_t LaunchFill(void* data, std::uint64_t bytes, std::uint64_t salt, std::uint64_t* checksum,
                       int blocks, cudaStream_t stream);

// Invert one byte: the corrupted-copy test hook.
cudaError_t LaunchFlipByte(void* data, std::uint64_t offset, cudaStream_t stream);

// Arithmetic on every word, `rounds` steps each: the compute that copies overlap with.
cudaError_t LaunchCompute(void* data, std::uint64_t bytes, int rounds, int blocks,
                          cudaStream_t stream);

}  // namespace xferd::probes::cuda
