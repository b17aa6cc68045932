// A copy workload to run beside xferd, the way a data-loading job shares the link with it:
// pinned cudaMemcpyAsync of --size bytes, back to back on one stream per direction.
//
//   xferd_workload --out FILE [--mode steady|bursts] [--direction h2d|d2h|bidir]
//                  [--duration S] [--gpu N] [--size 64MiB] [--seed N]
//                  [--on MIN-MAX] [--off MIN-MAX] [--depth N]
//
//   steady   copies for the whole --duration.
//   bursts   alternates off and on periods whose lengths are drawn uniformly from --off
//            (default 2-40 s) and --on (default 0.5-8 s) with --seed, starting with an off
//            period, so bursts begin at moments unrelated to anything xferd does.
//
// --out gets one JSON line per 100 ms slot of CLOCK_REALTIME: {"t": slot start (s since the
// epoch), "bytes": bytes copied in it, "busy": whether the schedule had the workload on in
// it, "on_s": how much of the slot it was on}, then one {"summary": {...}} line (also printed
// on stdout): bytes, seconds on (active_s), gb_per_s = bytes / seconds on (whatever slowed
// the workload counts), slot_gb_per_s_median over the fully-on slots, and copy_gb_per_s =
// bytes over the time its copies took on the GPU (idle gaps between bursts do not count,
// nor the few copies that drain after each burst's end: the figure to hold bursts to).
//
// Timing costs the copies nothing: up to --depth copies stay queued (default: 256 MiB
// worth, at least 4) and the thread waits only for the oldest, so the copy engine never
// idles between copies. Each copy is bracketed by events; their times, chained from event
// to event (short spans keep cudaEventElapsedTime's float precise), place its bytes on the
// realtime slots it overlapped. No xferd code is used.
//
// Exit status: 0 done (also when SIGINT/SIGTERM ended it early: the summary says so),
// 64 bad arguments, 69 no NVIDIA driver/GPU, 70 a CUDA call failed, 73 --out not writable.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kSlotS = 0.1;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) {
  g_stop = 1;
}

std::mutex g_error_mu;
void Fail(cudaError_t e, const char* what) {
  std::lock_guard<std::mutex> lock(g_error_mu);
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
    std::fprintf(stderr, "xferd_workload: no NVIDIA driver/GPU (%s: %s)\n", what,
                 cudaGetErrorString(e));
    std::exit(69);
  }
  std::fprintf(stderr, "xferd_workload: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(70);
}
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Fail(e, what);
}

// "67108864", "64MiB", "1GiB", "512KiB"; 0 when malformed.
std::uint64_t ParseSize(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || !(v > 0)) return 0;
  const std::string unit = end;
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  if (scale == 0) return 0;
  const double bytes = v * scale;
  if (bytes < 1 || bytes > 64.0 * 1024 * 1024 * 1024 || bytes != std::floor(bytes)) return 0;
  return static_cast<std::uint64_t>(bytes);
}

// "0.5-8" -> {0.5, 8}; false when malformed or not 0 < min <= max.
bool ParseRange(const char* text, double& lo, double& hi) {
  char* end = nullptr;
  lo = std::strtod(text, &end);
  if (end == text || *end != '-') return false;
  const char* rest = end + 1;
  hi = std::strtod(rest, &end);
  return end != rest && *end == '\0' && lo > 0 && hi >= lo && std::isfinite(hi);
}

struct Period {
  double begin_s, end_s;  // offsets from the run's start
};

struct Options {
  std::string mode = "steady", direction = "h2d", out;
  double duration_s = 60;
  int gpu = 0;
  std::uint64_t size = 64ull << 20;
  std::uint64_t seed = 1;
  double on_min = 0.5, on_max = 8, off_min = 2, off_max = 40;
  int depth = 0;  // 0: 256 MiB in flight, at least 4
};

