// What a configuration costs Prometheus (series) and the state file (baseline values), and
// the limits on both (docs/configuration.md, "Limits").
#include <algorithm>
#include <set>
#include <utility>

#include "config/config.h"
#include "config/toml_workarounds.h"
#include "core/plan.h"

namespace xferd::config {
namespace {

// The exporter's families, as docs/metrics.md counts them per GPU. The exporter's unit test
// series_budget_test.cc counts the exposition of real cycles against this arithmetic, so a
// family added there fails that test until it is counted here.
constexpr std::size_t kHistogramBuckets = 13;  // 12 boundaries and +Inf
constexpr std::size_t kPerProbe = kHistogramBuckets + 2 /*_sum, _count*/ + 2 /*bandwidth,
                                  baseline*/
    ;
constexpr std::size_t kPerModeDirection = 1;  // xferd_bandwidth_degraded
constexpr std::size_t kRunResults = 6 * 5;    // xferd_probe_runs_total: every mode x result
constexpr std::size_t kPerMode = 1;           // xferd_probe_last_success_timestamp_seconds
constexpr std::size_t kOverlap = 1;           // xferd_overlap_ratio, with pinned_async
// expected band 2, diagnosis 7, PCIe link 7, device seconds 2, device info 1.
constexpr std::size_t kFixedPerGpu = 2 + 7 + 7 + 2 + 1;

}  // namespace

SeriesEstimate EstimateSeries(const core::Settings& settings) {
  SeriesEstimate e;
  // The plan repeats the same probes for each size (core/plan.h): plan one size and count,
  // rather than build the plan of a file listing 100,000 sizes only to refuse it.
  core::Settings one_size = settings;
  one_size.sizes.resize(std::min<std::size_t>(settings.sizes.size(), 1));
  const auto plan = core::PlanProbes(one_size);
  std::set<std::pair<probes::TransferMode, probes::Direction>> pairs;
  bool overlap = false;
  for (const probes::ProbeSpec& spec : plan) {
    pairs.insert({spec.mode, spec.direction});
    overlap = overlap || spec.mode == probes::TransferMode::kPinnedAsync;
  }
  e.probes = plan.size() * settings.sizes.size();
  e.per_size = plan.size() * kPerProbe;
  e.per_gpu = e.probes * kPerProbe + pairs.size() * kPerModeDirection + kRunResults +
              settings.modes.size() * kPerMode + (overlap ? kOverlap : 0) + kFixedPerGpu;
  e.baseline_values_per_gpu = e.probes * static_cast<std::size_t>(settings.baseline_window);
  return e;
}

void CheckBudget(const Config& config, std::string_view text) {
  const std::string file = config.source.string();
  const SeriesEstimate e = EstimateSeries(config);
  const auto over = [](std::size_t value, std::size_t limit) {
    return std::to_string(value - limit) + " (" + std::to_string((value - limit) * 100 / limit) +
           "%)";
  };
  const auto line_of = [&](std::string_view key) { return LineOfKey(text, key); };
  const std::string arithmetic =
      std::to_string(e.probes) + " probes (sizes x modes x directions) x " +
      std::to_string(kPerProbe) + " series (" + std::to_string(kHistogramBuckets) +
      " histogram buckets, _sum, _count, bandwidth, baseline), plus " +
      std::to_string(e.per_gpu - e.probes * kPerProbe) + " per mode and per GPU";
  if (e.per_gpu > kMaxSeriesPerGpu) {
    const std::string_view key = line_of("probe.sizes") > 0 ? "probe.sizes" : "probe.modes";
    throw ConfigError(file, line_of(key), std::string(key),
                      "this plan exports " + std::to_string(e.per_gpu) + " series per GPU (" +
                          arithmetic + "), over the limit of " + std::to_string(kMaxSeriesPerGpu) +
                          " by " + over(e.per_gpu, kMaxSeriesPerGpu),
                      "probe fewer sizes or modes: each size adds " + std::to_string(e.per_size) +
                          " series per GPU");
  }
  // The GPU count, where the file fixes it.
  std::size_t gpus = 0;
  std::string gpus_key;
  if (!config.gpus.empty()) {
    gpus = config.gpus.size(), gpus_key = "probe.gpus";
  } else if (config.simulate) {
    gpus = static_cast<std::size_t>(config.sim.devices), gpus_key = "simulate.devices";
  }
  if (gpus > 0 && e.per_gpu * gpus > kMaxSeries) {
    throw ConfigError(
        file, line_of(gpus_key), gpus_key,
        std::to_string(gpus) + " GPUs x " + std::to_string(e.per_gpu) + " series each (" +
            arithmetic + ") = " + std::to_string(e.per_gpu * gpus) + " series, over the limit of " +
            std::to_string(kMaxSeries) + " by " + over(e.per_gpu * gpus, kMaxSeries),
        "probe fewer GPUs, sizes or modes");
  }
  if (e.baseline_values_per_gpu > kMaxBaselineValuesPerGpu) {
    throw ConfigError(file, line_of("health.baseline_window"), "health.baseline_window",
                      "the state file would keep " + std::to_string(e.probes) + " probes x " +
                          std::to_string(config.baseline_window) +
                          " cycles = " + std::to_string(e.baseline_values_per_gpu) +
                          " baseline values per GPU, over the limit of " +
                          std::to_string(kMaxBaselineValuesPerGpu) + " by " +
                          over(e.baseline_values_per_gpu, kMaxBaselineValuesPerGpu),
                      "set a shorter baseline_window, or probe fewer sizes or modes");
  }
}

}  // namespace xferd::config
