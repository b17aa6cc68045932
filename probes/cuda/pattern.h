// The test pattern and checksum shared by host and device code, so a checksum taken on
// one side can be compared with one taken on the other. Private to probes/cuda.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define XFERD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define XFERD_HOST_DEVICE inline
#endif

namespace xferd::probes::cuda {

// Word i of the pattern with this salt: splitmix64, so neighbouring words differ in every
// byte and a shifted or stale copy cannot match by accident.
XFERD_HOST_DEVICE std::uint64_t PatternWord(std::uint64_t index, std::uint64_t salt) {
  std::uint64_t z = index + salt * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The checksum is sum(word_i * (2i + 1)) mod 2^64: order-independent to compute (atomics,
// any split) yet position-sensitive, so swapped or misplaced words change it. A buffer
// whose length is not a multiple of 8 ends in a zero-padded little-endian word.
XFERD_HOST_DEVICE std::uint64_t ChecksumTerm(std::uint64_t word, std::uint64_t index) {
  return word * (2 * index + 1);
}

}  // namespace xferd::probes::cuda
