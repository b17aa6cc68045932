#include "exporter/metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/contention.h"
#include "core/host_groups.h"
#include "core/link_errors.h"
#include "core/plan.h"
#include "unit/exporter/recorded_host.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/link_errors.h"
#include "xferd/probes/sim_backend.h"
#include "xferd/probes/stats.h"

namespace xferd::exporter {

using namespace xferd::core;
namespace {

using probes::Direction;
using probes::TransferMode;

std::string Expose(prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

// Sample lines (not comments) of the exposition that carry `needle`.
std::vector<std::string> SeriesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

probes::SimOptions FastSim(int gen = 4, int width = 16, std::uint64_t seed = 7) {
  probes::SimOptions o;
  o.seed = seed;
  o.time_scale = 0;
  o.link_gen = gen;
  o.link_width = width;
  return o;
}

probes::ProbeSpec Spec(TransferMode mode, Direction dir, int iterations = 20,
                       std::uint64_t size = 64ull << 20) {
  probes::ProbeSpec spec;
  spec.mode = mode;
  spec.direction = dir;
  spec.size_bytes = size;
  spec.iterations = iterations;
  spec.deadline = std::chrono::hours(1);
  return spec;
}

// One cycle on every device as the service runs it: link, every probe, health, cycle.
// One cycle as the scheduler runs it: each probe inside its link-traffic window (the
// simulated link counters), judged for contention, then recorded.
// With `errors`, the path's link-error counters are read and recorded as the service does.
void RunCycle(probes::SimBackend& sim, Metrics& metrics, HealthTracker& health,
              const core::Settings& settings = {}, LinkErrorTracker* errors = nullptr) {
  const auto load = probes::MakeSimGpuLoadReader(0, 0, &sim);
  const auto error_reader = probes::MakeSimLinkErrorReader(sim);
  static SteadyTime now{};
  for (const probes::DeviceInfo& dev : sim.Devices()) {
    CycleObservation obs;
    obs.device = dev;
    obs.link_path = sim.ReadLinkPath(dev.index);
    metrics.RecordLinkPath(dev.index, obs.link_path);
    if (errors != nullptr) {
      now += std::chrono::seconds(60);
      metrics.RecordLinkErrors(dev,
                               errors->Observe(dev, error_reader->Read(dev, obs.link_path), now));
      obs.link_errors = errors->Growth(dev.uuid);
      // The link watch has read the GPU's links (its counters start at 0), as in the daemon.
      obs.link_watch.watching = true;
      metrics.RecordLinkWatch(dev.index, obs.link_watch);
    }
    for (const auto& [mode, dir] : probes::AllModeDirections()) {
      load->BeginWindow(dev);
      probes::ProbeSample s = sim.Run(dev.index, Spec(mode, dir));
      s.traffic = load->EndWindow(dev);
      s.contention = core::JudgeContention(s, {});
      metrics.RecordSample(dev, s, health.Baseline(dev.uuid, mode, dir, s.spec.size_bytes),
                           core::KeepsHistogram(s.spec, settings));
      obs.samples.push_back(std::move(s));
    }
    metrics.RecordHealth(health.Observe(obs));
    metrics.RecordSchedule(dev.index, 1.0, 0);  // as the service does after each cycle
  }
  metrics.RecordCycle(0.5, CycleResult::kOk);
}

// histogram_quantile as Prometheus computes it (promql/quantile.go, bucketQuantile): find
// the bucket holding rank q x count, interpolate linearly inside it; the first bucket
// starts at 0; a rank in +Inf returns the largest finite bound.
double HistogramQuantile(double q, const prometheus::ClientMetric::Histogram& h) {
  const auto& b = h.bucket;
  const double total = static_cast<double>(b.back().cumulative_count);
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = q * total;
  std::size_t i = 0;
  while (i < b.size() && static_cast<double>(b[i].cumulative_count) < rank) ++i;
  if (std::isinf(b[i].upper_bound)) return b[b.size() - 2].upper_bound;
  double start = 0, below = 0;
  if (i > 0) {
    start = b[i - 1].upper_bound;
    below = static_cast<double>(b[i - 1].cumulative_count);
  }
  const double in_bucket = static_cast<double>(b[i].cumulative_count) - below;
  return start + (b[i].upper_bound - start) * (rank - below) / in_bucket;
}

const prometheus::ClientMetric* Find(const std::vector<prometheus::MetricFamily>& families,
                                     const std::string& name,
                                     const std::map<std::string, std::string>& labels) {
  for (const auto& f : families) {
    if (f.name != name) continue;
    for (const auto& m : f.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : m.label) have[l.name] = l.value;
      bool match = true;
      for (const auto& [k, v] : labels) match = match && have[k] == v;
      if (match) return &m;
    }
  }
  return nullptr;
}

TEST(DurationBuckets, GeometricOnASharedGridAroundTheAnchor) {
  const auto b = DurationBuckets(2.5e-3);
  ASSERT_EQ(b.size(), 10u);
  for (std::size_t i = 1; i < b.size(); ++i) EXPECT_GT(b[i], b[i - 1]);
  for (std::size_t i = 1; i < 9; ++i) EXPECT_NEAR(b[i] / b[i - 1], std::exp2(1.0 / 8), 1e-12);
  EXPECT_LT(b[0], 2.5e-3 * 0.95);  // fine buckets start below the anchor
  EXPECT_GT(b[0], 2.5e-3 * 0.9);
  EXPECT_GT(b[8], 2.5e-3 * 1.7);  // and reach well above it (the slow tail)
  EXPECT_GE(b.back(), 2.5e-3 * 3.5);
  // Nearby anchors give the very same boundaries: fleets can sum by le.
  const auto shared = DurationBuckets(2.5e-3 * 1.01);
  EXPECT_EQ(std::set<double>(b.begin(), b.end()).count(shared[5]), 1u);
  // Nonsense anchors still give valid, increasing buckets.
  for (double bad : {0.0, -1.0, std::nan("")}) {
    const auto fallback = DurationBuckets(bad);
    ASSERT_EQ(fallback.size(), 10u);
    EXPECT_GT(fallback.front(), 0);
  }
}

TEST(Metrics, HistogramP99WithinTenPercentOfExact) {
  double worst = 0;
  // Links across the plausible range: Gen3 x16 to Gen5 x16, and a downtrained x8; the
  // default 64 MiB and a latency-bound 4 KiB, whose spread is far wider.
  struct Case {
    int gen, width;
    std::uint64_t size;
  };
  for (auto [gen, width, size] : std::vector<Case>{{3, 16, 64ull << 20},
                                                   {4, 8, 64ull << 20},
                                                   {4, 16, 64ull << 20},
                                                   {5, 16, 64ull << 20},
                                                   {4, 16, 4096}}) {
    prometheus::Registry registry;
    Metrics metrics(registry);
    probes::SimBackend sim(FastSim(gen, width));
    const probes::DeviceInfo dev = sim.Devices().at(0);
    metrics.SetDevice(dev);
    std::map<std::pair<TransferMode, Direction>, std::vector<double>> all;
    for (int cycle = 0; cycle < 50; ++cycle) {
      for (const auto& [mode, dir] : probes::AllModeDirections()) {
        const probes::ProbeSample s = sim.Run(0, Spec(mode, dir, 20, size));
        ASSERT_EQ(s.status, probes::ProbeStatus::kOk) << s.message;
        metrics.RecordSample(dev, s);
        auto& v = all[{mode, dir}];
        v.insert(v.end(), s.durations_s.begin(), s.durations_s.end());
      }
    }
    const auto families = registry.Collect();
    for (const auto& [pair, durations] : all) {
      SCOPED_TRACE("Gen" + std::to_string(gen) + " x" + std::to_string(width) + " " +
                   probes::FormatSize(size) + " " + std::string(probes::ToString(pair.first)) +
                   " " + std::string(probes::ToString(pair.second)));
      const auto* m = Find(families, "xferd_transfer_duration_seconds",
                           {{"gpu", "0"},
                            {"mode", std::string(probes::ToString(pair.first))},
                            {"direction", std::string(probes::ToString(pair.second))},
                            {"size", probes::FormatSize(size)}});
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(m->histogram.sample_count, durations.size());
      const double exact = probes::Quantile(durations, 0.99);
      const double estimate = HistogramQuantile(0.99, m->histogram);
      EXPECT_NEAR(estimate / exact, 1.0, 0.10) << "exact " << exact << " estimate " << estimate;
      worst = std::max(worst, std::abs(estimate / exact - 1.0));
      // The median too, which the bandwidth panels use.
      EXPECT_NEAR(HistogramQuantile(0.5, m->histogram) / probes::Quantile(durations, 0.5), 1.0,
                  0.10);
    }
  }
  std::printf("worst p99 error of histogram_quantile against the exact p99: %.1f%%\n", 100 * worst);
}

TEST(Metrics, DefaultConfigStaysWithinSeriesBudget) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  metrics.SetBuildInfo();
  // GPUs on a typical path: each behind a PCIe switch (its two ports) below a root port.
  recording::RecordedHost host(recording::SimHost(), core::Settings{}, metrics);
  for (int i = 0; i < 3; ++i) host.Cycle();
  const std::string text = Expose(registry);
  const auto gpu0 = SeriesWith(text, "gpu=\"0\"");
  const auto gpu1 = SeriesWith(text, "gpu=\"1\"");
  EXPECT_LE(gpu0.size(), 300u);
  EXPECT_EQ(gpu0.size(), gpu1.size());
  // The arithmetic of docs/metrics.md: 294 per GPU; if this moves, update the doc.
  EXPECT_EQ(gpu0.size(), 294u) << text;
  // The link's, per GPU: generation and width, errors, the link watch's two counters.
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_").size() / 8, 6u + 21u + 2u);
  // And every family is there.
  for (const char* name : {"xferd_transfer_duration_seconds_bucket",
                           "xferd_transfer_duration_seconds_sum",
                           "xferd_transfer_duration_seconds_count",
                           "xferd_bandwidth_bytes_per_second{",
                           "xferd_bandwidth_baseline_bytes_per_second{",
                           "xferd_expected_bandwidth_bytes_per_second{",
                           "xferd_bandwidth_degraded{",
                           "xferd_diagnosis{",
                           "xferd_overlap_ratio{",
                           "xferd_pcie_link_generation{",
                           "xferd_pcie_link_width{",
                           "xferd_probe_runs_total{",
                           "xferd_probe_last_success_timestamp_seconds{",
                           "xferd_probe_device_seconds_total{",
                           "xferd_gpu_info{",
                           "xferd_device_info{",
                           "xferd_pcie_link_transitions_total{",
                           "xferd_pcie_link_reduced_seconds_total{",
                           "xferd_build_info{",
                           "xferd_cycles_total{",
                           "xferd_cycle_duration_seconds ",
                           "xferd_config_last_reload_successful ",
                           "xferd_state_write_errors_total ",
                           "xferd_textfile_write_errors_total ",
                           "xferd_foreign_traffic_bytes_per_second{",
                           "xferd_gpu_load_readable{",
                           "xferd_pcie_aer_errors_total{",
                           "xferd_pcie_aer_rootport_errors_total{",
                           "xferd_pcie_replays_total{",
                           "xferd_pcie_error_source_readable{"}) {
    EXPECT_FALSE(SeriesWith(text, name).empty()) << name;
  }
}

std::size_t AllSeries(const std::string& text) {
  return SeriesWith(text, "xferd_").size();
}

// The 8-GPU node (4 switches, 2 GPUs each): the series per host with the default config and
// with the headline histogram profile (docs/metrics.md, "Series budget").
TEST(Metrics, EightGpuHostStaysWithinItsSeriesBudget) {
  for (const auto profile :
       {core::Settings::Histograms::kAll, core::Settings::Histograms::kHeadline}) {
    core::Settings settings;
    settings.histograms = profile;
    prometheus::Registry registry;
    Metrics metrics(registry);
    metrics.SetBuildInfo();
    recording::RecordedHost node(recording::SimHost(), settings, metrics);
    ASSERT_EQ(node.sim().Devices().size(), 8u);
    for (int i = 0; i < 2; ++i) {
      node.Cycle();
      node.Groups();
    }
    const std::string text = Expose(registry);
    const bool all = profile == core::Settings::Histograms::kAll;
    // Per GPU: 294 of its own, 3 directions x 2 groups (host and its switch's uplink).
    EXPECT_EQ(SeriesWith(text, "gpu=\"0\"").size(), all ? 300u : 157u);
    // Per group: aggregate x 3 directions, expected x 2 bounds, info: 5 groups.
    EXPECT_EQ(SeriesWith(text, "group=\"").size(), 5u * 6u + 8u * 6u);
    const std::size_t host = AllSeries(text);
    std::printf("8-GPU host, histograms = \"%s\": %zu xferd_ series\n", all ? "all" : "headline",
                host);
    // The documented budgets: 300 (160 with headline histograms) per GPU, its concurrent
    // series included, 10 per group, 40 per process.
    EXPECT_LE(host, (all ? 300u : 160u) * 8 + 10 * 5 + 40);
  }
}

TEST(Metrics, ConcurrentRunSeries) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimOptions options = FastSim();
  options.sysfs_root = std::filesystem::path(XFERD_TEST_DATA_DIR) / "sysfs/hgx-8gpu";
  probes::SimBackend sim(options);
  core::HostGroup group;
  group.name = "uplink_0000:16:00.0";
  group.gpus = {0, 1};
  group.shared_link = "0000:16:00.0 Gen5 x16";
  group.capacity_bytes_per_s = probes::PcieBytesPerSecond(5, 16);
  core::GroupRun run;
  run.group = group;
  run.spec = Spec(probes::TransferMode::kPinned, probes::Direction::kH2D);
  run.devices = {sim.Devices()[0], sim.Devices()[1]};
  run.samples = sim.RunConcurrent({0, 1}, run.spec);
  metrics.RecordConcurrent(run, core::GroupBand(group, core::Settings{}));
  std::string text = Expose(registry);
  const double each = run.samples[0].MedianBandwidth();
  EXPECT_NEAR(each, 0.8 * probes::PcieBytesPerSecond(5, 16) / 2, 1e9);
  EXPECT_EQ(SeriesWith(text, "xferd_concurrent_bandwidth_bytes_per_second{").size(), 2u);
  EXPECT_NE(text.find("xferd_concurrent_group_info{gpus=\"0,1\",group=\"uplink_0000:16:00.0\","
                      "shared_link=\"0000:16:00.0 Gen5 x16\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(SeriesWith(text, "xferd_host_aggregate_bandwidth_bytes_per_second{").size(), 1u);
  EXPECT_EQ(SeriesWith(text, "xferd_host_aggregate_expected_bandwidth_bytes_per_second{").size(),
            2u);
  // A failed member: no aggregate rather than a stale one, and its own figure goes too.
  run.samples[1].status = probes::ProbeStatus::kError;
  metrics.RecordConcurrent(run, core::GroupBand(group, core::Settings{}));
  text = Expose(registry);
  EXPECT_TRUE(SeriesWith(text, "xferd_host_aggregate_bandwidth_bytes_per_second{").empty());
  EXPECT_EQ(SeriesWith(text, "xferd_concurrent_bandwidth_bytes_per_second{").size(), 1u);
  // New members replace the group's info series.
  run.group.gpus = {0, 1, 2};
  metrics.RecordConcurrent(run, core::GroupBand(group, core::Settings{}));
  EXPECT_EQ(SeriesWith(Expose(registry), "xferd_concurrent_group_info{").size(), 1u);
}

TEST(Metrics, CountersStartAtZeroForEveryProbedModeAndResult) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimBackend sim(FastSim());
  metrics.SetDevice(sim.Devices().at(0));
  metrics.SetPlan(core::Settings{});
  const std::string text = Expose(registry);
  const auto runs = SeriesWith(text, "xferd_probe_runs_total{");
  EXPECT_EQ(runs.size(), 30u);  // 6 modes x 5 results, contended included
  for (const auto& line : runs) EXPECT_EQ(line.substr(line.rfind(' ') + 1), "0") << line;
  // `unsupported` is what a GPU is, not an event: it comes with the first probe saying so.
  EXPECT_TRUE(SeriesWith(text, "result=\"unsupported\"").empty());
  metrics.RecordSkipped(0, TransferMode::kManaged, ProbeResult::kUnsupported);
  EXPECT_EQ(SeriesWith(Expose(registry), "result=\"unsupported\"").size(), 1u);
  EXPECT_EQ(SeriesWith(text, "xferd_cycles_total{").size(), 4u);
  EXPECT_EQ(SeriesWith(text, "xferd_diagnosis{").size(), 12u);
}

TEST(Metrics, AModeTheConfigDoesNotProbeHasNoSeries) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimBackend sim(FastSim());
  const probes::DeviceInfo dev = sim.Devices().at(0);
  // One cycle of what `settings` plans, as the service runs it.
  const auto run_planned = [&](Metrics& m, HealthTracker& health, const core::Settings& settings) {
    CycleObservation obs{dev, sim.ReadLinkPath(dev.index), {}};
    for (const probes::ProbeSpec& spec : core::PlanProbes(settings)) {
      obs.samples.push_back(sim.Run(dev.index, spec));
      m.RecordSample(dev, obs.samples.back());
    }
    m.RecordHealth(health.Observe(obs));
  };
  core::Settings pinned;
  pinned.modes = {TransferMode::kPinned};
  metrics.SetPlan(pinned);  // before or after SetDevice alike
  metrics.SetDevice(dev);
  HealthTracker health{pinned};
  run_planned(metrics, health, pinned);
  std::string text = Expose(registry);
  // Every result but unsupported, which comes with the first probe that reports it.
  EXPECT_EQ(SeriesWith(text, "xferd_probe_runs_total{").size(), 5u) << text;
  EXPECT_TRUE(SeriesWith(text, "mode=\"managed_prefetch\"").empty()) << text;
  EXPECT_TRUE(SeriesWith(text, "mode=\"pageable\"").empty()) << text;
  EXPECT_EQ(SeriesWith(text, "xferd_expected_bandwidth_bytes_per_second{").size(), 2u) << text;

  // A reload that adds managed_prefetch: its counters from 0, and its own band.
  core::Settings more = pinned;
  more.modes.push_back(TransferMode::kManagedPrefetch);
  metrics.SetPlan(more);
  health.Reconfigure(more);
  text = Expose(registry);
  EXPECT_EQ(SeriesWith(text, "xferd_probe_runs_total{gpu=\"0\",mode=\"managed_prefetch\"").size(),
            5u);
  run_planned(metrics, health, more);
  text = Expose(registry);
  EXPECT_EQ(SeriesWith(text, "xferd_expected_bandwidth_bytes_per_second{").size(), 4u) << text;
  EXPECT_EQ(SeriesWith(text,
                       "xferd_expected_bandwidth_bytes_per_second{bound=\"lower\","
                       "direction=\"h2d\",gpu=\"0\",mode=\"managed_prefetch\"}")
                .size(),
            1u)
      << text;
  // And one that drops it again: its band goes (what its counters counted stays).
  metrics.SetPlan(pinned);
  health.Reconfigure(pinned);
  run_planned(metrics, health, pinned);
  text = Expose(registry);
  EXPECT_EQ(SeriesWith(text, "xferd_expected_bandwidth_bytes_per_second{").size(), 2u) << text;
}

TEST(Metrics, SimulatedDeviceSaysSo) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimBackend sim(FastSim());
  metrics.SetDevice(sim.Devices().at(0));
  const auto info = SeriesWith(Expose(registry), "xferd_device_info{");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_NE(info[0].find("simulated=\"1\""), std::string::npos) << info[0];
  EXPECT_NE(info[0].find("uuid=\"SIM-"), std::string::npos) << info[0];
}

