// What the GPU bench programs xferd_workload and xferd_all_gpus_copy share: their exit
// statuses on CUDA errors, "--flag value" argument walking, sizes like "64MiB", and the
// no-GPU check. Plain C++17 and the CUDA runtime; no xferd code.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace bench_cli {

// Exit 69 when the driver or the GPU is missing, else 70, naming `program` and `what`.
[[noreturn]] inline void ExitOnCudaError(const char* program, cudaError_t e, const char* what) {
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
    std::fprintf(stderr, "%s: no NVIDIA driver/GPU (%s: %s)\n", program, what,
                 cudaGetErrorString(e));
    std::exit(69);
  }
  std::fprintf(stderr, "%s: %s failed: %s\n", program, what, cudaGetErrorString(e));
  std::exit(70);
}

// "67108864", "64MiB", "1GiB", "512KiB"; 0 when malformed, not whole or over max_bytes.
inline std::uint64_t ParseSize(const char* text, double max_bytes) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || !(v > 0)) return 0;
  const std::string unit = end;
  const double scale = unit.empty() || unit == "B" ? 1
                       : unit == "KiB"             ? 1024.0
                       : unit == "MiB"             ? 1024.0 * 1024
                       : unit == "GiB"             ? 1024.0 * 1024 * 1024
                                                   : 0;
  const double bytes = v * scale;
  if (!(bytes >= 1) || bytes > max_bytes || bytes != std::floor(bytes)) return 0;
  return static_cast<std::uint64_t>(bytes);
}

// Prints "usage: ARGV0 FLAGS" on stderr; the exit status for bad arguments.
inline int Usage(const char* argv0, const char* flags) {
  std::fprintf(stderr, "usage: %s %s\n", argv0, flags);
  return 64;
}

// Walks argv[1..] as "--flag value" pairs, handing each to parse(flag, value), which says
// whether the value is good, or std::nullopt for a flag it does not know. False at the first
// unknown flag, flag without a value or bad value (that one said on stderr, naming
// `program`): the caller then prints its usage.
template <typename Parse>
bool ParseFlagPairs(int argc, char** argv, const char* program, Parse parse) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[i + 1];
    const std::optional<bool> ok = parse(flag, v);
    if (!ok) return false;
    if (!*ok) {
      std::fprintf(stderr, "%s: bad value for %s: '%s'\n", program, flag.c_str(), v);
      return false;
    }
  }
  return true;
}

// How many GPUs there are; 0, said on stderr, when there is no driver or no GPU (exit 69).
inline int DeviceCount(const char* program) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "%s: no NVIDIA driver/GPU (%s)\n", program,
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 0;
  }
  return count;
}

}  // namespace bench_cli
