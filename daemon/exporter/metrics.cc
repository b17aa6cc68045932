#include "exporter/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>

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

}  // namespace

std::string DcgmBusId(std::string_view bus_id) {
  std::string out(bus_id);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (const std::size_t colon = out.find(':'); colon != std::string::npos && colon < 8) {
    out.insert(0, 8 - colon, '0');
  }
  return out;
}

std::string NodeName() {
  if (const char* node = std::getenv("NODE_NAME"); node != nullptr && *node != '\0') return node;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name) != 0) return "";
  name[HOST_NAME_MAX] = '\0';
  return name;
}

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

Metrics::Metrics(prometheus::Registry& registry, std::string node_name)
    : families_(registry),
      exposed_(std::make_shared<ProfiledRegistry>(registry)),
      node_name_(std::move(node_name)),
      link_errors_(std::make_unique<LinkErrorMetrics>(families_)) {
  for (CycleResult r : kAllCycleResults) {
    Counter(FamilyId::kCycles).Add({{"result", std::string(ToString(r))}});
  }
  Counter(FamilyId::kStateWriteErrors).Add({});
  Counter(FamilyId::kTextfileWriteErrors).Add({});
  Counter(FamilyId::kEvidenceRecords).Add({{"result", "written"}});
  Counter(FamilyId::kEvidenceRecords).Add({{"result", "dropped"}});
  // The daemon runs only with a config that loaded: that is the first successful load.
  Gauge(FamilyId::kReloadOk).Add({}).Set(1);
  Gauge(FamilyId::kReloadTimestamp).Add({}).Set(UnixNow());
  Gauge(FamilyId::kCycleDuration).Add({});
}

Metrics::~Metrics() = default;

void Metrics::SetBuildInfo() {
  const ChangeMark mark(generation_);
  Gauge(FamilyId::kBuildInfo)
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
                   // How the GPU reaches host memory (once xferd_host_link_info{type}).
                   {"host_link", std::string(probes::ToString(probes::HostLinkOf(device)))},
                   // The shape (docs/health.md): fleet peers compare only GPUs of one shape.
                   {"confidential_computing", std::string(probes::ToString(device.cc.state))},
                   {"mig", std::string(probes::ToString(device.mig.mode))}});
  }
  // dcgm-exporter's labels and their values as it writes them (docs/metrics.md, "Joins with
  // dcgm-exporter"); `gpu` stays xferd's, as on every other series.
  Gauge(FamilyId::kGpuInfo)
      .Add({{"gpu", gpu},
            {"UUID", device.uuid},
            {"pci_bus_id", DcgmBusId(device.pci_bus_id)},
            {"device", device.minor >= 0 ? "nvidia" + std::to_string(device.minor) : ""},
            {"modelName", device.name},
            {"Hostname", node_name_},
            {"hostname", node_name_}})
      .Set(1);
  for (DiagnosisCause cause : kAllDiagnosisCauses) {
    Gauge(FamilyId::kDiagnosis).Add({{"gpu", gpu}, {"cause", std::string(ToString(cause))}}).Set(0);
  }
  Counter(FamilyId::kDeviceSeconds).Add({{"gpu", gpu}});
  Gauge(FamilyId::kSeriesHeldBack).Add({{"gpu", gpu}});
  Gauge(FamilyId::kSeriesStale).Add({{"gpu", gpu}});
  std::lock_guard lock(mutex_);
  devices_.push_back(device.index);
  for (TransferMode mode : modes_) AddRunCounters(device.index, mode);
}

void Metrics::SetDeviceInfo(int gpu, prometheus::Labels labels) {
  auto it = device_info_labels_.find(gpu);
  if (it != device_info_labels_.end()) {
    if (it->second == labels) return;
    Gauge(FamilyId::kDeviceInfo).Remove(&Gauge(FamilyId::kDeviceInfo).Add(it->second));
  }
  Gauge(FamilyId::kDeviceInfo).Add(labels).Set(1);
  device_info_labels_[gpu] = std::move(labels);
}