TEST(Metrics, ResultsVerdictsAndDiagnosisReachTheExposition) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimOptions options = FastSim();
  probes::SimFault downtrain;
  downtrain.kind = probes::SimFault::Kind::kDownTrain;
  downtrain.gen = 4;
  downtrain.width = 4;
  options.faults.push_back(downtrain);
  probes::SimBackend sim(options);
  const auto dev = sim.Devices().at(0);
  metrics.SetDevice(dev);
  core::Settings config;
  config.bands = {{"0", 20e9, 26e9}};  // the band of the healthy x16 link
  HealthTracker health(config);
  for (int i = 0; i < config.consecutive_bad; ++i) RunCycle(sim, metrics, health);
  metrics.RecordSkipped(0, TransferMode::kManaged, ProbeResult::kSkippedBusy);
  metrics.RecordConfigReload(false, 0);
  metrics.RecordStateWrite(false);
  metrics.RecordStateWrite(true);
  metrics.RecordTextfileWrite(false);

  const std::string text = Expose(registry);
  auto value = [&](const std::string& needle) {
    const auto lines = SeriesWith(text, needle);
    EXPECT_EQ(lines.size(), 1u) << needle;
    return lines.empty() ? std::nan("") : std::stod(lines[0].substr(lines[0].rfind(' ') + 1));
  };
  EXPECT_EQ(value("xferd_bandwidth_degraded{direction=\"h2d\",gpu=\"0\",mode=\"pinned\"}"), 1);
  EXPECT_EQ(value("xferd_diagnosis{cause=\"link_downtrained\",gpu=\"0\"}"), 1);
  EXPECT_EQ(value("xferd_diagnosis{cause=\"below_band\",gpu=\"0\"}"), 1);
  EXPECT_EQ(value("xferd_diagnosis{cause=\"numa_remote\",gpu=\"0\"}"), 0);
  EXPECT_EQ(value("xferd_pcie_link_width{gpu=\"0\",state=\"current\"}"), 4);
  EXPECT_EQ(value("xferd_pcie_link_width{gpu=\"0\",state=\"max\"}"), 16);
  EXPECT_EQ(value("xferd_expected_bandwidth_bytes_per_second{bound=\"lower\",gpu=\"0\"}"), 20e9);
  EXPECT_EQ(value("xferd_probe_runs_total{gpu=\"0\",mode=\"pinned\",result=\"ok\"}"),
            3 * config.consecutive_bad);  // h2d, d2h, bidir
  EXPECT_EQ(value("xferd_probe_runs_total{gpu=\"0\",mode=\"managed\",result=\"skipped_busy\"}"), 1);
  EXPECT_EQ(value("xferd_cycles_total{result=\"ok\"}"), config.consecutive_bad);
  EXPECT_EQ(value("xferd_config_last_reload_successful "), 0);
  EXPECT_EQ(value("xferd_state_write_errors_total "), 1);
  EXPECT_EQ(value("xferd_textfile_write_errors_total "), 1);
  EXPECT_GT(value("xferd_probe_device_seconds_total{gpu=\"0\"}"), 0);
}

