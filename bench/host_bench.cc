// Google Benchmark of the daemon's hot host paths, on simulated GPUs (no device time):
//   - recording one default cycle's samples into the metrics (what the probe thread does
//     after each probe), for 1, 8 and 64 GPUs;
//   - the health update of a cycle (HealthTracker::Observe + Metrics::RecordHealth);
//   - rendering /metrics in full (prometheus-cpp's TextSerializer over the registry plus
//     the procfs process metrics), with the bytes and series of the exposition as
//     counters; and a scrape as `xferd run` answers it, the registry's text cached;
//   - the process metrics alone (procfs reads on every scrape);
//   - one poll of the link watch over an 8-GPU node's PCIe paths (the fake tree
//     tests/data/sysfs/hgx-8gpu, or the tree XFERD_LINK_WATCH_ROOT names, e.g. /sys on a GPU
//     host): the sysfs reader as the daemon runs it (attributes kept open, one pread each),
//     the same files opened and read at every poll instead, and the watch's whole poll
//     (reading and counting), back to back and as the daemon's thread makes it, after a
//     sleep (cold caches, the wake-up counted). `core_ppm_at_2s` is the share of one core it
//     takes at the default interval of 2 s, in millionths: the CPU time of one poll / 2 s
//     (the budget, 0.01 % of a core, is 100).
//
//   build-bench/bench/xferd_bench_host [--benchmark_filter=...] [--benchmark_format=json]
//
// Figures and how to read them: docs/performance.md.
#include <benchmark/benchmark.h>
#include <prometheus/registry.h>
#include <time.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/health_tracker.h"
#include "core/link_watch.h"
#include "core/plan.h"
#include "core/scheduler.h"
#include "exporter/exposition.h"
#include "exporter/metrics.h"
#include "exporter/process_metrics.h"
#include "exporter/routes.h"
#include "platform/files.h"
#include "probes/sim/sim_topology.h"
#include "xferd/probes/link_watch.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::exporter {
namespace {

using config::Config;
using namespace core;
using namespace web;

// One cycle of one GPU as the scheduler hands it to the service.
struct GpuCycle {
  probes::DeviceInfo device;
  probes::LinkPath link_path;
  std::vector<probes::ProbeSample> samples;
};

// `gpus` simulated GPUs with the default config, their default-cycle samples taken from
// the simulated device at time_scale 0 (the durations are the simulated ones; nothing
// sleeps), and a registry already holding `warm_cycles` cycles, so every series the
// daemon exports in steady state (baselines included) exists.
class SimulatedFleet {
 public:
  SimulatedFleet(int gpus, int warm_cycles)
      : backend_(Options(gpus)), health_(config_), metrics_(*registry_) {
    metrics_.SetBuildInfo();
    metrics_.SetPlan(config_);
    const auto plan = PlanProbes(config_);
    for (const auto& device : backend_.Devices()) {
      metrics_.SetDevice(device);
      GpuCycle cycle{device, backend_.ReadLinkPath(device.index), {}};
      for (const auto& spec : plan) cycle.samples.push_back(backend_.Run(device.index, spec));
      cycles_.push_back(std::move(cycle));
    }
    for (int i = 0; i < warm_cycles; ++i) {
      RecordSamples();
      ObserveHealth();
    }
  }

  // What the scheduler's callbacks do during one cycle.
  void RecordSamples() {
    for (const auto& c : cycles_) {
      metrics_.RecordLinkPath(c.device.index, c.link_path);
      for (const auto& s : c.samples) {
        metrics_.RecordSample(
            c.device, s,
            health_.Baseline(c.device.uuid, s.spec.mode, s.spec.direction, s.spec.size_bytes));
      }
    }
    metrics_.RecordCycle(0.5, CycleResult::kOk);
  }

  // What the service does after a cycle, per GPU.
  void ObserveHealth() {
    for (const auto& c : cycles_) {
      CycleObservation obs;
      obs.device = c.device;
      obs.link_path = c.link_path;
      obs.samples = c.samples;
      metrics_.RecordHealth(health_.Observe(obs));
    }
  }

  std::size_t SamplesPerCycle() const {
    std::size_t n = 0;
    for (const auto& c : cycles_) n += c.samples.size();
    return n;
  }
  std::size_t DurationsPerCycle() const {
    std::size_t n = 0;
    for (const auto& c : cycles_)
      for (const auto& s : c.samples) n += s.durations_s.size();
    return n;
  }

  Collectables Served() const { return {registry_, process_metrics_}; }
  // The routes `xferd run` serves: the registry cached per change, process_* per scrape.
  ExporterRoutes Routes() {
    ExporterRoutes routes;
    routes.cached_collectables = {registry_};
    routes.generation = [this] { return metrics_.Generation(); };
    routes.collectables = {process_metrics_};
    return routes;
  }
  Collectables RegistryOnly() const { return {registry_}; }

 private:
  static probes::SimOptions Options(int gpus) {
    probes::SimOptions o;
    o.devices = gpus;
    o.time_scale = 0;
    return o;
  }

