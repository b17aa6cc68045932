// The plain reference for what every GPU of a host gets when all of them copy at once, as
// nvbandwidth's host_to_all_memcpy_ce / all_to_host_memcpy_ce measure it, beside each GPU's
// figure alone, in one run. No xferd code is used, so it is an independent figure.
//
//   xferd_all_gpus_copy [--gpus 0,1,..] [--size 64MiB] [--iterations 20] [--warmup 2]
//                       [--trials 3] [--direction h2d,d2h,bidir]
//
// Each GPU gets its own pinned host buffers, placed on the GPU's NUMA node when sysfs names
// one (mmap, mbind preferring the node, first touch, cudaHostRegister; the node the pages
// landed on is read back and reported), its own device buffers and one stream per
// direction. A run queues, on every stream of every GPU in it, a kernel that holds the stream until
// a host flag is set, then a start event, --iterations cudaMemcpyAsync of --size, an end event;
// setting the flag releases every GPU at the same moment (host threads would start them
// microseconds apart). A GPU's figure is its bytes over its own start..end events; the
// aggregate is the sum over the GPUs (nvbandwidth's SUM) and, more conservatively, all
// bytes over the wall time from release to the last GPU done. bidir runs h2d and d2h
// streams at once on each GPU and reports both and their sum.
//
// Within each trial every GPU runs alone, then all together, so the host's drift over
// seconds hits both alike; figures are medians over --trials.
//
// Prints one JSON document on stdout and a table on stderr. Exit status: 0 done, 64 bad
// arguments, 69 no NVIDIA driver/GPU, 70 a CUDA call failed or a release timed out.
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr unsigned long long kReleaseTimeoutNs = 10'000'000'000ull;

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
    std::fprintf(stderr, "xferd_all_gpus_copy: no NVIDIA driver/GPU (%s: %s)\n", what,
                 cudaGetErrorString(e));
    std::exit(69);
  }
  std::fprintf(stderr, "xferd_all_gpus_copy: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(70);
}