TEST(Metrics, TheLinkWatchCountersFollowItsTotalsFromZero) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  core::LinkWatchState w;
  metrics.RecordLinkWatch(0, w);  // not watching (no link to read): no series
  EXPECT_TRUE(SeriesWith(Expose(registry), "xferd_pcie_link_").empty());
  w.watching = true;
  metrics.RecordLinkWatch(0, w);
  EXPECT_EQ(SeriesWith(Expose(registry), "xferd_pcie_link_transitions_total{gpu=\"0\"} 0").size(),
            1u);
  EXPECT_EQ(
      SeriesWith(Expose(registry), "xferd_pcie_link_reduced_seconds_total{gpu=\"0\"} 0").size(),
      1u);
  // The watch polls every few seconds: only a change moves the generation (and re-renders).
  const std::uint64_t generation = metrics.Generation();
  metrics.RecordLinkWatch(0, w);
  EXPECT_EQ(metrics.Generation(), generation);
  w.transitions = 6;
  w.reduced_s = 2.5;
  metrics.RecordLinkWatch(0, w);
  EXPECT_GT(metrics.Generation(), generation);
  w.transitions = 9;
  metrics.RecordLinkWatch(0, w);
  const std::string text = Expose(registry);
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_link_transitions_total{gpu=\"0\"} 9").size(), 1u) << text;
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_link_reduced_seconds_total{gpu=\"0\"} 2.5").size(), 1u)
      << text;
}

