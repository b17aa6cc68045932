// The probe kernels: checksum (also the zero-copy read and the managed touch), fill (also
// the zero-copy write), the corruption hook and the overlap compute. The probes that launch
// them are host code, in the .cc files beside this one (probe_run.h).
#include "probes/cuda/kernels.h"
#include "probes/cuda/pattern.h"

namespace xferd::probes::cuda {
namespace {

constexpr int kThreads = 256;

__device__ std::uint64_t Word(const uint4& v, bool high) {
  return high ? (static_cast<std::uint64_t>(v.w) << 32 | v.z)
              : (static_cast<std::uint64_t>(v.y) << 32 | v.x);
}

__device__ void AddToResult(std::uint64_t acc, std::uint64_t* result) {
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(reinterpret_cast<unsigned long long*>(result), acc);
}

// The bytes past the last whole 16-byte unit, as zero-padded little-endian words.
__device__ std::uint64_t TailChecksum(const unsigned char* tail, std::uint32_t tail_bytes,
                                      std::uint64_t first_index) {
  std::uint64_t acc = 0;
  for (std::uint32_t w = 0; w * 8 < tail_bytes; ++w) {
    std::uint64_t word = 0;
    for (std::uint32_t b = 0; b < 8 && w * 8 + b < tail_bytes; ++b)
      word |= static_cast<std::uint64_t>(tail[w * 8 + b]) << (8 * b);
    acc += ChecksumTerm(word, first_index + w);
  }
  return acc;
}

template <bool kUncached>
__global__ void ChecksumKernel(const uint4* data, std::uint64_t units, const unsigned char* tail,
                               std::uint32_t tail_bytes, std::uint64_t* result) {
  std::uint64_t acc = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t k = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       k < units; k += stride) {
    const uint4 v = kUncached ? __ldcv(data + k) : data[k];
    acc += ChecksumTerm(Word(v, false), 2 * k) + ChecksumTerm(Word(v, true), 2 * k + 1);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && tail_bytes > 0)
    acc += TailChecksum(tail, tail_bytes, 2 * units);
  AddToResult(acc, result);
}

__global__ void FillKernel(uint4* data, std::uint64_t units, unsigned char* tail,
                           std::uint32_t tail_bytes, std::uint64_t salt, std::uint64_t* checksum) {
  std::uint64_t acc = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t k = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       k < units; k += stride) {
    const std::uint64_t w0 = PatternWord(2 * k, salt), w1 = PatternWord(2 * k + 1, salt);
    data[k] = make_uint4(static_cast<unsigned>(w0), static_cast<unsigned>(w0 >> 32),
                         static_cast<unsigned>(w1), static_cast<unsigned>(w1 >> 32));
    acc += ChecksumTerm(w0, 2 * k) + ChecksumTerm(w1, 2 * k + 1);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && tail_bytes > 0) {
    for (std::uint32_t b = 0; b < tail_bytes; ++b)
      tail[b] = static_cast<unsigned char>(PatternWord(2 * units + b / 8, salt) >> (8 * (b % 8)));
    acc += TailChecksum(tail, tail_bytes, 2 * units);
  }
  if (checksum != nullptr) AddToResult(acc, checksum);
}

__global__ void FlipByteKernel(unsigned char* data, std::uint64_t offset) {
  data[offset] = static_cast<unsigned char>(~data[offset]);
}

__global__ void ComputeKernel(std::uint64_t* data, std::uint64_t words, int rounds) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < words; i += stride) {
    std::uint64_t x = data[i];
    for (int r = 0; r < rounds; ++r) x = x * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = x;
  }
}

int GridFor(std::uint64_t units, int max_blocks) {
  const std::uint64_t needed = (units + kThreads - 1) / kThreads;
  if (needed == 0) return 1;
  return static_cast<int>(needed < static_cast<std::uint64_t>(max_blocks) ? needed : max_blocks);
}

}  // namespace

cudaError_t LaunchChecksum(const void* data, std::uint64_t bytes, bool uncached,
                           std::uint64_t* result, int blocks, cudaStream_t stream) {
  const std::uint64_t units = bytes / 16;
  const auto* tail = static_cast<const unsigned char*>(data) + units * 16;
  const auto tail_bytes = static_cast<std::uint32_t>(bytes % 16);
  const int grid = GridFor(units, blocks);
  if (uncached)
    ChecksumKernel<true><<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(data), units,
                                                        tail, tail_bytes, result);
  else
    ChecksumKernel<false><<<grid, kThreads, 0, stream>>>(static_cast<const uint4*>(data), units,
                                                         tail, tail_bytes, result);
  return cudaGetLastError();
}

cudaError_t LaunchFill(void* data, std::uint64_t bytes, std::uint64_t salt, std::uint64_t* checksum,
                       int blocks, cudaStream_t stream) {
  const std::uint64_t units = bytes / 16;
  auto* tail = static_cast<unsigned char*>(data) + units * 16;
  FillKernel<<<GridFor(units, blocks), kThreads, 0, stream>>>(
      static_cast<uint4*>(data), units, tail, static_cast<std::uint32_t>(bytes % 16), salt,
      checksum);
  return cudaGetLastError();
}

cudaError_t LaunchFlipByte(void* data, std::uint64_t offset, cudaStream_t stream) {
  FlipByteKernel<<<1, 1, 0, stream>>>(static_cast<unsigned char*>(data), offset);
  return cudaGetLastError();
}

cudaError_t LaunchCompute(void* data, std::uint64_t bytes, int rounds, int blocks,
                          cudaStream_t stream) {
  const std::uint64_t words = bytes / 8;
  ComputeKernel<<<GridFor(words, blocks), kThreads, 0, stream>>>(static_cast<std::uint64_t*>(data),
                                                                 words, rounds);
  return cudaGetLastError();
}

}  // namespace xferd::probes::cuda