__device__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Says it runs (*started), then holds its stream until the host sets *release; gives up
// (and says so) after timeout_ns so that a lost release cannot hang the GPU.
__global__ void HoldUntilRelease(const volatile int* release, volatile int* started, int* timed_out,
                                 unsigned long long timeout_ns) {
  *started = 1;
  __threadfence_system();
  const unsigned long long t0 = GlobalTimerNs();
  while (*release == 0) {
    if (GlobalTimerNs() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

// From <linux/mempolicy.h>; spelled out so no libnuma header is needed.
constexpr int kMpolPreferred = 1;
constexpr unsigned long kMpolFNode = 1UL << 0, kMpolFAddr = 1UL << 1;
constexpr unsigned long kMaskBits = 1024;

int SysfsNumaNode(const std::string& bus_id) {
  std::string bdf = bus_id;
  for (char& c : bdf) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream in("/sys/bus/pci/devices/" + bdf + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

int NodeOfPage(void* address) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, address, kMpolFNode | kMpolFAddr) != 0)
    return -1;
  return node;
}

struct HostBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  int node = -1;  // where its first page landed, -1 unknown
};

// Page-aligned, pinned, and preferring `node` when it is >= 0 (as xferd's probes place theirs;
// a node short of memory spills rather than failing): the node it landed on is read back.
HostBuffer PinnedOnNode(std::size_t bytes, int node, std::string& note) {
  HostBuffer b;
  b.bytes = (bytes + 4095) / 4096 * 4096;
  b.ptr = mmap(nullptr, b.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b.ptr == MAP_FAILED) {
    std::fprintf(stderr, "xferd_all_gpus_copy: mmap of %zu bytes failed: %s\n", b.bytes,
                 std::strerror(errno));
    std::exit(70);
  }
  if (node >= 0 && static_cast<unsigned long>(node) < kMaskBits) {
    unsigned long mask[kMaskBits / (8 * sizeof(unsigned long))] = {};
    mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
    // The kernel reads maxnode - 1 bits.
    if (syscall(SYS_mbind, b.ptr, b.bytes, kMpolPreferred, mask, kMaskBits + 1, 0U) != 0)
      note =
          std::string("mbind to node ") + std::to_string(node) + " failed: " + std::strerror(errno);
  }
  std::memset(b.ptr, 0x5a, b.bytes);  // first touch: the pages land now
  b.node = NodeOfPage(b.ptr);
  Check(cudaHostRegister(b.ptr, b.bytes, cudaHostRegisterPortable), "cudaHostRegister");
  return b;
}

enum Lane { kH2D = 0, kD2H = 1 };
enum Flag { kRelease = 0, kTimedOut = 1, kStarted = 2 /* + lane */, kFlags = 4 };

struct Gpu {
  int index = 0;
  std::string name, bus_id, note;
  int numa_node = -1;
  HostBuffer host[2];
  void* device[2] = {nullptr, nullptr};
  cudaStream_t stream[2] = {nullptr, nullptr};
  cudaEvent_t start[2] = {nullptr, nullptr}, end[2] = {nullptr, nullptr};
  // Mapped host memory shared with the hold kernels: release, timed out, started per lane.
  int* flags = nullptr;
  int* flags_dev = nullptr;
};

struct Options {
  std::vector<int> gpus;
  std::size_t size = 64ull << 20;
  int iterations = 20, warmup = 2, trials = 3;
  std::vector<std::string> directions{"h2d", "d2h", "bidir"};
};

std::vector<Lane> LanesOf(const std::string& direction) {
  if (direction == "h2d") return {kH2D};
  if (direction == "d2h") return {kD2H};
  return {kH2D, kD2H};
}

void Enqueue(Gpu& g, Lane lane, std::size_t size, int count) {
  for (int i = 0; i < count; ++i) {
    Check(lane == kH2D ? cudaMemcpyAsync(g.device[lane], g.host[lane].ptr, size,
                                         cudaMemcpyHostToDevice, g.stream[lane])
                       : cudaMemcpyAsync(g.host[lane].ptr, g.device[lane], size,
                                         cudaMemcpyDeviceToHost, g.stream[lane]),
          "cudaMemcpyAsync");
  }
}

struct Measured {
  std::vector<double> lane_bytes_per_s[2];  // per GPU of the run, by lane (0 when unused)
  double wall_bytes_per_s = 0;
};

// One release of `gpus` (indices into `all`) copying `direction` at once.
Measured RunOnce(std::vector<Gpu>& all, const std::vector<int>& gpus, const std::string& direction,
                 const Options& o) {
  const std::vector<Lane> lanes = LanesOf(direction);
  for (int i : gpus) {
    Gpu& g = all[i];
    Check(cudaSetDevice(g.index), "cudaSetDevice");
    for (Lane l : lanes) Enqueue(g, l, o.size, o.warmup);
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (int f = 0; f < kFlags; ++f) reinterpret_cast<volatile int*>(g.flags)[f] = 0;
  }
  for (int i : gpus) {
    Gpu& g = all[i];
    Check(cudaSetDevice(g.index), "cudaSetDevice");
    for (Lane l : lanes) {
      HoldUntilRelease<<<1, 1, 0, g.stream[l]>>>(g.flags_dev + kRelease, g.flags_dev + kStarted + l,
                                                 g.flags_dev + kTimedOut, kReleaseTimeoutNs);
      Check(cudaGetLastError(), "launching the hold kernel");
      Check(cudaEventRecord(g.start[l], g.stream[l]), "cudaEventRecord");
      Enqueue(g, l, o.size, o.iterations);
      Check(cudaEventRecord(g.end[l], g.stream[l]), "cudaEventRecord");
    }
  }
  // Release only once every hold kernel runs, so that no GPU's copies can still be on their
  // way to it when the others start (cudaStreamQuery flushes work a driver may batch).
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (bool all_started = false; !all_started;) {
    all_started = true;
    for (int i : gpus) {
      for (Lane l : lanes) {
        if (reinterpret_cast<volatile int*>(all[i].flags)[kStarted + l]) continue;
        all_started = false;
        Check(cudaSetDevice(all[i].index), "cudaSetDevice");
        cudaStreamQuery(all[i].stream[l]);
      }
    }
    if (!all_started && Clock::now() > deadline) {
      std::fprintf(stderr, "xferd_all_gpus_copy: the hold kernels did not start within 5 s\n");
      std::exit(70);
    }
  }
  const auto released = Clock::now();
  for (int i : gpus) reinterpret_cast<volatile int*>(all[i].flags)[kRelease] = 1;
  Measured m;
  for (int l = 0; l < 2; ++l) m.lane_bytes_per_s[l].assign(gpus.size(), 0);
  for (std::size_t k = 0; k < gpus.size(); ++k) {
    Gpu& g = all[gpus[k]];
    Check(cudaSetDevice(g.index), "cudaSetDevice");
    for (Lane l : lanes) {
      Check(cudaEventSynchronize(g.end[l]), "cudaEventSynchronize");
      float ms = 0;
      Check(cudaEventElapsedTime(&ms, g.start[l], g.end[l]), "cudaEventElapsedTime");
      m.lane_bytes_per_s[l][k] = static_cast<double>(o.size) * o.iterations / (ms / 1e3);
    }
    if (reinterpret_cast<volatile int*>(g.flags)[kTimedOut]) {
      std::fprintf(stderr,
                   "xferd_all_gpus_copy: GPU %d's copies were not released within %.0f s; "
                   "the figures would not be simultaneous\n",
                   g.index, kReleaseTimeoutNs / 1e9);
      std::exit(70);
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - released).count();
  m.wall_bytes_per_s =
      static_cast<double>(o.size) * o.iterations * gpus.size() * lanes.size() / wall;
  return m;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string JsonList(const std::vector<double>& v) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

// "64MiB", "1GiB", "67108864"; 0 when malformed.
std::size_t ParseSize(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || !(v > 0)) return 0;
  const std::string unit = end;
  double scale = unit.empty() || unit == "B" ? 1
                 : unit == "KiB"             ? 1024.0
                 : unit == "MiB"             ? 1024.0 * 1024
                 : unit == "GiB"             ? 1024.0 * 1024 * 1024
                                             : 0;
  const double bytes = v * scale;
  if (!(bytes >= 1) || bytes > 16.0 * 1024 * 1024 * 1024 || bytes != std::floor(bytes)) return 0;
  return static_cast<std::size_t>(bytes);
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream s(text);
  for (std::string p; std::getline(s, p, ',');) parts.push_back(p);
  return parts;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--gpus 0,1,..] [--size 64MiB] [--iterations 20] [--warmup 2] "
               "[--trials 3] [--direction h2d,d2h,bidir]\n",
               argv0);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string gpus_arg;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(argv[0]);
    const char* v = argv[i + 1];
    char* end = nullptr;
    bool ok = true;
    if (flag == "--gpus") {
      gpus_arg = v;
      for (const std::string& p : Split(v)) {
        const long n = std::strtol(p.c_str(), &end, 10);
        ok = ok && !p.empty() && *end == '\0' && n >= 0 && n < 1024;
        if (ok) o.gpus.push_back(static_cast<int>(n));
      }
      ok = ok && !o.gpus.empty();
    } else if (flag == "--size") {
      o.size = ParseSize(v);
      ok = o.size > 0;
    } else if (flag == "--iterations") {
      o.iterations = static_cast<int>(std::strtol(v, &end, 10));
      ok = *end == '\0' && o.iterations >= 1 && o.iterations <= 1000;
    } else if (flag == "--warmup") {
      o.warmup = static_cast<int>(std::strtol(v, &end, 10));
      ok = *end == '\0' && o.warmup >= 0 && o.warmup <= 1000;
    } else if (flag == "--trials") {
      o.trials = static_cast<int>(std::strtol(v, &end, 10));
      ok = *end == '\0' && o.trials >= 1 && o.trials <= 100;
    } else if (flag == "--direction") {
      o.directions = Split(v);
      for (const std::string& d : o.directions)
        ok = ok && (d == "h2d" || d == "d2h" || d == "bidir");
      ok = ok && !o.directions.empty();
    } else {
      return Usage(argv[0]);
    }
    if (!ok) {
      std::fprintf(stderr, "xferd_all_gpus_copy: bad value for %s: '%s'\n", flag.c_str(), v);
      return Usage(argv[0]);
    }
  }

  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "xferd_all_gpus_copy: no NVIDIA driver/GPU (%s)\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 69;
  }
  if (o.gpus.empty()) {
    for (int i = 0; i < count; ++i) o.gpus.push_back(i);
  }
  std::vector<int> seen;
  for (int g : o.gpus) {
    if (g >= count) {
      std::fprintf(stderr, "xferd_all_gpus_copy: --gpus %s names GPU %d; there are %d: 0..%d\n",
                   gpus_arg.c_str(), g, count, count - 1);
      return 64;
    }
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) {
      std::fprintf(stderr, "xferd_all_gpus_copy: --gpus %s names GPU %d twice\n", gpus_arg.c_str(),
                   g);
      return 64;
    }
    seen.push_back(g);
  }

  std::vector<Gpu> gpus(o.gpus.size());
  for (std::size_t k = 0; k < gpus.size(); ++k) {
    Gpu& g = gpus[k];
    g.index = o.gpus[k];
    Check(cudaSetDevice(g.index), "cudaSetDevice");
    cudaDeviceProp prop{};
    Check(cudaGetDeviceProperties(&prop, g.index), "cudaGetDeviceProperties");
    g.name = prop.name;
    char bus[32] = "";
    Check(cudaDeviceGetPCIBusId(bus, sizeof bus, g.index), "cudaDeviceGetPCIBusId");
    g.bus_id = bus;
    for (char& c : g.bus_id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    g.numa_node = SysfsNumaNode(g.bus_id);
    for (int l = 0; l < 2; ++l) {
      g.host[l] = PinnedOnNode(o.size, g.numa_node, g.note);
      Check(cudaMalloc(&g.device[l], o.size), "cudaMalloc");
      Check(cudaMemset(g.device[l], 0xa5, o.size), "cudaMemset");
      Check(cudaStreamCreateWithFlags(&g.stream[l], cudaStreamNonBlocking), "cudaStreamCreate");
      Check(cudaEventCreate(&g.start[l]), "cudaEventCreate");
      Check(cudaEventCreateWithFlags(&g.end[l], cudaEventBlockingSync), "cudaEventCreate");
    }
    void* flags = nullptr;
    Check(cudaHostAlloc(&flags, kFlags * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    g.flags = static_cast<int*>(flags);
    void* flags_dev = nullptr;
    Check(cudaHostGetDevicePointer(&flags_dev, flags, 0), "cudaHostGetDevicePointer");
    g.flags_dev = static_cast<int*>(flags_dev);
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  std::vector<int> everyone(gpus.size());
  for (std::size_t k = 0; k < gpus.size(); ++k) everyone[k] = static_cast<int>(k);

  std::ostringstream json;
  json.precision(6);
  json << std::scientific;
  json << "{\"program\": \"xferd_all_gpus_copy\", \"size_bytes\": " << o.size
       << ", \"iterations\": " << o.iterations << ", \"warmup\": " << o.warmup
       << ", \"trials\": " << o.trials << ",\n \"gpus\": [";
  for (std::size_t k = 0; k < gpus.size(); ++k) {
    const Gpu& g = gpus[k];
    json << (k ? ",\n  " : "\n  ") << "{\"gpu\": " << g.index
         << ", \"name\": " << JsonString(g.name) << ", \"pci_bus_id\": " << JsonString(g.bus_id)
         << ", \"numa_node\": " << g.numa_node
         << ", \"host_buffer_numa_node\": {\"h2d\": " << g.host[kH2D].node
         << ", \"d2h\": " << g.host[kD2H].node << "}, \"placement_note\": " << JsonString(g.note)
         << "}";
  }
  json << "],\n \"results\": [";

  std::fprintf(stderr, "xferd_all_gpus_copy: %zu MiB x %d, median of %d trials, GB/s\n",
               o.size >> 20, o.iterations, o.trials);
  // numa: the GPU's node (sysfs); buffer: the node its host buffer landed on.
  std::fprintf(stderr, "%-6s%-5s%-6s%-8s%9s%9s%9s%13s\n", "dir", "gpu", "numa", "buffer", "solo",
               "all", "all/solo", "(h2d+d2h)");
  for (std::size_t d = 0; d < o.directions.size(); ++d) {
    const std::string& direction = o.directions[d];
    const std::size_t n = gpus.size();
    // [gpu][trial] per lane; aggregates per trial.
    std::vector<std::vector<double>> solo[2], together[2];
    for (int l = 0; l < 2; ++l) {
      solo[l].assign(n, {});
      together[l].assign(n, {});
    }
    std::vector<double> sums, walls, solo_sums;
    for (int t = 0; t < o.trials; ++t) {
      double solo_sum = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const Measured m = RunOnce(gpus, {static_cast<int>(k)}, direction, o);
        for (int l = 0; l < 2; ++l) {
          solo[l][k].push_back(m.lane_bytes_per_s[l][0]);
          solo_sum += m.lane_bytes_per_s[l][0];
        }
      }
      solo_sums.push_back(solo_sum);
      const Measured m = RunOnce(gpus, everyone, direction, o);
      double sum = 0;
      for (std::size_t k = 0; k < n; ++k) {
        for (int l = 0; l < 2; ++l) {
          together[l][k].push_back(m.lane_bytes_per_s[l][k]);
          sum += m.lane_bytes_per_s[l][k];
        }
      }
      sums.push_back(sum);
      walls.push_back(m.wall_bytes_per_s);
    }

    const bool bidir = direction == "bidir";
    json << (d ? ",\n  " : "\n  ") << "{\"direction\": \"" << direction << "\", \"per_gpu\": [";
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<double> solo_total(o.trials), all_total(o.trials);
      for (int t = 0; t < o.trials; ++t) {
        solo_total[t] = solo[kH2D][k][t] + solo[kD2H][k][t];
        all_total[t] = together[kH2D][k][t] + together[kD2H][k][t];
      }
      const double s = Median(solo_total), a = Median(all_total);
      json << (k ? ",\n   " : "\n   ") << "{\"gpu\": " << gpus[k].index
           << ", \"solo_bytes_per_s\": " << s << ", \"all_bytes_per_s\": " << a
           << ", \"all_over_solo\": " << (s > 0 ? a / s : 0.0)
           << ", \"solo_trials\": " << JsonList(solo_total)
           << ", \"all_trials\": " << JsonList(all_total);
      if (bidir) {
        json << ", \"solo_h2d_bytes_per_s\": " << Median(solo[kH2D][k])
             << ", \"solo_d2h_bytes_per_s\": " << Median(solo[kD2H][k])
             << ", \"all_h2d_bytes_per_s\": " << Median(together[kH2D][k])
             << ", \"all_d2h_bytes_per_s\": " << Median(together[kD2H][k]);
      }
      json << "}";
      char split[40] = "";
      if (bidir)
        std::snprintf(split, sizeof split, "%.2f+%.2f", Median(together[kH2D][k]) / 1e9,
                      Median(together[kD2H][k]) / 1e9);
      std::fprintf(stderr, "%-6s%-5d%-6d%-8d%9.2f%9.2f%9.4f%13s\n", direction.c_str(),
                   gpus[k].index, gpus[k].numa_node,
                   gpus[k].host[bidir ? kH2D : LanesOf(direction)[0]].node, s / 1e9, a / 1e9,
                   s > 0 ? a / s : 0.0, split);
    }
    json << "],\n   \"aggregate_bytes_per_s\": " << Median(sums)
         << ", \"aggregate_wall_bytes_per_s\": " << Median(walls)
         << ", \"solo_sum_bytes_per_s\": " << Median(solo_sums)
         << ", \"aggregate_trials\": " << JsonList(sums)
         << ", \"aggregate_wall_trials\": " << JsonList(walls) << "}";
    std::fprintf(stderr, "%-6s%-19s%9.2f%9.2f%9.4f   wall: %.2f\n", direction.c_str(), "sum",
                 Median(solo_sums) / 1e9, Median(sums) / 1e9,
                 Median(solo_sums) > 0 ? Median(sums) / Median(solo_sums) : 0.0,
                 Median(walls) / 1e9);
  }
  json << "]}\n";
  std::fputs(json.str().c_str(), stdout);

  for (Gpu& g : gpus) {
    cudaSetDevice(g.index);
    for (int l = 0; l < 2; ++l) {
      cudaHostUnregister(g.host[l].ptr);
      munmap(g.host[l].ptr, g.host[l].bytes);
      cudaFree(g.device[l]);
    }
    cudaFreeHost(g.flags);
  }
  return 0;
}