void Metrics::SetPlan(const core::Settings& settings) {
  const ChangeMark mark(generation_);
  exposed_->Set(settings.metrics_profile, HeadlinePairs(settings));
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
    Counter(FamilyId::kProbeRuns)
        .Add({{"gpu", Gpu(gpu)}, {"mode", Mode(mode)}, {"result", std::string(ToString(r))}});
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
  set(Gauge(FamilyId::kLinkGeneration), "current", own.current_gen);
  // max: the most the link can train to, the lower of its two ends' maxima (a Gen5 GPU in
  // a Gen4 slot reads max 4: that is a capability mismatch, not a downtrained link).
  set(Gauge(FamilyId::kLinkGeneration), "max", own.LinkMaxGen());
  set(Gauge(FamilyId::kLinkWidth), "current", own.current_width);
  set(Gauge(FamilyId::kLinkWidth), "max", own.LinkMaxWidth());
  if (const probes::PcieLink* narrowest = path.Narrowest()) {
    set(Gauge(FamilyId::kLinkGeneration), "narrowest", narrowest->current_gen);
    set(Gauge(FamilyId::kLinkWidth), "narrowest", narrowest->current_width);
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
  Counter(FamilyId::kProbeRuns)
      .Add({{"gpu", gpu}, {"mode", mode}, {"result", std::string(ToString(result))}})
      .Increment();
  if (sample.status == probes::ProbeStatus::kOk) {
    // A window that missed the probe's own bytes reads nothing (contention unknown).
    const bool readable =
        sample.traffic && sample.contention.state != probes::ContentionState::kUnknown;
    Gauge(FamilyId::kGpuLoadReadable).Add({{"gpu", gpu}}).Set(readable ? 1 : 0);
    // Unreadable: no series, rather than a last value that reads as current.
    auto& foreign = Gauge(FamilyId::kForeignTraffic);
    for (const auto& [direction, rate] :
         {std::pair{"h2d", sample.contention.foreign_h2d_bytes_per_s},
          std::pair{"d2h", sample.contention.foreign_d2h_bytes_per_s}}) {
      const Labels labels{{"gpu", gpu}, {"direction", direction}};
      if (readable) {
        foreign.Add(labels).Set(rate);
      } else if (foreign.Has(labels)) {
        foreign.Remove(&foreign.Add(labels));
      }
    }
  }
  if (sample.device_time_s > 0 && std::isfinite(sample.device_time_s)) {
    Counter(FamilyId::kDeviceSeconds).Add({{"gpu", gpu}}).Increment(sample.device_time_s);
  }
  if (result == ProbeResult::kContended) return;  // a neighbour's share, not the hardware's
  if (sample.overlap_ratio && std::isfinite(*sample.overlap_ratio)) {
    Gauge(FamilyId::kOverlap).Add({{"gpu", gpu}}).Set(*sample.overlap_ratio);
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
      families_.Histogram(FamilyId::kTransferDuration).Remove(it->second);
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
        h = &families_.Histogram(FamilyId::kTransferDuration)
                 .Add(series, DurationBuckets(anchor_s));
        histograms_.emplace(key, h);
      } else {
        h = it->second;
      }
    }
    for (double d : sample.durations_s) {
      if (std::isfinite(d) && d >= 0) h->Observe(d);
    }
  }
  Gauge(FamilyId::kBandwidth).Add(series).Set(sample.MedianBandwidth());
  // Only the exceptions get a series: a default config (64 MiB) adds none. Under its size a
  // probe is exempt on any link, so from its first reading; what the GPU's link exempts
  // besides (core::HoldOf) is marked with its band, in RecordHealth.
  if (core::BandExempt(sample.spec.mode, sample.spec.direction, sample.spec.size_bytes)) {
    Gauge(FamilyId::kBandExempt).Add(series).Set(1);
  }
  Gauge(FamilyId::kLastSuccess).Add({{"gpu", gpu}}).Set(UnixNow());
}