TEST(Metrics, AnUnreadableLinkWindowLeavesNoForeignTrafficSeries) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimBackend sim(FastSim());
  const probes::DeviceInfo dev = sim.Devices().at(0);
  metrics.SetDevice(dev);
  const auto load = probes::MakeSimGpuLoadReader(0, 0, &sim);
  load->BeginWindow(dev);
  probes::ProbeSample s = sim.Run(dev.index, Spec(TransferMode::kPinned, Direction::kH2D));
  s.traffic = load->EndWindow(dev);
  s.contention = core::JudgeContention(s, {});
  metrics.RecordSample(dev, s);
  EXPECT_EQ(SeriesWith(Expose(registry), "xferd_foreign_traffic_bytes_per_second{").size(), 2u);
  // The next window could not be read (NVML lost the GPU): the last value is not left to
  // look current.
  probes::ProbeSample unread = sim.Run(dev.index, Spec(TransferMode::kPinned, Direction::kH2D));
  metrics.RecordSample(dev, unread);
  EXPECT_TRUE(SeriesWith(Expose(registry), "xferd_foreign_traffic_bytes_per_second{").empty());
  EXPECT_EQ(SeriesWith(Expose(registry), "xferd_gpu_load_readable{gpu=\"0\"} 0").size(), 1u);
  // And the device says how it reaches host memory.
  EXPECT_EQ(SeriesWith(Expose(registry), "host_link=\"pcie\"").size(), 1u);
}

