// The plain reference xferd's pinned and pageable probes are held against: cudaMemcpy
// between a malloc'd or cudaMallocHost'd buffer and cudaMalloc'd memory, each copy
// bracketed by events on the default stream (pageable also by the wall clock), median of
// N, the way nvbandwidth's copy-engine test and most hand-written loops time it. No xferd
// code is used, so it is an independent figure.
//
//   xferd_plain_copy [--gpu N] [--size BYTES] [--iterations N] [--warmup N]
//
// --gpu picks the GPU (default 0). The host buffers prefer the GPU's NUMA node (sysfs
// numa_node of its PCI function; set_mempolicy, as any NUMA-aware copy loop would), so a
// GPU on the far socket is not held to a figure its buffers could not reach.
//
// Prints one JSON object: {"device": ..., "gpu": N, "pci_bus_id": ..., "numa_node": ...,
// "results": [{mode, direction, ...}]}.
#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "xferd_plain_copy: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice ? 69 : 1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The NUMA node sysfs gives the GPU's PCI function; -1 when it says none.
int GpuNumaNode(const char* bus_id) {
  std::string bdf(bus_id);
  for (char& c : bdf) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (bdf.size() > 12) bdf = bdf.substr(bdf.size() - 12);  // "00000000:01:00.0" -> "0000:..."
  std::ifstream in("/sys/bus/pci/devices/" + bdf + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

// New pages of this thread prefer `node` (MPOL_PREFERRED); false when the kernel refuses.
bool PreferNode(int node) {
  if (node < 0 || node >= 1024) return false;
  unsigned long mask[16] = {};
  mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
  return syscall(SYS_set_mempolicy, 1 /* MPOL_PREFERRED */, mask, 1024UL) == 0;
}

struct Result {
  const char* mode;
  const char* direction;
  const char* clock;
  std::vector<double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t size = 64ull << 20;
  int iterations = 20, warmup = 2, gpu = 0;
  if (argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s [--gpu N] [--size BYTES] [--iterations N] [--warmup N]\n",
                 argv[0]);
    return 64;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gpu"))
      gpu = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--size"))
      size = std::strtoull(argv[i + 1], nullptr, 0);
    else if (!std::strcmp(argv[i], "--iterations"))
      iterations = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warmup"))
      warmup = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--gpu N] [--size BYTES] [--iterations N] [--warmup N]\n",
                   argv[0]);
      return 64;
    }
  }
  if (size == 0 || iterations < 1 || warmup < 0 || gpu < 0) {
    std::fprintf(stderr, "xferd_plain_copy: size and iterations must be positive, gpu >= 0\n");
    return 64;
  }
  int count = 0;
  Check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (gpu >= count) {
    std::fprintf(stderr, "xferd_plain_copy: --gpu %d: there are %d GPUs (0..%d)\n", gpu, count,
                 count - 1);
    return 64;
  }
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
  Check(cudaSetDevice(gpu), "cudaSetDevice");
  char bus_id[32] = {};
  Check(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, gpu), "cudaDeviceGetPCIBusId");
  const int numa_node = GpuNumaNode(bus_id);
  const bool preferred = PreferNode(numa_node);

  void *device = nullptr, *pinned = nullptr;
  Check(cudaMalloc(&device, size), "cudaMalloc");
  Check(cudaMallocHost(&pinned, size), "cudaMallocHost");
  void* pageable = std::malloc(size);
  if (pageable == nullptr) return 71;
  std::memset(pageable, 1, size);
  std::memset(pinned, 1, size);
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");

  std::vector<Result> results;
  for (const char* mode : {"pinned", "pageable"}) {
    for (const char* direction : {"h2d", "d2h"}) {
      void* host = !std::strcmp(mode, "pinned") ? pinned : pageable;
      const bool h2d = !std::strcmp(direction, "h2d");
      Result events{mode, direction, "events", {}}, wall{mode, direction, "wall", {}};
      for (int i = 0; i < warmup + iterations; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        Check(cudaEventRecord(start), "cudaEventRecord");
        Check(h2d ? cudaMemcpy(device, host, size, cudaMemcpyHostToDevice)
                  : cudaMemcpy(host, device, size, cudaMemcpyDeviceToHost),
              "cudaMemcpy");
        Check(cudaEventRecord(stop), "cudaEventRecord");
        Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
        const auto t1 = std::chrono::steady_clock::now();
        float ms = 0;
        Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        if (i < warmup) continue;
        events.seconds.push_back(ms / 1e3);
        wall.seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
      }
      results.push_back(events);
      results.push_back(wall);
    }
  }

  std::printf(
      "{\"device\": \"%s\", \"gpu\": %d, \"pci_bus_id\": \"%s\", \"numa_node\": %d, "
      "\"numa_preferred\": %s, \"size_bytes\": %zu, \"iterations\": %d, \"results\": [",
      prop.name, gpu, bus_id, numa_node, preferred ? "true" : "false", size, iterations);
  for (std::size_t r = 0; r < results.size(); ++r) {
    const Result& x = results[r];
    std::printf(
        "%s\n  {\"mode\": \"%s\", \"direction\": \"%s\", \"clock\": \"%s\", "
        "\"median_bytes_per_s\": %.6e, \"samples_s\": [",
        r ? "," : "", x.mode, x.direction, x.clock, size / Median(x.seconds));
    for (std::size_t i = 0; i < x.seconds.size(); ++i)
      std::printf("%s%.9f", i ? ", " : "", x.seconds[i]);
    std::printf("]}");
  }
  std::printf("\n]}\n");
  cudaFree(device);
  cudaFreeHost(pinned);
  std::free(pageable);
  return 0;
}