void Metrics::RecordConcurrent(const core::GroupRun& run, const core::ExpectedBand& band) {
  const ChangeMark mark(generation_);
  const std::string& group = run.group.name;
  const std::string direction = Dir(run.spec.direction);
  auto& concurrent = Gauge(FamilyId::kConcurrent);
  auto& aggregates = Gauge(FamilyId::kAggregate);
  for (std::size_t i = 0; i < run.samples.size() && i < run.devices.size(); ++i) {
    const probes::ProbeSample& s = run.samples[i];
    const int index = run.devices[i].index;
    const Labels labels{{"gpu", Gpu(index)}, {"direction", direction}, {"group", group}};
    if (s.status == probes::ProbeStatus::kOk && !s.durations_s.empty()) {
      concurrent.Add(labels).Set(s.MedianBandwidth());
    } else if (concurrent.Has(labels)) {
      concurrent.Remove(&concurrent.Add(labels));
    }
    if (s.device_time_s > 0 && std::isfinite(s.device_time_s)) {
      Counter(FamilyId::kDeviceSeconds).Add({{"gpu", Gpu(index)}}).Increment(s.device_time_s);
    }
  }
  const Labels aggregate{{"group", group}, {"direction", direction}};
  if (run.AllOk()) {
    aggregates.Add(aggregate).Set(run.Aggregate());
  } else if (aggregates.Has(aggregate)) {
    aggregates.Remove(&aggregates.Add(aggregate));
  }
  if (band.Known()) {
    Gauge(FamilyId::kAggregateExpected)
        .Add({{"group", group}, {"bound", "lower"}})
        .Set(band.lower_bytes_per_s);
    Gauge(FamilyId::kAggregateExpected)
        .Add({{"group", group}, {"bound", "upper"}})
        .Set(band.upper_bytes_per_s);
  }
  // One info series per group: new members or a new shared link replace the old labels.
  std::lock_guard lock(mutex_);
  prometheus::Gauge& info = Gauge(FamilyId::kGroupInfo)
                                .Add({{"group", group},
                                      {"gpus", run.group.GpuList()},
                                      {"shared_link", run.group.shared_link}});
  auto [it, inserted] = group_info_by_group_.try_emplace(group, &info);
  if (!inserted && it->second != &info) {
    Gauge(FamilyId::kGroupInfo).Remove(it->second);
    it->second = &info;
  }
  info.Set(1);
}

void Metrics::RecordSkipped(int gpu_index, TransferMode mode, ProbeResult result) {
  const ChangeMark mark(generation_);
  Counter(FamilyId::kProbeRuns)
      .Add({{"gpu", Gpu(gpu_index)},
            {"mode", Mode(mode)},
            {"result", std::string(ToString(result))}})
      .Increment();
}