// One simulated GPU (Gen4 x16) known to a fresh Metrics.
class OneGpuMetrics : public ::testing::Test {
 protected:
  OneGpuMetrics() { metrics.SetDevice(dev); }
  prometheus::Registry registry;
  Metrics metrics{registry};
  probes::SimBackend sim{FastSim()};
  const probes::DeviceInfo dev = sim.Devices().at(0);
};

TEST_F(OneGpuMetrics, FailedProbesCountButLeaveBandwidthAlone) {
  probes::ProbeSample failed;
  failed.spec = Spec(TransferMode::kPinned, Direction::kH2D);
  failed.status = probes::ProbeStatus::kTimeout;
  failed.message = "deadline";
  metrics.RecordSample(dev, failed);
  const std::string text = Expose(registry);
  EXPECT_TRUE(SeriesWith(text, "xferd_bandwidth_bytes_per_second{").empty());
  EXPECT_TRUE(SeriesWith(text, "xferd_transfer_duration_seconds_bucket{").empty());
  EXPECT_TRUE(SeriesWith(text, "xferd_probe_last_success_timestamp_seconds{").empty());
  const auto timeouts =
      SeriesWith(text, "xferd_probe_runs_total{gpu=\"0\",mode=\"pinned\",result=\"timeout\"} 1");
  EXPECT_EQ(timeouts.size(), 1u);
}