  Config config_;
  probes::SimBackend backend_;
  HealthTracker health_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::shared_ptr<ProcessMetrics> process_metrics_ = std::make_shared<ProcessMetrics>();
  Metrics metrics_;
  std::vector<GpuCycle> cycles_;
};

// Series (sample lines) in a text exposition.
std::size_t CountSeries(std::string_view text) {
  std::size_t series = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos && text[pos] != '#') ++series;
    pos = end + 1;
  }
  return series;
}

// Enough warm cycles for every baseline to be learned (kMinBaselineCycles) and exported.
constexpr int kWarmCycles = kMinBaselineCycles + 2;

// The GPU counts each benchmark of a fleet runs with, timed in microseconds.
void OverGpus(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(8)->Arg(64)->ArgName("gpus")->Unit(benchmark::kMicrosecond);
}

// Renders `collectables` as the exposition text on every iteration; the last text.
std::string RenderEachIteration(benchmark::State& state, const Collectables& collectables) {
  std::string body;
  for (auto _ : state) {
    body = RenderExposition(collectables);
    benchmark::DoNotOptimize(body.data());
  }
  return body;
}

void BM_RecordCycle(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  SimulatedFleet fleet(gpus, kWarmCycles);
  for (auto _ : state) fleet.RecordSamples();
  state.counters["samples"] = static_cast<double>(fleet.SamplesPerCycle());
  state.counters["observations"] = static_cast<double>(fleet.DurationsPerCycle());
  state.counters["cycles/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RecordCycle)->Apply(OverGpus);

void BM_HealthCycle(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  SimulatedFleet fleet(gpus, kWarmCycles);
  for (auto _ : state) fleet.ObserveHealth();
  state.counters["samples"] = static_cast<double>(fleet.SamplesPerCycle());
}
BENCHMARK(BM_HealthCycle)->Apply(OverGpus);

// One scrape's body, as the /metrics handler renders it (registry + process metrics).
void BM_RenderMetrics(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  SimulatedFleet fleet(gpus, kWarmCycles);
  const std::string body = RenderEachIteration(state, fleet.Served());
  const auto series = static_cast<double>(CountSeries(body));
  state.counters["bytes"] = static_cast<double>(body.size());
  state.counters["series"] = series;
  state.counters["bytes_per_gpu"] = static_cast<double>(body.size()) / gpus;
  state.counters["series_per_gpu"] = series / gpus;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(body.size()));
}
BENCHMARK(BM_RenderMetrics)->Apply(OverGpus);

// A scrape as `xferd run` answers it between cycles: the /metrics handler with the
// registry's text cached and process_* read fresh (no HTTP; that is http_compare.sh's).
void BM_MetricsHandler(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  SimulatedFleet fleet(gpus, kWarmCycles);
  const HttpServer::Handler handler = MakeExporterHandler(fleet.Routes());
  HttpRequest request;  // no Accept-Encoding: the plain text, as the figures were taken
  request.method = "GET";
  request.path = "/metrics";
  std::size_t bytes = 0;
  for (auto _ : state) {
    HttpResponse response = handler(request);
    bytes = response.body.size();
    benchmark::DoNotOptimize(response.body.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_MetricsHandler)->Apply(OverGpus);

// The registry alone: what the cache saves on every scrape between changes.
void BM_RenderRegistry(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  SimulatedFleet fleet(gpus, kWarmCycles);
  const std::string body = RenderEachIteration(state, fleet.RegistryOnly());
  state.counters["bytes"] = static_cast<double>(body.size());
  state.counters["series"] = static_cast<double>(CountSeries(body));
}
BENCHMARK(BM_RenderRegistry)->Apply(OverGpus);

// procfs reads of the process_* metrics: paid on every scrape, independent of GPUs.
void BM_ProcessMetrics(benchmark::State& state) {
  ProcessMetrics process;
  std::size_t families = 0;
  for (auto _ : state) {
    auto collected = process.Collect();
    families = collected.size();
    benchmark::DoNotOptimize(collected.data());
  }
  state.counters["families"] = static_cast<double>(families);
}
BENCHMARK(BM_ProcessMetrics)->Unit(benchmark::kMicrosecond);

// --- The link watch ---------------------------------------------------------------------

std::filesystem::path LinkWatchRoot() {
  if (const char* root = std::getenv("XFERD_LINK_WATCH_ROOT"); root != nullptr && *root != 0) {
    return root;
  }
  return std::filesystem::path(XFERD_SOURCE_DIR) / "tests/data/sysfs/hgx-8gpu";
}

// Every NVIDIA GPU of the tree with the links the watch reads, as the daemon sets them up.
std::vector<probes::WatchedGpu> WatchedGpus(probes::LinkStateReader& reader) {
  const auto root = LinkWatchRoot();
  std::vector<probes::WatchedGpu> gpus;
  int index = 0;
  for (const std::string& bdf : probes::FindNvidiaGpus(root)) {
    probes::DeviceInfo device;
    device.index = index++;
    device.uuid = "GPU-" + bdf;
    device.pci_bus_id = bdf;
    gpus.push_back({device, reader.Links(device, probes::ReadLinkPath(root, bdf))});
  }
  return gpus;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void ReportPollCost(benchmark::State& state, double cpu_s, std::size_t gpus, std::size_t files) {
  const double per_poll =
      cpu_s / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
  state.counters["gpus"] = static_cast<double>(gpus);
  state.counters["files"] = static_cast<double>(files);
  state.counters["cpu_us_per_poll"] = per_poll * 1e6;
  state.counters["core_ppm_at_2s"] = per_poll / 2.0 * 1e6;  // the budget: 100 (0.01 %)
}

// The devices at the ends of the GPUs' links, each shared one once.
std::set<std::string> LinkEnds(const std::vector<probes::WatchedGpu>& gpus) {
  std::set<std::string> ends;
  for (const auto& g : gpus) {
    for (const auto& l : g.links) ends.insert(l.bdf);
  }
  return ends;
}

std::size_t FilesRead(const std::vector<probes::WatchedGpu>& gpus) {
  return 2 * LinkEnds(gpus).size();  // current_link_speed and current_link_width of each
}

std::vector<probes::DeviceInfo> DevicesOf(const std::vector<probes::WatchedGpu>& gpus) {
  std::vector<probes::DeviceInfo> devices;
  for (const auto& g : gpus) devices.push_back(g.device);
  return devices;
}

// core::LinkWatcher over every GPU of the tree, set up as the daemon sets it up and polled
// once (its files open, as after the first poll).
struct TreeWatch {
  TreeWatch()
      : root(LinkWatchRoot()),
        reader(probes::MakeLinkStateReader(root, nullptr)),
        gpus(WatchedGpus(*reader)),
        watch(*reader, DevicesOf(gpus), Settings{}, clock, {}) {
    for (const auto& g : gpus)
      watch.SetPath(g.device, probes::ReadLinkPath(root, g.device.pci_bus_id));
    watch.Poll();
  }
  const std::filesystem::path root;
  const std::unique_ptr<probes::LinkStateReader> reader;
  const std::vector<probes::WatchedGpu> gpus;
  SteadyClock clock;
  LinkWatcher watch;
};

// What the daemon's link watch reads at each poll: every link of every GPU, each shared link
// once, through attributes kept open.
void BM_LinkWatchRead(benchmark::State& state) {
  const auto reader = probes::MakeLinkStateReader(LinkWatchRoot(), nullptr);
  const auto gpus = WatchedGpus(*reader);
  std::vector<probes::LinkWatchReading> readings;
  reader->Read(gpus, readings);  // opens the files, as the first poll does
  const double start = ThreadCpuSeconds();
  for (auto _ : state) {
    reader->Read(gpus, readings);
    benchmark::DoNotOptimize(readings.data());
  }
  ReportPollCost(state, ThreadCpuSeconds() - start, gpus.size(), FilesRead(gpus));
}
BENCHMARK(BM_LinkWatchRead)->Unit(benchmark::kMicrosecond);

// The same files opened, read and closed at every poll (the way ReadLinkPath reads them).
void BM_LinkWatchReadReopening(benchmark::State& state) {
  const auto root = LinkWatchRoot();
  const auto reader = probes::MakeLinkStateReader(root, nullptr);
  const auto gpus = WatchedGpus(*reader);
  const std::set<std::string> ends = LinkEnds(gpus);
  const double start = ThreadCpuSeconds();
  for (auto _ : state) {
    for (const std::string& bdf : ends) {
      const auto dir = root / "bus/pci/devices" / bdf;
      auto speed = platform::TryReadFileBounded(dir / "current_link_speed", 4096);
      auto width = platform::TryReadFileBounded(dir / "current_link_width", 4096);
      benchmark::DoNotOptimize(speed);
      benchmark::DoNotOptimize(width);
    }
  }
  ReportPollCost(state, ThreadCpuSeconds() - start, gpus.size(), 2 * ends.size());
}
BENCHMARK(BM_LinkWatchReadReopening)->Unit(benchmark::kMicrosecond);

// The watch's whole poll (core::LinkWatcher::Poll): the reading and the counting rule.
void BM_LinkWatchPoll(benchmark::State& state) {
  TreeWatch tree;
  const double start = ThreadCpuSeconds();
  for (auto _ : state) tree.watch.Poll();
  ReportPollCost(state, ThreadCpuSeconds() - start, tree.gpus.size(), FilesRead(tree.gpus));
}
BENCHMARK(BM_LinkWatchPoll)->Unit(benchmark::kMicrosecond);

// The same poll as the daemon's thread makes it: after a sleep (caches and branch predictors
// cold, the thread woken), so the CPU time counted includes the wake-up.
void BM_LinkWatchPollAfterSleep(benchmark::State& state) {
  TreeWatch tree;
  const double start = ThreadCpuSeconds();
  for (auto _ : state) {
    tree.clock.SleepUntil(tree.clock.Now() + std::chrono::milliseconds(state.range(0)), {});
    tree.watch.Poll();
  }
  ReportPollCost(state, ThreadCpuSeconds() - start, tree.gpus.size(), FilesRead(tree.gpus));
}
BENCHMARK(BM_LinkWatchPollAfterSleep)->Arg(200)->Iterations(25)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace xferd::exporter
