#include "exporter/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "core/band.h"
#include "exporter/link_error_metrics.h"
#include "platform/build_info.h"

namespace xferd::exporter {

using core::DeviceHealth;
using core::Diagnosis;
using core::DiagnosisCause;
using core::kAllDiagnosisCauses;
using core::PairVerdict;
using core::SeriesHealth;

namespace {

using probes::Direction;
using probes::TransferMode;
using prometheus::Labels;

constexpr std::array<ProbeResult, 6> kAllProbeResults = {
    ProbeResult::kOk,          ProbeResult::kError,       ProbeResult::kTimeout,
    ProbeResult::kSkippedBusy, ProbeResult::kUnsupported, ProbeResult::kContended};
constexpr std::array<CycleResult, 4> kAllCycleResults = {
    CycleResult::kOk, CycleResult::kPartial, CycleResult::kSkippedBusy, CycleResult::kOverBudget};

// Bucket grid: boundaries are 2^(i/8) s. A ratio of 2^(1/8) (~1.09) bounds the error of
// histogram_quantile's linear interpolation to ~9% while the quantile lies in a fine bucket.
constexpr double kGridSteps = 8.0;
// The quantiles read (p50, p99, p99.9) lie at the anchor or above it: below it one fine
// boundary is enough, and transfers more than 8 % faster than the anchor share the first
// bucket (docs/metrics.md, "Series budget", says what that gave up).
constexpr int kFineBelow = 1;     // fine boundaries below the anchor: one, at 0.917x
constexpr int kFineAbove = 7;     // and above it: up to 1.83x (the slow tail lives here)
constexpr int kCoarseAbove = 16;  // and one coarse boundary at 4x

std::string Gpu(int index) {
  return std::to_string(index);
}
std::string Mode(TransferMode mode) {
  return std::string(probes::ToString(mode));
}
std::string Dir(Direction direction) {
  return std::string(probes::ToString(direction));
}

// The labels of a pair's own band series.
Labels PairBandLabels(const std::string& gpu, TransferMode mode, Direction direction,
                      const char* bound) {
  return {{"gpu", gpu}, {"mode", Mode(mode)}, {"direction", Dir(direction)}, {"bound", bound}};
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Bumps the generation when the method that holds it returns, after its last write (early
// returns included), so a reader that saw the new generation also sees the writes.
class ChangeMark {
 public:
  explicit ChangeMark(std::atomic<std::uint64_t>& generation) : generation_(generation) {}
  ~ChangeMark() { generation_.fetch_add(1, std::memory_order_release); }
  ChangeMark(const ChangeMark&) = delete;
  ChangeMark& operator=(const ChangeMark&) = delete;

 private:
  std::atomic<std::uint64_t>& generation_;
};

template <typename Builder>
auto& Register(Builder&& builder, prometheus::Registry& registry, const char* name,
               const char* help) {
  return builder.Name(name).Help(help).Register(registry);
}

}  // namespace

std::string_view ToString(ProbeResult result) {
  switch (result) {
    case ProbeResult::kOk: return "ok";
    case ProbeResult::kError: return "error";
    case ProbeResult::kTimeout: return "timeout";
    case ProbeResult::kSkippedBusy: return "skipped_busy";
    case ProbeResult::kUnsupported: return "unsupported";
    case ProbeResult::kContended: return "contended";
  }
  return "error";
}

ProbeResult ResultOf(probes::ProbeStatus status) {
  switch (status) {
    case probes::ProbeStatus::kOk: return ProbeResult::kOk;
    case probes::ProbeStatus::kError: return ProbeResult::kError;
    case probes::ProbeStatus::kTimeout: return ProbeResult::kTimeout;
    case probes::ProbeStatus::kUnsupported: return ProbeResult::kUnsupported;
  }
  return ProbeResult::kError;
}

std::string_view ToString(CycleResult result) {
  switch (result) {
    case CycleResult::kOk: return "ok";
    case CycleResult::kPartial: return "partial";
    case CycleResult::kSkippedBusy: return "skipped_busy";
    case CycleResult::kOverBudget: return "over_budget";
  }
  return "partial";
}

std::vector<double> DurationBuckets(double anchor_seconds) {
  if (!(anchor_seconds > 0) || !std::isfinite(anchor_seconds)) anchor_seconds = 1e-3;
  const int i0 = static_cast<int>(std::lround(kGridSteps * std::log2(anchor_seconds)));
  std::vector<double> buckets;
  for (int i = i0 - kFineBelow; i <= i0 + kFineAbove; ++i)
    buckets.push_back(std::exp2(i / kGridSteps));
  buckets.push_back(std::exp2((i0 + kCoarseAbove) / kGridSteps));
  return buckets;
}

Metrics::Metrics(prometheus::Registry& registry)
    : registry_(registry),
      duration_(Register(prometheus::BuildHistogram(), registry, "xferd_transfer_duration_seconds",
                         "Duration of each timed transfer of a probe.")),
      bandwidth_(Register(prometheus::BuildGauge(), registry, "xferd_bandwidth_bytes_per_second",
                          "Median bandwidth of the last probe (bytes moved / median duration).")),
      baseline_(Register(prometheus::BuildGauge(), registry,
                         "xferd_bandwidth_baseline_bytes_per_second",
                         "Learned baseline: robust median of recent healthy cycle medians, "
                         "persisted in the state directory.")),
      expected_(Register(prometheus::BuildGauge(), registry,
                         "xferd_expected_bandwidth_bytes_per_second",
                         "Expected band per direction for link-bound modes, from config or "
                         "the narrowest PCIe link on the path.")),
      band_exempt_(Register(prometheus::BuildGauge(), registry, "xferd_band_exempt",
                            "1 for a link-bound probe the band does not hold: smaller than "
                            "the size its mode is held at (4 MiB; managed_prefetch h2d 64 "
                            "MiB), bounded by its per-copy cost on the link, or without a "
                            "healthy figure over NVLink-C2C: judged against its baseline "
                            "only, and left out of the band rules.")),
      degraded_(Register(prometheus::BuildGauge(), registry, "xferd_bandwidth_degraded",
                         "1 when the daemon judges the mode and direction degraded (below band "
                         "or baseline for consecutive_bad cycles).")),
      diagnosis_(Register(prometheus::BuildGauge(), registry, "xferd_diagnosis",
                          "1 when the cause holds after the last cycle: the likely explanation "
                          "of a low reading.")),
      overlap_(Register(prometheus::BuildGauge(), registry, "xferd_overlap_ratio",
                        "Copy/compute overlap of pinned_async: 1 = copies fully hidden, 0 = "
                        "serialized.")),
      link_generation_(Register(prometheus::BuildGauge(), registry, "xferd_pcie_link_generation",
                                "PCIe generation: the GPU's own link (current; max = the most it "
                                "can train to, the lower of its two ends' maxima) and the "
                                "narrowest link on its path (narrowest), read while probing.")),
      link_width_(Register(prometheus::BuildGauge(), registry, "xferd_pcie_link_width",
                           "PCIe lanes: the GPU's own link (current; max = the most it can "
                           "train to, the lower of its two ends' maxima) and the narrowest "
                           "link on its path (narrowest), read while probing.")),
      probe_runs_(Register(prometheus::BuildCounter(), registry, "xferd_probe_runs_total",
                           "Probes by result (bidirectional pinned probes count under "
                           "mode=\"pinned\").")),
      last_success_(Register(prometheus::BuildGauge(), registry,
                             "xferd_probe_last_success_timestamp_seconds",
                             "Unix time of the last successful probe of the mode.")),
      device_seconds_(Register(prometheus::BuildCounter(), registry,
                               "xferd_probe_device_seconds_total",
                               "Device time spent probing; its rate() is the duty cycle.")),
      cycle_device_(Register(prometheus::BuildGauge(), registry, "xferd_cycle_device_seconds",
                             "Device time the last cycle spent on the GPU.")),
      cycle_duration_(Register(prometheus::BuildGauge(), registry, "xferd_cycle_duration_seconds",
                               "Wall time of the last probe cycle, all GPUs.")),
      cycles_(Register(prometheus::BuildCounter(), registry, "xferd_cycles_total",
                       "Probe cycles by outcome.")),
      reload_ok_(Register(prometheus::BuildGauge(), registry, "xferd_config_last_reload_successful",
                          "1 when the last configuration load succeeded.")),
      reload_timestamp_(Register(prometheus::BuildGauge(), registry,
                                 "xferd_config_last_reload_success_timestamp_seconds",
                                 "Unix time of the last successful configuration load.")),
      state_write_errors_(Register(prometheus::BuildCounter(), registry,
                                   "xferd_state_write_errors_total",
                                   "Failed writes of the state file (baselines stay in "
                                   "memory).")),
      textfile_write_errors_(Register(prometheus::BuildCounter(), registry,
                                      "xferd_textfile_write_errors_total",
                                      "Failed writes of the node_exporter textfile (the "
                                      "previous file stays).")),
      foreign_traffic_(Register(prometheus::BuildGauge(), registry,
                                "xferd_foreign_traffic_bytes_per_second",
                                "Another process's PCIe traffic seen in the last probe's "
                                "window: the link's byte counters minus the probe's own "
                                "bytes (direction h2d, d2h).")),
      gpu_load_readable_(Register(prometheus::BuildGauge(), registry, "xferd_gpu_load_readable",
                                  "1 when NVML reads the GPU's link around each probe; 0: "
                                  "contended probes cannot be told apart (busy check only).")),
      device_info_(Register(prometheus::BuildGauge(), registry, "xferd_device_info",
                            "Constant 1; labels describe the device. simulated=\"1\" marks "
                            "the simulated backend.")),
      host_link_info_(Register(prometheus::BuildGauge(), registry, "xferd_host_link_info",
                               "Constant 1; type says how the GPU reaches host memory: pcie, "
                               "c2c (NVLink-C2C, Grace Hopper) or integrated (shared DRAM).")),
      mig_instance_info_(Register(prometheus::BuildGauge(), registry, "xferd_mig_instance_info",
                                  "Constant 1 per MIG instance of a MIG-enabled GPU: GPU_I_ID "
                                  "and GPU_I_PROFILE as dcgm-exporter labels them, the "
                                  "instance's copy_engines, probed=1 for those the link is "
                                  "probed through. None on GPUs without MIG.")),
      concurrent_(Register(prometheus::BuildGauge(), registry,
                           "xferd_concurrent_bandwidth_bytes_per_second",
                           "Median bandwidth of the GPU's pinned probe while every GPU of the "
                           "group moved data at once.")),
      aggregate_(Register(prometheus::BuildGauge(), registry,
                          "xferd_host_aggregate_bandwidth_bytes_per_second",
                          "Sum over the group's GPUs of what each moved in the last concurrent "
                          "run.")),
      aggregate_expected_(Register(prometheus::BuildGauge(), registry,
                                   "xferd_host_aggregate_expected_bandwidth_bytes_per_second",
                                   "Expected aggregate band of the group per direction: the "
                                   "band fractions x what the members' paths carry together, "
                                   "capped by the links they share.")),
      group_info_(Register(prometheus::BuildGauge(), registry, "xferd_concurrent_group_info",
                           "Constant 1; the GPUs of a concurrent group and the narrowest link "
                           "they share (empty: none).")),
      build_info_(Register(prometheus::BuildGauge(), registry, "xferd_build_info",
                           "Constant 1; labels describe the build.")) {
  link_errors_ = std::make_unique<LinkErrorMetrics>(registry);
  for (CycleResult r : kAllCycleResults) cycles_.Add({{"result", std::string(ToString(r))}});
  state_write_errors_.Add({});
  textfile_write_errors_.Add({});
  // The daemon runs only with a config that loaded: that is the first successful load.
  reload_ok_.Add({}).Set(1);
  reload_timestamp_.Add({}).Set(UnixNow());
  cycle_duration_.Add({});
}

Metrics::~Metrics() = default;

void Metrics::SetBuildInfo() {
  const ChangeMark mark(generation_);
  build_info_
      .Add({{"version", kVersion},
            {"build_type", kBuildType},
            {"cuda_backend", kCudaBuilt ? "1" : "0"},
            {"cuda_version", kCudaBuilt ? kCudaVersion : ""}})
      .Set(1);
}

void Metrics::SetDevice(const probes::DeviceInfo& device) {
  const ChangeMark mark(generation_);
  const std::string gpu = Gpu(device.index);
  {
    std::lock_guard lock(mutex_);
    SetDeviceInfo(device.index,
                  {{"gpu", gpu},
                   {"uuid", device.uuid},
                   {"name", device.name},
                   {"pci_bus_id", device.pci_bus_id},
                   {"driver_version", device.driver_version},
                   {"compute_capability",
                    std::to_string(device.cc_major) + "." + std::to_string(device.cc_minor)},
                   {"integrated", device.integrated ? "1" : "0"},
                   {"simulated", device.simulated ? "1" : "0"},
                   // The shape (docs/health.md): fleet peers compare only GPUs of one shape.
                   {"confidential_computing", std::string(probes::ToString(device.cc.state))},
                   {"mig", std::string(probes::ToString(device.mig.mode))}});
  }
  host_link_info_
      .Add({{"gpu", gpu}, {"type", std::string(probes::ToString(probes::HostLinkOf(device)))}})
      .Set(1);
  for (DiagnosisCause cause : kAllDiagnosisCauses) {
    diagnosis_.Add({{"gpu", gpu}, {"cause", std::string(ToString(cause))}}).Set(0);
  }
  device_seconds_.Add({{"gpu", gpu}});
  cycle_device_.Add({{"gpu", gpu}});
  std::lock_guard lock(mutex_);
  cycle_device_s_.try_emplace(device.index, 0.0);
  devices_.push_back(device.index);
  for (TransferMode mode : modes_) AddRunCounters(device.index, mode);
}

void Metrics::SetDeviceInfo(int gpu, prometheus::Labels labels) {
  auto it = device_info_labels_.find(gpu);
  if (it != device_info_labels_.end()) {
    if (it->second == labels) return;
    device_info_.Remove(&device_info_.Add(it->second));
  }
  device_info_.Add(labels).Set(1);
  device_info_labels_[gpu] = std::move(labels);
}

void Metrics::SetPlan(const core::Settings& settings) {
  const ChangeMark mark(generation_);
  std::lock_guard lock(mutex_);
  modes_ = settings.modes;
  for (int gpu : devices_) {
    for (TransferMode mode : modes_) AddRunCounters(gpu, mode);
  }
}

void Metrics::AddRunCounters(int gpu, TransferMode mode) {
  for (ProbeResult r : kAllProbeResults) {
    // Events start at 0 so that rate() sees the first; `unsupported` is no event but what
    // the GPU is (and pageable, pinned and pinned_async never are): its series comes with
    // the first probe that reports it.
    if (r == ProbeResult::kUnsupported) continue;
    probe_runs_.Add(
        {{"gpu", Gpu(gpu)}, {"mode", Mode(mode)}, {"result", std::string(ToString(r))}});
  }
}

void Metrics::RecordLinkPath(int gpu_index, const probes::LinkPath& path) {
  const ChangeMark mark(generation_);
  const std::string gpu = Gpu(gpu_index);
  // An integrated GPU has no PCIe path: publish nothing rather than zeros that read as x0.
  // Nor for NVLink-C2C: the PCIe link sysfs shows does not carry its copies.
  if (!path.pcie || path.c2c || path.links.empty()) return;
  const probes::PcieLink& own = path.links.front();
  auto set = [&](prometheus::Family<prometheus::Gauge>& family, const char* state, int value) {
    if (value > 0) family.Add({{"gpu", gpu}, {"state", state}}).Set(value);
  };
  set(link_generation_, "current", own.current_gen);
  // max: the most the link can train to, the lower of its two ends' maxima (a Gen5 GPU in
  // a Gen4 slot reads max 4: that is a capability mismatch, not a downtrained link).
  set(link_generation_, "max", own.LinkMaxGen());
  set(link_width_, "current", own.current_width);
  set(link_width_, "max", own.LinkMaxWidth());
  if (const probes::PcieLink* narrowest = path.Narrowest()) {
    set(link_generation_, "narrowest", narrowest->current_gen);
    set(link_width_, "narrowest", narrowest->current_width);
  }
}

void Metrics::RecordSample(const probes::DeviceInfo& device, const probes::ProbeSample& sample,
                           double anchor_bytes_per_s, bool histogram) {
  const ChangeMark mark(generation_);
  const std::string gpu = Gpu(device.index);
  const std::string mode = Mode(sample.spec.mode);
  const ProbeResult result = sample.status == probes::ProbeStatus::kOk && sample.Contended()
                                 ? ProbeResult::kContended
                                 : ResultOf(sample.status);
  probe_runs_.Add({{"gpu", gpu}, {"mode", mode}, {"result", std::string(ToString(result))}})
      .Increment();
  if (sample.status == probes::ProbeStatus::kOk) {
    // A window that missed the probe's own bytes reads nothing (contention unknown).
    const bool readable =
        sample.traffic && sample.contention.state != probes::ContentionState::kUnknown;
    gpu_load_readable_.Add({{"gpu", gpu}}).Set(readable ? 1 : 0);
    if (readable) {
      foreign_traffic_.Add({{"gpu", gpu}, {"direction", "h2d"}})
          .Set(sample.contention.foreign_h2d_bytes_per_s);
      foreign_traffic_.Add({{"gpu", gpu}, {"direction", "d2h"}})
          .Set(sample.contention.foreign_d2h_bytes_per_s);
    }
  }
  if (sample.device_time_s > 0 && std::isfinite(sample.device_time_s)) {
    device_seconds_.Add({{"gpu", gpu}}).Increment(sample.device_time_s);
    std::lock_guard lock(mutex_);
    cycle_device_s_[device.index] += sample.device_time_s;
  }
  if (result == ProbeResult::kContended) return;  // a neighbour's share, not the hardware's
  if (sample.overlap_ratio && std::isfinite(*sample.overlap_ratio)) {
    overlap_.Add({{"gpu", gpu}}).Set(*sample.overlap_ratio);
  }
  if (sample.status != probes::ProbeStatus::kOk || sample.durations_s.empty()) return;

  const Labels series{{"gpu", gpu},
                      {"mode", mode},
                      {"direction", Dir(sample.spec.direction)},
                      {"size", probes::FormatSize(sample.spec.size_bytes)}};
  const SeriesKey key{device.index, sample.spec.mode, sample.spec.direction,
                      sample.spec.size_bytes};
  if (!histogram) {
    // The headline profile: no histogram for this probe (one kept from before a reload to
    // the profile goes).
    std::lock_guard lock(mutex_);
    if (auto it = histograms_.find(key); it != histograms_.end()) {
      duration_.Remove(it->second);
      histograms_.erase(it);
    }
  } else {
    prometheus::Histogram* h = nullptr;
    {
      std::lock_guard lock(mutex_);
      auto it = histograms_.find(key);
      if (it == histograms_.end()) {
        double anchor_s = 0;
        if (anchor_bytes_per_s > 0 && sample.bytes_per_transfer > 0) {
          anchor_s = static_cast<double>(sample.bytes_per_transfer) / anchor_bytes_per_s;
        } else {
          const double bw = sample.MedianBandwidth();
          anchor_s = bw > 0 ? static_cast<double>(sample.bytes_per_transfer) / bw : 0;
        }
        h = &duration_.Add(series, DurationBuckets(anchor_s));
        histograms_.emplace(key, h);
      } else {
        h = it->second;
      }
    }
    for (double d : sample.durations_s) {
      if (std::isfinite(d) && d >= 0) h->Observe(d);
    }
  }
  bandwidth_.Add(series).Set(sample.MedianBandwidth());
  // Only the exceptions get a series: a default config (64 MiB) adds none. Under its size a
  // probe is exempt on any link, so from its first reading; what the GPU's link exempts
  // besides (core::HoldOf) is marked with its band, in RecordHealth.
  if (core::BandExempt(sample.spec.mode, sample.spec.direction, sample.spec.size_bytes)) {
    band_exempt_.Add(series).Set(1);
  }
  last_success_.Add({{"gpu", gpu}, {"mode", mode}}).Set(UnixNow());
}

void Metrics::RecordConcurrent(const core::GroupRun& run, const core::ExpectedBand& band) {
  const ChangeMark mark(generation_);
  const std::string& group = run.group.name;
  const std::string direction = Dir(run.spec.direction);
  for (std::size_t i = 0; i < run.samples.size() && i < run.devices.size(); ++i) {
    const probes::ProbeSample& s = run.samples[i];
    const int index = run.devices[i].index;
    const Labels labels{{"gpu", Gpu(index)}, {"direction", direction}, {"group", group}};
    if (s.status == probes::ProbeStatus::kOk && !s.durations_s.empty()) {
      concurrent_.Add(labels).Set(s.MedianBandwidth());
    } else if (concurrent_.Has(labels)) {
      concurrent_.Remove(&concurrent_.Add(labels));
    }
    if (s.device_time_s > 0 && std::isfinite(s.device_time_s)) {
      device_seconds_.Add({{"gpu", Gpu(index)}}).Increment(s.device_time_s);
      std::lock_guard lock(mutex_);
      cycle_device_s_[index] += s.device_time_s;
    }
  }
  const Labels aggregate{{"group", group}, {"direction", direction}};
  if (run.AllOk()) {
    aggregate_.Add(aggregate).Set(run.Aggregate());
  } else if (aggregate_.Has(aggregate)) {
    aggregate_.Remove(&aggregate_.Add(aggregate));
  }
  if (band.Known()) {
    aggregate_expected_.Add({{"group", group}, {"bound", "lower"}}).Set(band.lower_bytes_per_s);
    aggregate_expected_.Add({{"group", group}, {"bound", "upper"}}).Set(band.upper_bytes_per_s);
  }
  // One info series per group: new members or a new shared link replace the old labels.
  std::lock_guard lock(mutex_);
  prometheus::Gauge& info = group_info_.Add(
      {{"group", group}, {"gpus", run.group.GpuList()}, {"shared_link", run.group.shared_link}});
  auto [it, inserted] = group_info_by_group_.try_emplace(group, &info);
  if (!inserted && it->second != &info) {
    group_info_.Remove(it->second);
    it->second = &info;
  }
  info.Set(1);
}

void Metrics::RecordSkipped(int gpu_index, TransferMode mode, ProbeResult result) {
  const ChangeMark mark(generation_);
  probe_runs_
      .Add({{"gpu", Gpu(gpu_index)},
            {"mode", Mode(mode)},
            {"result", std::string(ToString(result))}})
      .Increment();
}

void Metrics::RecordHealth(const DeviceHealth& health) {
  const ChangeMark mark(generation_);
  const std::string gpu = Gpu(health.gpu);
  if (health.band.Known()) {
    expected_.Add({{"gpu", gpu}, {"bound", "lower"}}).Set(health.band.lower_bytes_per_s);
    expected_.Add({{"gpu", gpu}, {"bound", "upper"}}).Set(health.band.upper_bytes_per_s);
    // A mode held to its own share of the band gets its own series, with mode and
    // direction labels: only where it differs (managed_prefetch h2d), and only while the
    // configuration probes it.
    std::set<Pair> exported;
    for (const core::PairBand& p : health.pair_bands) {
      expected_.Add(PairBandLabels(gpu, p.mode, p.direction, "lower"))
          .Set(p.band.lower_bytes_per_s);
      expected_.Add(PairBandLabels(gpu, p.mode, p.direction, "upper"))
          .Set(p.band.upper_bytes_per_s);
      exported.emplace(p.mode, p.direction);
    }
    std::lock_guard lock(mutex_);
    for (const auto& [mode, direction] : pair_bands_[health.gpu]) {
      if (exported.contains({mode, direction})) continue;
      for (const char* bound : {"lower", "upper"}) {
        expected_.Remove(&expected_.Add(PairBandLabels(gpu, mode, direction, bound)));
      }
    }
    pair_bands_[health.gpu] = std::move(exported);
  }
  for (const SeriesHealth& s : health.series) {
    // On its link: an NVLink-C2C GPU marks the modes it keeps to their baseline, a PCIe
    // GPU pinned_async where its chunks' per-copy cost bounds it (core::HoldOf). A GPU with
    // no band (confidential computing without a published figure, a MIG GPU's small
    // instances) has nothing to be exempt from: every series keeps its baseline.
    if (health.band.Known() &&
        core::BandExempt(s.mode, s.direction, s.size_bytes, health.band)) {
      band_exempt_
          .Add({{"gpu", gpu},
                {"mode", Mode(s.mode)},
                {"direction", Dir(s.direction)},
                {"size", probes::FormatSize(s.size_bytes)}})
          .Set(1);
    }
  }
  for (const SeriesHealth& s : health.series) {
    if (s.baseline_bytes_per_s <= 0) continue;
    baseline_
        .Add({{"gpu", gpu},
              {"mode", Mode(s.mode)},
              {"direction", Dir(s.direction)},
              {"size", probes::FormatSize(s.size_bytes)}})
        .Set(s.baseline_bytes_per_s);
  }
  for (const PairVerdict& v : health.verdicts) {
    degraded_.Add({{"gpu", gpu}, {"mode", Mode(v.mode)}, {"direction", Dir(v.direction)}})
        .Set(v.degraded ? 1 : 0);
  }
  for (DiagnosisCause cause : kAllDiagnosisCauses) {
    diagnosis_.Add({{"gpu", gpu}, {"cause", std::string(ToString(cause))}})
        .Set(health.Has(cause) ? 1 : 0);
  }
  // The shape as last read (it changes on reload): device_info's labels, and one info
  // series per MIG instance.
  std::vector<prometheus::Labels> instances;
  const std::vector<std::size_t> probed = probes::LinkInstances(health.mig);
  for (std::size_t i = 0; i < health.mig.instances.size(); ++i) {
    const probes::MigInstance& m = health.mig.instances[i];
    instances.push_back(
        {{"gpu", gpu},
         {"GPU_I_ID", std::to_string(m.gpu_instance_id)},
         {"GPU_I_PROFILE", m.profile},
         {"uuid", m.uuid},
         {"copy_engines", m.copy_engines > 0 ? std::to_string(m.copy_engines) : ""},
         {"probed", std::find(probed.begin(), probed.end(), i) != probed.end() ? "1" : "0"}});
  }
  std::lock_guard lock(mutex_);
  if (auto it = device_info_labels_.find(health.gpu); it != device_info_labels_.end()) {
    prometheus::Labels labels = it->second;
    labels["confidential_computing"] = std::string(probes::ToString(health.cc.state));
    labels["mig"] = std::string(probes::ToString(health.mig.mode));
    SetDeviceInfo(health.gpu, std::move(labels));
  }
  std::vector<prometheus::Labels>& was = mig_instances_[health.gpu];
  if (was != instances) {
    for (const prometheus::Labels& l : was) mig_instance_info_.Remove(&mig_instance_info_.Add(l));
    for (const prometheus::Labels& l : instances) mig_instance_info_.Add(l).Set(1);
    was = std::move(instances);
  }
}

void Metrics::RecordLinkErrors(const probes::DeviceInfo& device,
                               const core::LinkErrorReading& reading) {
  const ChangeMark mark(generation_);
  link_errors_->Record(device, reading);
}

void Metrics::RecordCycle(double wall_seconds, CycleResult result) {
  const ChangeMark mark(generation_);
  cycle_duration_.Add({}).Set(wall_seconds);
  cycles_.Add({{"result", std::string(ToString(result))}}).Increment();
  std::map<int, double> device_s;
  {
    std::lock_guard lock(mutex_);
    device_s = cycle_device_s_;
    for (auto& [gpu, seconds] : cycle_device_s_) seconds = 0;  // a skipped GPU spent none
  }
  for (const auto& [gpu, seconds] : device_s) cycle_device_.Add({{"gpu", Gpu(gpu)}}).Set(seconds);
}

void Metrics::RecordConfigReload(bool ok, double unix_seconds) {
  const ChangeMark mark(generation_);
  reload_ok_.Add({}).Set(ok ? 1 : 0);
  if (ok) reload_timestamp_.Add({}).Set(unix_seconds);
}

void Metrics::RecordStateWrite(bool ok) {
  const ChangeMark mark(generation_);
  if (!ok) state_write_errors_.Add({}).Increment();
}

void Metrics::RecordTextfileWrite(bool ok) {
  const ChangeMark mark(generation_);
  if (!ok) textfile_write_errors_.Add({}).Increment();
}

}  // namespace xferd::exporter