TEST_F(OneGpuMetrics, OnlyLinkBoundProbesUnderTheBandsSizeAreMarkedExempt) {
  const auto run = [&](TransferMode mode, Direction dir, std::uint64_t size) {
    probes::ProbeSpec spec = Spec(mode, dir, 3);
    spec.size_bytes = size;
    metrics.RecordSample(dev, sim.Run(0, spec));
  };
  run(TransferMode::kPinned, Direction::kH2D, 1 << 20);            // under 4 MiB
  run(TransferMode::kPinned, Direction::kH2D, 64 << 20);           // held
  run(TransferMode::kManagedPrefetch, Direction::kH2D, 16 << 20);  // under its 64 MiB
  run(TransferMode::kManagedPrefetch, Direction::kH2D, 64 << 20);  // held
  run(TransferMode::kPageable, Direction::kH2D, 1 << 20);          // not link-bound at all
  const auto exempt = SeriesWith(Expose(registry), "xferd_band_exempt{");
  ASSERT_EQ(exempt.size(), 2u) << ::testing::PrintToString(exempt);
  EXPECT_NE(exempt[0].find("mode=\"managed_prefetch\",size=\"16MiB\""), std::string::npos)
      << exempt[0];
  EXPECT_NE(exempt[1].find("mode=\"pinned\",size=\"1MiB\""), std::string::npos) << exempt[1];
}