void Metrics::RecordHealth(const DeviceHealth& health) {
  const ChangeMark mark(generation_);
  const std::string gpu = Gpu(health.gpu);
  auto& expected = Gauge(FamilyId::kExpected);
  if (health.band.Known()) {
    expected.Add({{"gpu", gpu}, {"bound", "lower"}}).Set(health.band.lower_bytes_per_s);
    expected.Add({{"gpu", gpu}, {"bound", "upper"}}).Set(health.band.upper_bytes_per_s);
    // A mode held to its own share of the band gets its own series, with mode and
    // direction labels: only where it differs (managed_prefetch h2d), and only while the
    // configuration probes it.
    std::set<Pair> exported;
    for (const core::PairBand& p : health.pair_bands) {
      expected.Add(PairBandLabels(gpu, p.mode, p.direction, "lower")).Set(p.band.lower_bytes_per_s);
      expected.Add(PairBandLabels(gpu, p.mode, p.direction, "upper")).Set(p.band.upper_bytes_per_s);
      exported.emplace(p.mode, p.direction);
    }
    std::lock_guard lock(mutex_);
    for (const auto& [mode, direction] : pair_bands_[health.gpu]) {
      if (exported.contains({mode, direction})) continue;
      for (const char* bound : {"lower", "upper"}) {
        expected.Remove(&expected.Add(PairBandLabels(gpu, mode, direction, bound)));
      }
    }
    pair_bands_[health.gpu] = std::move(exported);
  }
  for (const SeriesHealth& s : health.series) {
    // On its link: an NVLink-C2C GPU marks the modes it keeps to their baseline, a PCIe
    // GPU pinned_async where its chunks' per-copy cost bounds it (core::HoldOf). A GPU with
    // no band (confidential computing without a published figure, a MIG GPU's small
    // instances) has nothing to be exempt from: every series keeps its baseline.
    if (health.band.Known() && core::BandExempt(s.mode, s.direction, s.size_bytes, health.band)) {
      Gauge(FamilyId::kBandExempt)
          .Add({{"gpu", gpu},
                {"mode", Mode(s.mode)},
                {"direction", Dir(s.direction)},
                {"size", probes::FormatSize(s.size_bytes)}})
          .Set(1);
    }
  }
  for (const SeriesHealth& s : health.series) {
    // A reading too old to judge by is no longer published as the GPU's bandwidth.
    if (!s.stale) continue;
    const Labels labels{{"gpu", gpu},
                        {"mode", Mode(s.mode)},
                        {"direction", Dir(s.direction)},
                        {"size", probes::FormatSize(s.size_bytes)}};
    auto& bandwidth = Gauge(FamilyId::kBandwidth);
    if (bandwidth.Has(labels)) bandwidth.Remove(&bandwidth.Add(labels));
  }
  for (const SeriesHealth& s : health.series) {
    if (s.baseline_bytes_per_s <= 0) continue;
    Gauge(FamilyId::kBaseline)
        .Add({{"gpu", gpu},
              {"mode", Mode(s.mode)},
              {"direction", Dir(s.direction)},
              {"size", probes::FormatSize(s.size_bytes)}})
        .Set(s.baseline_bytes_per_s);
  }
  for (const PairVerdict& v : health.verdicts) {
    const Labels labels{{"gpu", gpu}, {"mode", Mode(v.mode)}, {"direction", Dir(v.direction)}};
    auto& degraded = Gauge(FamilyId::kDegraded);
    // Stale: not known, so neither 0 (ok) nor 1 on an old reading: absent until measured.
    if (v.stale) {
      if (degraded.Has(labels)) degraded.Remove(&degraded.Add(labels));
      continue;
    }
    degraded.Add(labels).Set(v.degraded ? 1 : 0);
  }
  Gauge(FamilyId::kSeriesStale).Add({{"gpu", gpu}}).Set(health.StaleSeries());
  for (DiagnosisCause cause : kAllDiagnosisCauses) {
    Gauge(FamilyId::kDiagnosis)
        .Add({{"gpu", gpu}, {"cause", std::string(ToString(cause))}})
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
    auto& family = Gauge(FamilyId::kMigInstanceInfo);
    for (const prometheus::Labels& l : was) family.Remove(&family.Add(l));
    for (const prometheus::Labels& l : instances) family.Add(l).Set(1);
    was = std::move(instances);
  }
}

void Metrics::RecordSchedule(int gpu_index, double allowance_s, int held_back) {
  const ChangeMark mark(generation_);
  const std::string gpu = Gpu(gpu_index);
  Gauge(FamilyId::kProbeAllowance).Add({{"gpu", gpu}}).Set(allowance_s);
  Gauge(FamilyId::kSeriesHeldBack).Add({{"gpu", gpu}}).Set(held_back);
}

void Metrics::RecordLinkErrors(const probes::DeviceInfo& device,
                               const core::LinkErrorReading& reading) {
  const ChangeMark mark(generation_);
  link_errors_->Record(device, reading);
}

