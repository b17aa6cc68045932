// Why the managed probes' figure depended on how many transfers a probe ran (managed h2d
// 8.3 GB/s at few transfers, 10.9 with 20): every transfer's duration, in order, over two
// batches in one process, for each managed path, size and warm-up variant. No xferd code.
//
//   xferd_managed_ramp [--gpu N] [--transfers 40] [--sizes 16,64] (MiB)
//
// Per size and path, one process-fresh buffer (cudaMallocManaged), then batch A of
// --transfers transfers and batch B of as many. A ramp in A that B does not repeat is a
// first-use effect (the driver's state for the buffer); a ramp in both is per-probe. Paths:
//   fault_h2d        CPU writes the buffer, a kernel reads it: pages migrate by GPU fault;
//                    before each transfer the pages are prefetched home (as xferd does)
//   fault_h2d_plain  the same without the prefetch home (the CPU's writes fault them back)
//   prefetch_h2d     prefetch home, CPU writes, cudaMemPrefetchAsync to the GPU (timed)
//   fault_d2h        a kernel writes it (pages prefetched to the GPU first), the CPU reads
//                    it: pages migrate by CPU fault (wall clock)
//   prefetch_d2h     the same with cudaMemPrefetchAsync to the host timed instead
// Prints one JSON line per (size, path, batch): {"size_mib", "path", "batch",
// "durations_ms": [...], "gbps_first5", "gbps_median", "gbps_last10"}.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "xferd_managed_ramp: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice ? 69 : 1);
}

__global__ void ReadAll(const unsigned long long* p, size_t n, unsigned long long* sum) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    s += p[i];
  }
  atomicAdd(sum, s);
}

__global__ void WriteAll(unsigned long long* p, size_t n, unsigned long long salt) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] = i ^ salt;
  }
}

cudaError_t Prefetch(const void* p, size_t bytes, int device, cudaStream_t s) {
#if CUDART_VERSION >= 13000
  cudaMemLocation where{};
  if (device == cudaCpuDeviceId) {
    where.type = cudaMemLocationTypeHost;
  } else {
    where.type = cudaMemLocationTypeDevice;
    where.id = device;
  }
  return cudaMemPrefetchAsync(p, bytes, where, 0, s);
#else
  return cudaMemPrefetchAsync(p, bytes, device, s);
#endif
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int gpu = 0, transfers = 40;
  std::vector<size_t> sizes_mib = {16, 64};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gpu") gpu = std::atoi(argv[i + 1]);
    if (a == "--transfers") transfers = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--sizes") {
      sizes_mib.clear();
      for (char* t = std::strtok(argv[i + 1], ","); t; t = std::strtok(nullptr, ",")) {
        sizes_mib.push_back(std::strtoul(t, nullptr, 10));
      }
    }
  }
  Check(cudaSetDevice(gpu), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  unsigned long long* sum = nullptr;
  Check(cudaMalloc(&sum, sizeof *sum), "cudaMalloc");
  const int blocks = prop.multiProcessorCount * 8;
  const char* paths[] = {"fault_h2d", "fault_h2d_plain", "prefetch_h2d", "fault_d2h",
                         "prefetch_d2h"};
  for (size_t mib : sizes_mib) {
    const size_t bytes = mib << 20, n = bytes / sizeof(unsigned long long);
    for (const char* path : paths) {
      const std::string p = path;
      unsigned long long* buf = nullptr;
      Check(cudaMallocManaged(&buf, bytes), "cudaMallocManaged");  // fresh for each path
      std::memset(buf, 0, bytes);
      for (const char* batch : {"A", "B"}) {
        std::vector<double> ms;
        for (int t = 0; t < transfers; ++t) {
          const unsigned long long salt = 0x9e3779b97f4a7c15ull * (t + 1);
          double d = 0;
          if (p.rfind("fault_h2d", 0) == 0 || p == "prefetch_h2d") {
            if (p != "fault_h2d_plain") {
              Check(Prefetch(buf, bytes, cudaCpuDeviceId, stream), "prefetch home");
              Check(cudaStreamSynchronize(stream), "sync");
            }
            for (size_t i = 0; i < n; i += 512) buf[i] = i ^ salt;  // the CPU writes last
            Check(cudaMemsetAsync(sum, 0, sizeof *sum, stream), "memset");
            Check(cudaEventRecord(start, stream), "record");
            if (p == "prefetch_h2d") Check(Prefetch(buf, bytes, gpu, stream), "prefetch to GPU");
            ReadAll<<<blocks, 256, 0, stream>>>(buf, n, sum);
            Check(cudaEventRecord(stop, stream), "record");
            Check(cudaEventSynchronize(stop), "sync");
            float f = 0;
            Check(cudaEventElapsedTime(&f, start, stop), "elapsed");
            d = f;
          } else {
            Check(Prefetch(buf, bytes, gpu, stream), "prefetch to GPU");
            WriteAll<<<blocks, 256, 0, stream>>>(buf, n, salt);
            Check(cudaStreamSynchronize(stream), "sync");
            if (p == "prefetch_d2h") {
              Check(cudaEventRecord(start, stream), "record");
              Check(Prefetch(buf, bytes, cudaCpuDeviceId, stream), "prefetch home");
              Check(cudaEventRecord(stop, stream), "record");
              Check(cudaEventSynchronize(stop), "sync");
              float f = 0;
              Check(cudaEventElapsedTime(&f, start, stop), "elapsed");
              d = f;
            } else {
              volatile unsigned long long s = 0;
              const auto t0 = std::chrono::steady_clock::now();
              for (size_t i = 0; i < n; i += 512) s = s + buf[i];  // a CPU fault per page
              d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count();
            }
          }
          ms.push_back(d);
        }
        const double gb = static_cast<double>(bytes) / 1e9;
        std::vector<double> first5(ms.begin(), ms.begin() + std::min<size_t>(5, ms.size()));
        std::vector<double> last10(ms.end() - std::min<size_t>(10, ms.size()), ms.end());
        std::printf(
            "{\"gpu\": %d, \"size_mib\": %zu, \"path\": \"%s\", \"batch\": \"%s\", "
            "\"gbps_first5\": %.2f, \"gbps_median\": %.2f, \"gbps_last10\": %.2f, "
            "\"durations_ms\": [",
            gpu, mib, path, batch, gb / (Median(first5) / 1e3), gb / (Median(ms) / 1e3),
            gb / (Median(last10) / 1e3));
        for (size_t i = 0; i < ms.size(); ++i) std::printf("%s%.3f", i ? ", " : "", ms[i]);
        std::printf("]}\n");
        std::fflush(stdout);
      }
      Check(cudaFree(buf), "cudaFree");
    }
  }
  return 0;
}