TEST(Metrics, AnNvlinkC2cGpuMarksTheModesItKeepsToTheirBaseline) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimOptions options = FastSim();
  options.c2c = true;
  probes::SimBackend sim(options);
  const probes::DeviceInfo dev = sim.Devices().at(0);
  const core::Settings settings;  // every mode, 64 MiB
  metrics.SetPlan(settings);
  metrics.SetDevice(dev);
  HealthTracker health{settings};
  CycleObservation obs{dev, sim.ReadLinkPath(dev.index), {}};
  for (const probes::ProbeSpec& spec : core::PlanProbes(settings)) {
    obs.samples.push_back(sim.Run(dev.index, spec));
    metrics.RecordSample(dev, obs.samples.back());
  }
  EXPECT_TRUE(SeriesWith(Expose(registry), "xferd_band_exempt{").empty());
  metrics.RecordHealth(health.Observe(obs));
  // Of the 8 link-bound pairs only pinned h2d has a healthy figure over NVLink-C2C.
  const auto exempt = SeriesWith(Expose(registry), "xferd_band_exempt{");
  EXPECT_EQ(exempt.size(), 7u) << ::testing::PrintToString(exempt);
  for (const std::string& line : exempt) {
    EXPECT_EQ(line.find("direction=\"h2d\",gpu=\"0\",mode=\"pinned\""), std::string::npos) << line;
  }
}