void Metrics::RecordCycle(double wall_seconds, CycleResult result) {
  const ChangeMark mark(generation_);
  Gauge(FamilyId::kCycleDuration).Add({}).Set(wall_seconds);
  Counter(FamilyId::kCycles).Add({{"result", std::string(ToString(result))}}).Increment();
}

void Metrics::RecordLinkWatch(int gpu_index, const core::LinkWatchState& state) {
  if (!state.watching) return;
  std::optional<ChangeMark> mark;  // bumped only when something changed: the watch polls often
  std::lock_guard lock(mutex_);
  auto [it, fresh] = link_watch_.try_emplace(gpu_index);
  LinkWatchTotals& last = it->second;
  const Labels labels{{"gpu", Gpu(gpu_index)}};
  if (fresh) {
    mark.emplace(generation_);
    last.transitions_ = &Counter(FamilyId::kLinkTransitions).Add(labels);
    last.reduced_ = &Counter(FamilyId::kLinkReducedSeconds).Add(labels);
  }
  // The counters follow the watch's totals, which only grow while the daemon runs.
  if (state.transitions > last.transitions) {
    if (!mark) mark.emplace(generation_);
    last.transitions_->Increment(static_cast<double>(state.transitions - last.transitions));
    last.transitions = state.transitions;
  }
  if (state.reduced_s > last.reduced_s) {
    if (!mark) mark.emplace(generation_);
    last.reduced_->Increment(state.reduced_s - last.reduced_s);
    last.reduced_s = state.reduced_s;
  }
}

CycleResult CycleResultOf(const core::CycleReport& r) {
  bool all_busy = !r.devices.empty();
  for (const auto& d : r.devices) all_busy = all_busy && d.skipped_busy;
  if (all_busy) return CycleResult::kSkippedBusy;
  if (r.over_budget) return CycleResult::kOverBudget;
  if (r.errors > 0 || r.timeouts > 0 || r.skipped_busy > 0) return CycleResult::kPartial;
  return CycleResult::kOk;
}

void Metrics::OnConcurrent(const core::GroupRun& run, const core::ExpectedBand& band) {
  RecordConcurrent(run, band);
}

void Metrics::OnLinkErrors(const probes::DeviceInfo& device,
                           const core::LinkErrorReading& reading) {
  RecordLinkErrors(device, reading);
}

void Metrics::OnLinkWatch(const probes::DeviceInfo& device, const core::LinkWatchState& state) {
  RecordLinkWatch(device.index, state);
}

void Metrics::OnJudged(const core::GpuJudgement& j) {
  RecordHealth(j.health);
  if (j.cycle != nullptr && !j.confirmation) {
    RecordSchedule(j.cycle->device.index, j.cycle->allowance_s, j.cycle->held_back);
  }
}

void Metrics::OnCycleEnd(const core::CycleReport& report, const core::Settings& settings) {
  (void)settings;
  if (!report.confirmation) RecordCycle(report.wall_s, CycleResultOf(report));
}

void Metrics::RecordConfigReload(bool ok, double unix_seconds) {
  const ChangeMark mark(generation_);
  Gauge(FamilyId::kReloadOk).Add({}).Set(ok ? 1 : 0);
  if (ok) Gauge(FamilyId::kReloadTimestamp).Add({}).Set(unix_seconds);
}

void Metrics::RecordStateWrite(bool ok) {
  const ChangeMark mark(generation_);
  if (!ok) Counter(FamilyId::kStateWriteErrors).Add({}).Increment();
}

void Metrics::RecordTextfileWrite(bool ok) {
  const ChangeMark mark(generation_);
  if (!ok) Counter(FamilyId::kTextfileWriteErrors).Add({}).Increment();
}

void Metrics::RecordEvidence(bool written) {
  const ChangeMark mark(generation_);
  Counter(FamilyId::kEvidenceRecords)
      .Add({{"result", written ? "written" : "dropped"}})
      .Increment();
}

}  // namespace xferd::exporter