std::vector<Period> Schedule(const Options& o) {
  std::vector<Period> periods;
  if (o.mode == "steady") {
    periods.push_back({0, o.duration_s});
    return periods;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> on(o.on_min, o.on_max), off(o.off_min, o.off_max);
  double t = off(rng);
  while (t < o.duration_s) {
    const double end = std::min(o.duration_s, t + on(rng));
    periods.push_back({t, end});
    t = end + off(rng);
  }
  return periods;
}

// Seconds of [a, b) that periods cover.
double OnTime(const std::vector<Period>& periods, double a, double b) {
  double s = 0;
  for (const Period& p : periods) s += std::max(0.0, std::min(b, p.end_s) - std::max(a, p.begin_s));
  return s;
}

// One direction's copies: its own stream, buffers and ring of event pairs.
struct Lane {
  bool h2d = true;
  cudaStream_t stream = nullptr;
  void *host = nullptr, *device = nullptr;
  std::vector<cudaEvent_t> start, end;  // depth + 1 pairs: see Retire()
  std::vector<double> slot_bytes;
  std::uint64_t bytes = 0, copies = 0;
  double copy_s = 0;  // the lane's stream copying: copies on one stream never overlap
  // The newest retired event and its time since the run's anchor event.
  cudaEvent_t last = nullptr;
  double last_s = 0;
};

class Run {
 public:
  Run(const Options& o, std::vector<Period> periods)
      : o_(o),
        periods_(std::move(periods)),
        depth_(o.depth > 0 ? o.depth
                           : static_cast<int>(
                                 std::clamp<std::uint64_t>((256ull << 20) / o.size, 4, 1024))) {}

  void Prepare() {
    Check(cudaSetDevice(o_.gpu), "cudaSetDevice");
    std::vector<bool> dirs;
    if (o_.direction != "d2h") dirs.push_back(true);
    if (o_.direction != "h2d") dirs.push_back(false);
    for (bool h2d : dirs) {
      Lane lane;
      lane.h2d = h2d;
      Check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      Check(cudaMallocHost(&lane.host, o_.size), "cudaMallocHost");
      std::memset(lane.host, 0x5a, o_.size);
      Check(cudaMalloc(&lane.device, o_.size), "cudaMalloc");
      Check(cudaMemset(lane.device, 0xa5, o_.size), "cudaMemset");
      lane.start.resize(depth_ + 1);
      lane.end.resize(depth_ + 1);
      for (int i = 0; i <= depth_; ++i) {
        Check(cudaEventCreate(&lane.start[i]), "cudaEventCreate");
        // The thread sleeps in the driver rather than spinning a core while it waits.
        Check(cudaEventCreateWithFlags(&lane.end[i], cudaEventBlockingSync), "cudaEventCreate");
      }
      lane.slot_bytes.assign(Slots() + 1, 0);  // + 1: the drain after the last period
      lanes_.push_back(lane);
    }
    // A warm-up copy per lane, so the first slot does not carry the first copy's setup.
    for (Lane& lane : lanes_) Enqueue(lane, 0);
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    Check(cudaEventCreate(&anchor_), "cudaEventCreate");
  }

  void Go() {
    Check(cudaEventRecord(anchor_, lanes_[0].stream), "cudaEventRecord");
    Check(cudaEventSynchronize(anchor_), "cudaEventSynchronize");
    t0_ = Clock::now();
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    realtime0_ = ts.tv_sec + ts.tv_nsec / 1e9;
    for (Lane& lane : lanes_) {
      lane.last = anchor_;
      lane.last_s = 0;
    }
    std::vector<std::thread> threads;
    for (Lane& lane : lanes_) threads.emplace_back([this, &lane] { Drive(lane); });
    for (std::thread& t : threads) t.join();
    // Bursts may end before --duration does: the record still covers all of it.
    while (!g_stop && Seconds(Clock::now()) < o_.duration_s) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(std::min(0.05, o_.duration_s - Seconds(Clock::now()))));
    }
    stopped_early_ = g_stop != 0;
    ended_s_ = Seconds(Clock::now());
  }

  int Write(std::FILE* out) const {
    const double until = std::min(ended_s_, o_.duration_s);
    std::vector<double> full_slot_rates;
    double bytes = 0;  // in the slots of the run: not what drained after its end
    for (std::size_t k = 0; k < Slots() && k * kSlotS < until; ++k) {
      double b = 0;
      for (const Lane& lane : lanes_) b += lane.slot_bytes[k];
      bytes += b;
      const double a = k * kSlotS;
      const double on = OnTime(periods_, a, std::min(until, a + kSlotS));
      if (on >= kSlotS - 1e-9) full_slot_rates.push_back(b / kSlotS);
      std::fprintf(out, "{\"t\": %.3f, \"bytes\": %.0f, \"busy\": %s, \"on_s\": %.4f}\n",
                   realtime0_ + a, b, on > 0 ? "true" : "false", on);
    }
    const double active_s = OnTime(periods_, 0, until);
    std::sort(full_slot_rates.begin(), full_slot_rates.end());
    const double slot_median =
        full_slot_rates.empty() ? 0 : full_slot_rates[full_slot_rates.size() / 2];
    int started = 0;
    for (const Period& p : periods_) started += p.begin_s < until;
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, o_.gpu);
    char bus[32] = "";
    cudaDeviceGetPCIBusId(bus, sizeof bus, o_.gpu);

    std::string lanes;
    double copy_rate = 0;  // each lane's bytes over its copying time, summed
    for (const Lane& lane : lanes_) {
      if (lane.copy_s > 0) copy_rate += lane.bytes / lane.copy_s;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s\"%s\": {\"bytes\": %" PRIu64 ", \"copies\": %" PRIu64
                    ", \"copy_s\": %.4f, \"gb_per_s_while_copying\": %.4f}",
                    lanes.empty() ? "" : ", ", lane.h2d ? "h2d" : "d2h", lane.bytes, lane.copies,
                    lane.copy_s, lane.copy_s > 0 ? lane.bytes / lane.copy_s / 1e9 : 0.0);
      lanes += buf;
    }
    std::string summary;
    char buf[1024];
    std::snprintf(
        buf, sizeof buf,
        "{\"summary\": {\"program\": \"xferd_workload\", \"mode\": \"%s\", \"direction\": \"%s\", "
        "\"gpu\": %d, \"device\": \"%s\", \"pci_bus_id\": \"%s\", \"size_bytes\": %" PRIu64
        ", \"depth\": %d, \"seed\": %" PRIu64
        ", \"slot_s\": %.1f, \"start_realtime_s\": %.3f, \"end_realtime_s\": %.3f, "
        "\"duration_s\": %.3f, \"stopped_early\": %s, \"periods_started\": %d, \"active_s\": "
        "%.4f, \"bytes\": %.0f, \"gb_per_s\": %.4f, \"full_slots\": %zu, "
        "\"slot_gb_per_s_median\": %.4f, \"copy_gb_per_s\": %.4f, \"per_direction\": {",
        o_.mode.c_str(), o_.direction.c_str(), o_.gpu, prop.name, bus, o_.size, depth_, o_.seed,
        kSlotS, realtime0_, realtime0_ + ended_s_, o_.duration_s, stopped_early_ ? "true" : "false",
        started, active_s, bytes, active_s > 0 ? bytes / active_s / 1e9 : 0.0,
        full_slot_rates.size(), slot_median / 1e9, copy_rate / 1e9);
    summary = buf + lanes + "}}}";
    std::fprintf(out, "%s\n", summary.c_str());
    std::printf("%s\n", summary.c_str());
    return std::ferror(out) ? 73 : 0;
  }

 private:
  std::size_t Slots() const { return static_cast<std::size_t>(std::ceil(o_.duration_s / kSlotS)); }
  double Seconds(Clock::time_point t) const {
    return std::chrono::duration<double>(t - t0_).count();
  }

  void Enqueue(Lane& lane, int i) {
    Check(cudaEventRecord(lane.start[i], lane.stream), "cudaEventRecord");
    Check(
        lane.h2d
            ? cudaMemcpyAsync(lane.device, lane.host, o_.size, cudaMemcpyHostToDevice, lane.stream)
            : cudaMemcpyAsync(lane.host, lane.device, o_.size, cudaMemcpyDeviceToHost, lane.stream),
        "cudaMemcpyAsync");
    Check(cudaEventRecord(lane.end[i], lane.stream), "cudaEventRecord");
  }

  // Waits for copy i and books it. The ring holds depth + 1 pairs and at most depth are in
  // flight, so the pair retired last (lane.last) is never re-recorded before the next
  // retirement measures from it.
  void Retire(Lane& lane, int i) {
    Check(cudaEventSynchronize(lane.end[i]), "cudaEventSynchronize");
    float to_start = 0, copy = 0;
    Check(cudaEventElapsedTime(&to_start, lane.last, lane.start[i]), "cudaEventElapsedTime");
    Check(cudaEventElapsedTime(&copy, lane.start[i], lane.end[i]), "cudaEventElapsedTime");
    const double s = lane.last_s + to_start / 1e3, e = s + copy / 1e3;
    lane.last = lane.end[i];
    lane.last_s = e;
    lane.bytes += o_.size;
    lane.copies += 1;
    lane.copy_s += e - s;
    // Spread the bytes over the slots the copy overlapped, in proportion.
    const double len = std::max(e - s, 1e-9);
    const std::size_t last_slot = lane.slot_bytes.size() - 1;
    for (std::size_t k = static_cast<std::size_t>(std::max(0.0, s) / kSlotS);
         k <= last_slot && k * kSlotS < e; ++k) {
      const double overlap = std::min(e, (k + 1) * kSlotS) - std::max(s, k * kSlotS);
      if (overlap > 0) lane.slot_bytes[std::min(k, last_slot)] += o_.size * overlap / len;
    }
  }

  void Drive(Lane& lane) {
    Check(cudaSetDevice(o_.gpu), "cudaSetDevice");
    const int ring = depth_ + 1;
    int tail = 0, in_flight = 0;
    for (const Period& p : periods_) {
      // Off period: sleep in short steps so a signal ends the run promptly.
      while (!g_stop && Seconds(Clock::now()) < p.begin_s) {
        const double left = p.begin_s - Seconds(Clock::now());
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.05)));
      }
      if (g_stop) break;
      while (!g_stop && Seconds(Clock::now()) < p.end_s) {
        if (in_flight == depth_) {
          Retire(lane, tail);
          tail = (tail + 1) % ring;
          --in_flight;
        }
        Enqueue(lane, (tail + in_flight) % ring);
        ++in_flight;
      }
      for (; in_flight > 0; --in_flight) {
        Retire(lane, tail);
        tail = (tail + 1) % ring;
      }
    }
  }

  const Options& o_;
  const std::vector<Period> periods_;
  const int depth_;
  std::vector<Lane> lanes_;
  cudaEvent_t anchor_ = nullptr;
  Clock::time_point t0_;
  double realtime0_ = 0, ended_s_ = 0;
  bool stopped_early_ = false;
};

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --out FILE [--mode steady|bursts] [--direction h2d|d2h|bidir] "
               "[--duration S] [--gpu N] [--size 64MiB] [--seed N] [--on MIN-MAX] "
               "[--off MIN-MAX] [--depth N]\n",
               argv0);
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(argv[0]);
    const char* v = argv[i + 1];
    char* end = nullptr;
    bool ok = true;
    if (flag == "--out") {
      o.out = v;
    } else if (flag == "--mode") {
      o.mode = v;
      ok = o.mode == "steady" || o.mode == "bursts";
    } else if (flag == "--direction") {
      o.direction = v;
      ok = o.direction == "h2d" || o.direction == "d2h" || o.direction == "bidir";
    } else if (flag == "--duration") {
      o.duration_s = std::strtod(v, &end);
      ok = *end == '\0' && o.duration_s > 0 && o.duration_s <= 7 * 86400;
    } else if (flag == "--gpu") {
      o.gpu = static_cast<int>(std::strtol(v, &end, 10));
      ok = *end == '\0' && o.gpu >= 0;
    } else if (flag == "--size") {
      o.size = ParseSize(v);
      ok = o.size > 0;
    } else if (flag == "--seed") {
      o.seed = std::strtoull(v, &end, 10);
      ok = *end == '\0';
    } else if (flag == "--on") {
      ok = ParseRange(v, o.on_min, o.on_max);
    } else if (flag == "--off") {
      ok = ParseRange(v, o.off_min, o.off_max);
    } else if (flag == "--depth") {
      o.depth = static_cast<int>(std::strtol(v, &end, 10));
      ok = *end == '\0' && o.depth >= 2 && o.depth <= 4096;
    } else {
      return Usage(argv[0]);
    }
    if (!ok) {
      std::fprintf(stderr, "xferd_workload: bad value for %s: '%s'\n", flag.c_str(), v);
      return Usage(argv[0]);
    }
  }
  if (o.out.empty()) {
    std::fprintf(stderr, "xferd_workload: --out FILE is required (the per-slot record)\n");
    return Usage(argv[0]);
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    std::fprintf(stderr, "xferd_workload: no NVIDIA driver/GPU (%s)\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 69;
  }
  if (o.gpu >= count) {
    std::fprintf(stderr, "xferd_workload: --gpu %d, but there are %d GPU(s): 0..%d\n", o.gpu, count,
                 count - 1);
    return 64;
  }
  std::FILE* out = std::fopen(o.out.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "xferd_workload: cannot write %s: %s\n", o.out.c_str(),
                 std::strerror(errno));
    return 73;
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  Run run(o, Schedule(o));
  run.Prepare();
  run.Go();
  const int rc = run.Write(out);
  return std::fclose(out) == 0 ? rc : 73;
}