TEST(Metrics, ScrapesRunAlongsideRecording) {
  // The probe loop records while HTTP threads serialize (TSan checks this).
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimOptions options = FastSim();
  options.devices = 2;
  probes::SimBackend sim(options);
  for (const auto& dev : sim.Devices()) metrics.SetDevice(dev);
  HealthTracker health{core::Settings{}};
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) EXPECT_FALSE(Expose(registry).empty());
  });
  for (int i = 0; i < 20; ++i) RunCycle(sim, metrics, health);
  done = true;
  scraper.join();
  const auto cycles = SeriesWith(Expose(registry), "xferd_cycles_total{result=\"ok\"} 20");
  EXPECT_EQ(cycles.size(), 1u);
}

}  // namespace
}  // namespace xferd::exporter

namespace xferd::exporter {
namespace {

double ValueOf(const std::string& text, const std::string& series) {
  for (const auto& line : SeriesWith(text, series)) {
    if (line.rfind(series, 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

core::LinkErrorReading Reading(std::optional<std::uint64_t> gpu_cor, bool gpu_readable,
                               std::optional<std::uint64_t> replays,
                               std::vector<std::string> bdfs = {"0000:03:00.0", "0000:00:01.0"}) {
  core::LinkErrorReading r;
  for (const std::string& bdf : bdfs) {
    core::LinkErrorDevice d;
    d.read.bdf = bdf;
    d.read.device = {0, 0, 0};
    d.readable = true;
    r.aer.push_back(d);
  }
  r.aer[0].read.device[0] = gpu_cor;
  r.aer[0].readable = gpu_readable;
  r.aer.back().read.root_port = bdfs.size() > 1;
  if (bdfs.size() > 1) r.aer.back().read.rootport = {9, 0, 0};
  r.replays = replays;
  r.replays_readable = replays.has_value();
  return r;
}

TEST(Metrics, LinkErrorsAsReadAndWhetherEachSourceIsReadable) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::DeviceInfo gpu;
  gpu.index = 0;
  gpu.pci_bus_id = "0000:03:00.0";
  metrics.RecordLinkErrors(gpu, Reading(12, true, 40));
  std::string text = Expose(registry);
  const std::string cor =
      "xferd_pcie_aer_errors_total{class=\"correctable\",device=\"0000:03:00.0\",gpu=\"0\"}";
  EXPECT_EQ(ValueOf(text, cor), 12);
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_aer_errors_total{").size(), 6u);  // 2 devices x 3
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_aer_rootport_errors_total{").size(), 3u);
  EXPECT_EQ(ValueOf(text,
                    "xferd_pcie_aer_rootport_errors_total{class=\"correctable\","
                    "device=\"0000:00:01.0\",gpu=\"0\"}"),
            9);
  EXPECT_EQ(ValueOf(text, "xferd_pcie_replays_total{gpu=\"0\"}"), 40);
  EXPECT_EQ(ValueOf(text,
                    "xferd_pcie_error_source_readable{device=\"0000:03:00.0\",gpu=\"0\","
                    "source=\"nvml_replay\"}"),
            1);
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_error_source_readable{").size(), 3u);
  // Grows with the kernel's count.
  metrics.RecordLinkErrors(gpu, Reading(20, true, 45));
  EXPECT_EQ(ValueOf(Expose(registry), cor), 20);
  // Not readable: no series rather than a zero, and readable 0.
  metrics.RecordLinkErrors(gpu, Reading(std::nullopt, false, std::nullopt));
  text = Expose(registry);
  EXPECT_TRUE(SeriesWith(text, cor).empty());
  EXPECT_TRUE(SeriesWith(text, "xferd_pcie_replays_total{").empty());
  EXPECT_EQ(ValueOf(text,
                    "xferd_pcie_error_source_readable{device=\"0000:03:00.0\",gpu=\"0\","
                    "source=\"aer\"}"),
            0);
  // Read again, lower than before (the device was reset): the series restarts from the
  // new count, which rate() takes as a counter reset, not a negative rate.
  metrics.RecordLinkErrors(gpu, Reading(3, false, 45));
  EXPECT_EQ(ValueOf(Expose(registry), cor), 3);
  // A device no longer on the path loses its series.
  metrics.RecordLinkErrors(gpu, Reading(3, true, 45, {"0000:03:00.0"}));
  text = Expose(registry);
  EXPECT_TRUE(SeriesWith(text, "0000:00:01.0").empty()) << text;
  EXPECT_EQ(SeriesWith(text, "xferd_pcie_aer_errors_total{").size(), 3u);
}

}  // namespace
}  // namespace xferd::exporter
