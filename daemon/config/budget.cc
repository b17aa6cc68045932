// What a configuration costs Prometheus (series) and the state file (baseline values), and
// the limits on both (docs/configuration.md, "Limits").
#include <algorithm>
#include <set>
#include <utility>

#include "config/config.h"
#include "config/toml_workarounds.h"
#include "core/band.h"
#include "core/plan.h"

namespace xferd::config {
namespace {

// The exporter's families, as docs/metrics.md counts them per GPU. The unit test
// tests/unit/config/series_budget_test.cc counts the exposition of real cycles against this
// arithmetic, so a family added to the exporter fails that test until it is counted here.
constexpr std::size_t kHistogramBuckets = 11;              // 10 boundaries and +Inf
constexpr std::size_t kHistogram = kHistogramBuckets + 2;  // and _sum, _count
constexpr std::size_t kGauges = 2;                         // bandwidth, baseline
constexpr std::size_t kPerModeDirection = 1;               // xferd_bandwidth_degraded
// Per probed mode: xferd_probe_runs_total of each result but `unsupported` (which comes
// with the first probe that reports it).
constexpr std::size_t kPerMode = 5;
constexpr std::size_t kOverlap = 1;  // xferd_overlap_ratio, with pinned_async
constexpr std::size_t kOwnBand = 2;  // a probed pair's own band (core::OwnBandPairs)
// expected band 2, diagnosis 12, PCIe generation and width 6, device seconds 1, device and
// gpu (dcgm-exporter's labels) info 2 (the host link is a label of the first), foreign
// traffic 2 (absent while the link's traffic cannot be read) and the link's readability 1,
// the last success 1, the allowance 1, the series held back 1 and stale 1, the link watch's
// transitions and time below capability 2.
constexpr std::size_t kFixedPerGpu = 2 + 12 + 6 + 1 + 2 + 2 + 1 + 1 + 3 + 2;
// The fleet profile (exporter/families.def): the expected band 2, diagnosis 12, PCIe
// generation and width 6, device seconds 1, the two info series 2, the allowance, the
// series held back and stale 3, the link watch's 2; per probed mode nothing of its own: the
// run counters summed over modes (5 results); and the last success (1).
constexpr std::size_t kFleetFixedPerGpu = 2 + 12 + 6 + 1 + 2 + 3 + 2;
constexpr std::size_t kFleetRuns = 5 + 1;
// The link's error counters over the path: AER per class 3 and whether the path's AER is
// readable 1 (where the path has a device); NVML's replay counter and its readability 2.
constexpr std::size_t kFleetLinkErrorsAer = 3 + 1;
// The link's error counters (exporter/link_error_metrics.h): per device of the path its 3
// AER classes and whether they are readable, the root port's 3 totals, NVML's replay
// counter and whether it is readable.
constexpr std::size_t kLinkErrorsPerDevice = 3 + 1;
constexpr std::size_t kLinkErrorsRootPort = 3;
constexpr std::size_t kLinkErrorsReplays = 1 + 1;

// xferd_concurrent_bandwidth_bytes_per_second on a multi-GPU host: 3 directions for each
// group a GPU is in (the host's, and its switch uplink's). Counted against the limit as an
// allowance: how many groups there are is the host's topology, not the file's.
constexpr std::size_t kConcurrentPerGpu = 2 * 3;

}  // namespace

SeriesEstimate EstimateSeries(const core::Settings& settings, const PathShape& path) {
  SeriesEstimate e;
  // The plan repeats the same probes for each size (core/plan.h): plan one size and count,
  // rather than build the plan of a file listing 100,000 sizes only to refuse it.
  core::Settings one_size = settings;
  one_size.sizes.resize(std::min<std::size_t>(settings.sizes.size(), 1));
  const auto plan = core::PlanProbes(one_size);
  const bool fleet = settings.metrics_profile == core::Settings::MetricsProfile::kFleet;
  std::set<std::pair<probes::TransferMode, probes::Direction>> pairs, headline_pairs;
  bool overlap = false;
  std::size_t with_histogram = 0;  // of one size's probes
  std::size_t headline = 0;        // of one size's probes
  for (const probes::ProbeSpec& spec : plan) {
    pairs.insert({spec.mode, spec.direction});
    overlap = overlap || spec.mode == probes::TransferMode::kPinnedAsync;
    if (core::IsHeadline(spec, settings)) {
      ++headline;
      headline_pairs.insert({spec.mode, spec.direction});
    }
    if (settings.histograms == core::Settings::Histograms::kAll ||
        core::IsHeadline(spec, settings)) {
      ++with_histogram;
    }
  }
  // xferd_band_exempt: a link-bound probe under the size its mode is held to the band at
  // (in the fleet profile, of the pairs it keeps).
  std::size_t exempt = 0;
  for (const std::uint64_t size : settings.sizes) {
    for (const probes::ProbeSpec& spec : plan) {
      if (fleet && !core::IsHeadline(spec, settings)) continue;
      if (core::BandExempt(spec.mode, spec.direction, size)) ++exempt;
    }
  }
  e.probes = plan.size() * settings.sizes.size();
  e.exempt_per_gpu = exempt;
  e.concurrent_per_gpu = settings.concurrent ? kConcurrentPerGpu : 0;
  e.baseline_values_per_gpu = e.probes * static_cast<std::size_t>(settings.baseline_window);
  if (fleet) {
    // The headline pairs always; any other pair only while its verdict is degraded.
    e.per_size = headline * kGauges;
    e.link_errors_per_gpu = (path.devices > 0 ? kFleetLinkErrorsAer : 0) + kLinkErrorsReplays;
    std::size_t own_bands = 0;  // of the headline pairs (managed_prefetch h2d, when first)
    for (const auto& pair : core::OwnBandPairs(settings)) own_bands += headline_pairs.count(pair);
    e.per_gpu = e.per_size * settings.sizes.size() + headline_pairs.size() * kPerModeDirection +
                (settings.modes.empty() ? 0 : kFleetRuns) + kFleetFixedPerGpu + exempt +
                own_bands * kOwnBand + e.link_errors_per_gpu;
    // A degraded pair: its gauges of every size, its verdict, its own band where it has
    // one, its exempt sizes (at most one per size).
    e.per_degraded_pair =
        kGauges * settings.sizes.size() + kPerModeDirection + kOwnBand + settings.sizes.size();
    return e;
  }
  e.per_size = plan.size() * kGauges + with_histogram * kHistogram;
  e.link_errors_per_gpu = path.devices * kLinkErrorsPerDevice +
                          (path.root_port ? kLinkErrorsRootPort : 0) + kLinkErrorsReplays;
  e.per_gpu = e.per_size * settings.sizes.size() + pairs.size() * kPerModeDirection +
              settings.modes.size() * kPerMode + (overlap ? kOverlap : 0) +
              core::OwnBandPairs(settings).size() * kOwnBand + kFixedPerGpu + exempt +
              e.link_errors_per_gpu;
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
  const std::size_t per_gpu = e.per_gpu + e.concurrent_per_gpu;
  const std::size_t of_probes = e.per_size * config.sizes.size();
  const bool fleet = config.metrics_profile == core::Settings::MetricsProfile::kFleet;
  // Of the probes' series: the gauges, then the histograms (none in the fleet profile).
  const std::size_t gauges = fleet ? of_probes : e.probes * kGauges;
  const std::size_t histograms = (of_probes - gauges) / kHistogram;
  const std::string arithmetic =
      (fleet ? "the fleet profile: " + std::to_string(gauges / kGauges) + " headline probes x "
             : std::to_string(e.probes) + " probes (sizes x modes x directions) x ") +
      std::to_string(kGauges) + " gauges, " + std::to_string(histograms) +
      " of them with a histogram of " + std::to_string(kHistogram) + " series, plus " +
      std::to_string(per_gpu - of_probes - e.exempt_per_gpu - e.link_errors_per_gpu) +
      " per mode and per GPU, " + std::to_string(e.link_errors_per_gpu) +
      " of link errors on a typical path" +
      (e.exempt_per_gpu > 0 ? " and " + std::to_string(e.exempt_per_gpu) +
                                  " xferd_band_exempt (probes under the band's size)"
                            : std::string());
  if (per_gpu > kMaxSeriesPerGpu) {
    const std::string_view key = line_of("probe.sizes") > 0 ? "probe.sizes" : "probe.modes";
    throw ConfigError(file, line_of(key), std::string(key),
                      "this plan exports " + std::to_string(per_gpu) + " series per GPU (" +
                          arithmetic + "), over the limit of " + std::to_string(kMaxSeriesPerGpu) +
                          " by " + over(per_gpu, kMaxSeriesPerGpu),
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
  if (gpus > 0 && per_gpu * gpus > kMaxSeries) {
    throw ConfigError(file, line_of(gpus_key), gpus_key,
                      std::to_string(gpus) + " GPUs x " + std::to_string(per_gpu) +
                          " series each (" + arithmetic + ") = " + std::to_string(per_gpu * gpus) +
                          " series, over the limit of " + std::to_string(kMaxSeries) + " by " +
                          over(per_gpu * gpus, kMaxSeries),
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
