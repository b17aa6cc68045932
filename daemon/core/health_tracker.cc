#include "core/health_tracker.h"

#include <algorithm>

#include "core/probe_runner.h"
#include "xferd/probes/stats.h"

namespace xferd::core {
namespace {

using probes::Direction;
using probes::ProbeStatus;
using probes::TransferMode;

// The series judged worst for a headline: below band first, then the largest shortfall.
double Shortfall(const SeriesHealth& s, const ExpectedBand& device_band) {
  const ExpectedBand band = ModeBand(device_band, s.mode, s.direction);
  if (s.below_band && band.lower_bytes_per_s > 0) {
    return 1.0 + (1.0 - PerDirection(s.direction, s.median_bytes_per_s) / band.lower_bytes_per_s);
  }
  if (s.below_baseline && s.baseline_bytes_per_s > 0) {
    return 1.0 - s.median_bytes_per_s / s.baseline_bytes_per_s;
  }
  return -1.0;
}

}  // namespace

HealthTracker::Reading HealthTracker::JudgeReading(const Settings& config, const ExpectedBand& band,
                                                   const SeriesState& state,
                                                   const probes::ProbeSample& sample) {
  const double median = sample.MedianBandwidth();
  const std::vector<double> learned(state.medians.begin(), state.medians.end());
  Reading r;
  r.below_band = JudgeSample(sample, band).BelowBand();
  r.below_baseline = static_cast<int>(learned.size()) >= kMinBaselineCycles &&
                     median < config.drift_fraction * probes::RobustBaseline(learned);
  return r;
}

FlipAhead HealthTracker::ReadingsToFlip(const probes::DeviceInfo& device,
                                        const probes::LinkPath& path,
                                        const probes::ProbeSample& sample) const {
  if (sample.status != ProbeStatus::kOk || sample.durations_s.empty() || sample.Contended()) {
    return {};
  }
  std::lock_guard lock(mutex_);
  const int k = std::max(1, config_.consecutive_bad);
  const Key key{sample.spec.mode, sample.spec.direction, sample.spec.size_bytes};
  SeriesState fresh;
  const SeriesState* state = &fresh;
  if (auto dev = devices_.find(device.uuid); dev != devices_.end()) {
    if (auto it = dev->second.series.find(key); it != dev->second.series.end()) {
      state = &it->second;
    }
  }
  if (state == &fresh) {
    // Not observed yet: its restored history judges it, as Observe will.
    if (auto dev = restored_.find(device.uuid); dev != restored_.end()) {
      if (auto it = dev->second.find(KeyText(key)); it != dev->second.end()) {
        fresh.medians.assign(it->second.begin(), it->second.end());
      }
    }
  }
  const Reading r = JudgeReading(config_, ResolveBand(config_, device, path), *state, sample);
  const SeriesHealth& h = state->health;
  if (r.Bad() && !h.degraded) return {std::max(0, k - (h.bad_streak + 1)), true};
  if (!r.Bad() && h.degraded) return {std::max(0, k - (h.good_streak + 1)), false};
  return {};
}

std::vector<Diagnosis> DiagnoseOnce(const Settings& config, const CycleObservation& observation) {
  Settings once = config;
  once.consecutive_bad = 1;
  return HealthTracker(once).Observe(observation).diagnoses;
}

bool DeviceHealth::Degraded() const {
  return std::any_of(verdicts.begin(), verdicts.end(), [](const auto& v) { return v.degraded; });
}

bool DeviceHealth::Has(DiagnosisCause cause) const {
  return std::any_of(diagnoses.begin(), diagnoses.end(),
                     [cause](const Diagnosis& d) { return d.cause == cause; });
}

const SeriesHealth* WorstDegraded(const DeviceHealth& health) {
  const SeriesHealth* worst = nullptr;
  for (const SeriesHealth& s : health.series) {
    if (!s.degraded) continue;
    if (!worst || Shortfall(s, health.band) > Shortfall(*worst, health.band)) worst = &s;
  }
  return worst;
}

std::string SeriesKey(TransferMode mode, Direction direction, std::uint64_t size_bytes) {
  return std::string(probes::ToString(mode)) + "/" + std::string(probes::ToString(direction)) +
         "/" + probes::FormatSize(size_bytes);
}

HealthTracker::HealthTracker(const Settings& config) : config_(config) {}

void HealthTracker::Reconfigure(const Settings& config) {
  std::lock_guard lock(mutex_);
  config_ = config;
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  auto configured = [&](const SeriesHealth& h) {
    const bool mode =
        std::find(config_.modes.begin(), config_.modes.end(), h.mode) != config_.modes.end();
    const bool size =
        std::find(config_.sizes.begin(), config_.sizes.end(), h.size_bytes) != config_.sizes.end();
    const bool direction = h.direction != Direction::kBidirectional || config_.bidirectional;
    return mode && size && direction;
  };
  for (auto& [uuid, state] : devices_) {
    DeviceState& device = state;  // a plain reference: lambdas below capture it
    const std::size_t before = device.series.size();
    for (auto it = device.series.begin(); it != device.series.end();) {
      SeriesState& series = it->second;
      while (series.medians.size() > window) series.medians.pop_front();
      if (configured(series.health)) {
        ++it;
        continue;
      }
      // No longer probed: its verdict goes, its history is kept for a later config.
      const SeriesHealth& h = series.health;
      if (!series.medians.empty()) {
        restored_[uuid][SeriesKey(h.mode, h.direction, h.size_bytes)] =
            std::vector<double>(series.medians.begin(), series.medians.end());
      }
      it = device.series.erase(it);
    }
    // Causes read off the dropped series are stale; the next cycle finds what still holds.
    if (device.series.size() != before) device.last.diagnoses.clear();
    std::erase_if(device.last.series, [&](const SeriesHealth& h) { return !configured(h); });
    std::erase_if(device.last.verdicts, [&](const PairVerdict& v) {
      return std::none_of(device.series.begin(), device.series.end(), [&](const auto& entry) {
        return entry.second.health.mode == v.mode && entry.second.health.direction == v.direction;
      });
    });
  }
}

DeviceHealth HealthTracker::Observe(const CycleObservation& obs) {
  std::lock_guard lock(mutex_);
  DeviceState& device = devices_[obs.device.uuid];
  device.last.gpu = obs.device.index;
  device.last.uuid = obs.device.uuid;
  device.last.band = ResolveBand(config_, obs.device, obs.link_path);
  device.last.cc = obs.device.cc;
  device.last.mig = obs.device.mig;
  device.last.unjudgeable = probes::UnjudgeableReason(obs.device.cc, obs.device.mig);
  device.last.pair_bands.clear();
  for (const auto& [mode, direction] : OwnBandPairs(config_)) {
    device.last.pair_bands.push_back(
        {mode, direction, ModeBand(device.last.band, mode, direction)});
  }
  std::vector<Key> observed;  // in the order first measured
  for (const probes::ProbeSample& sample : obs.samples) {
    const Key key{sample.spec.mode, sample.spec.direction, sample.spec.size_bytes};
    Fold(SeriesOf(device, obs.device.uuid, key), sample, device.last.band, obs.busy);
    if (std::find(observed.begin(), observed.end(), key) == observed.end()) {
      observed.push_back(key);
    }
  }
  Publish(device);
  Explain(device, obs, observed);
  return device.last;
}

HealthTracker::SeriesState& HealthTracker::SeriesOf(DeviceState& device, const std::string& uuid,
                                                    const Key& key) {
  auto [it, inserted] = device.series.try_emplace(key);
  SeriesState& state = it->second;
  if (!inserted) return state;
  SeriesHealth& h = state.health;
  std::tie(h.mode, h.direction, h.size_bytes) = key;
  // Take over what the state file held for this series.
  auto dev_it = restored_.find(uuid);
  if (dev_it == restored_.end()) return state;
  auto series_it = dev_it->second.find(KeyText(key));
  if (series_it == dev_it->second.end()) return state;
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  for (double m : series_it->second) state.medians.push_back(m);
  while (state.medians.size() > window) state.medians.pop_front();
  dev_it->second.erase(series_it);
  if (dev_it->second.empty()) restored_.erase(dev_it);
  return state;
}

void HealthTracker::Fold(SeriesState& state, const probes::ProbeSample& sample,
                         const ExpectedBand& band, bool busy) {
  SeriesHealth& h = state.health;
  h.status = sample.status;
  h.below_band = h.below_baseline = h.contended = false;
  if (sample.status == ProbeStatus::kUnsupported) return;
  if (sample.status != ProbeStatus::kOk || sample.durations_s.empty()) {
    // A failed probe says nothing about bandwidth, and is no evidence of health either.
    h.good_streak = 0;
    return;
  }
  if (sample.Contended()) {
    // It measured the neighbour sharing the link: neither judged nor learned, and the
    // streaks stay where they were (it is evidence of nothing).
    h.contended = true;
    return;
  }
  h.median_bytes_per_s = sample.MedianBandwidth();
  const Reading reading = JudgeReading(config_, band, state, sample);
  h.below_band = reading.below_band;
  h.below_baseline = reading.below_baseline;
  // Contention is not a device fault: a busy cycle moves neither verdict nor baseline.
  if (!busy) {
    Count(h);
    // A drop below the baseline is not learned, or the baseline would follow the fault.
    if (!h.below_baseline) Learn(state, h.median_bytes_per_s);
  }
  const std::vector<double> learned(state.medians.begin(), state.medians.end());
  h.baseline_bytes_per_s = probes::RobustBaseline(learned);
  h.baseline_cycles = static_cast<int>(learned.size());
}

void HealthTracker::Count(SeriesHealth& h) const {
  const int k = std::max(1, config_.consecutive_bad);
  if (h.Bad()) {
    ++h.bad_streak;
    h.good_streak = 0;
    if (h.bad_streak >= k) h.degraded = true;
  } else {
    ++h.good_streak;
    h.bad_streak = 0;
    if (h.good_streak >= k) h.degraded = false;
  }
}

void HealthTracker::Learn(SeriesState& state, double median) const {
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  state.medians.push_back(median);
  while (state.medians.size() > window) state.medians.pop_front();
}

void HealthTracker::Publish(DeviceState& device) {
  device.last.series.clear();
  std::map<std::pair<TransferMode, Direction>, bool> pairs;
  for (auto& [key, state] : device.series) {
    device.last.series.push_back(state.health);
    bool& degraded = pairs[{state.health.mode, state.health.direction}];
    degraded = degraded || state.health.degraded;
  }
  std::map<std::pair<TransferMode, Direction>, bool> before;
  for (const PairVerdict& v : device.last.verdicts) before[{v.mode, v.direction}] = v.degraded;
  device.last.verdicts.clear();
  for (const auto& [pair, degraded] : pairs) {
    auto it = before.find(pair);
    const bool was = it != before.end() && it->second;
    device.last.verdicts.push_back({pair.first, pair.second, degraded, degraded != was});
  }
}

void HealthTracker::Explain(DeviceState& device, const CycleObservation& obs,
                            const std::vector<Key>& observed_keys) const {
  std::vector<const SeriesHealth*> observed;
  for (const Key& key : observed_keys) observed.push_back(&device.series.at(key).health);
  device.last.diagnoses = Diagnose(obs, device.last.band, observed, config_.drift_fraction);
  // One shared_uplink per device: the first group and direction that shows it.
  for (const auto& [key, diagnosis] : device.concurrent) {
    if (diagnosis && !device.last.Has(diagnosis->cause)) {
      device.last.diagnoses.push_back(*diagnosis);
    }
  }
}

void HealthTracker::ObserveConcurrent(const GroupRun& run) {
  const std::map<int, Diagnosis> causes = DiagnoseSharedUplink(run);
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < run.devices.size() && i < run.samples.size(); ++i) {
    // A member whose probe failed tells nothing new: what it showed before stays.
    if (run.samples[i].status != ProbeStatus::kOk) continue;
    const probes::DeviceInfo& d = run.devices[i];
    auto it = causes.find(d.index);
    DeviceState& device = devices_[d.uuid];
    device.concurrent[{run.group.name, run.spec.direction}] =
        it != causes.end() ? std::optional<Diagnosis>(it->second) : std::nullopt;
  }
}

double HealthTracker::Baseline(const std::string& uuid, TransferMode mode, Direction direction,
                               std::uint64_t size_bytes) const {
  std::lock_guard lock(mutex_);
  auto dev_it = devices_.find(uuid);
  if (dev_it != devices_.end()) {
    auto it = dev_it->second.series.find(Key{mode, direction, size_bytes});
    if (it != dev_it->second.series.end()) {
      const std::vector<double> m(it->second.medians.begin(), it->second.medians.end());
      return probes::RobustBaseline(m);
    }
  }
  auto restored_dev = restored_.find(uuid);
  if (restored_dev != restored_.end()) {
    auto it = restored_dev->second.find(SeriesKey(mode, direction, size_bytes));
    if (it != restored_dev->second.end()) return probes::RobustBaseline(it->second);
  }
  return 0.0;
}

std::vector<DeviceHealth> HealthTracker::Devices() const {
  std::lock_guard lock(mutex_);
  std::vector<DeviceHealth> out;
  for (const auto& [uuid, device] : devices_) out.push_back(device.last);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.gpu < b.gpu; });
  return out;
}

std::string HealthTracker::Summary() const {
  const std::vector<DeviceHealth> devices = Devices();
  if (devices.empty()) return "starting: no probe cycle finished yet";
  std::size_t total = 0, good = 0;
  std::vector<std::string> problems;
  std::string notes;  // causes that hold on healthy devices: worth a glance, not a verdict
  for (const DeviceHealth& d : devices) {
    if (!d.unjudgeable.empty()) {
      notes += "; gpu" + std::to_string(d.gpu) + " verdict unknown: " + d.unjudgeable;
      continue;
    }
    total += d.verdicts.size();
    if (!d.Degraded()) {
      for (const Diagnosis& diag : d.diagnoses) {
        if (diag.cause == DiagnosisCause::kBelowBand ||
            diag.cause == DiagnosisCause::kBelowBaseline) {
          continue;  // one bad cycle is not news; the verdict decides
        }
        notes += "; gpu" + std::to_string(d.gpu) + " " + std::string(ToString(diag.cause)) + " (" +
                 diag.detail + ")";
      }
    }
    std::size_t degraded_pairs = 0;
    for (const PairVerdict& v : d.verdicts) {
      if (v.degraded) ++degraded_pairs;
    }
    good += d.verdicts.size() - degraded_pairs;
    if (degraded_pairs == 0) continue;

    // Headline: the degraded series that is furthest below what it should be.
    const SeriesHealth* worst = WorstDegraded(d);
    if (worst == nullptr) continue;
    std::string line = "DEGRADED gpu" + std::to_string(d.gpu) + " " +
                       PairName(worst->mode, worst->direction) + " ";
    if (worst->below_band) {
      line += BandReading(*worst) + " < " +
              FormatGBps(ModeBand(d.band, worst->mode, worst->direction).lower_bytes_per_s) +
              " band";
    } else if (worst->below_baseline) {
      line += FormatGBps(worst->median_bytes_per_s) + " < baseline " +
              FormatGBps(worst->baseline_bytes_per_s);
    } else {
      line += FormatGBps(worst->median_bytes_per_s) + " (recovering)";
    }
    if (degraded_pairs > 1) line += " (+" + std::to_string(degraded_pairs - 1) + " more)";
    std::string likely;
    for (const Diagnosis& diag : d.diagnoses) {
      if (diag.cause == DiagnosisCause::kBelowBand ||
          diag.cause == DiagnosisCause::kBelowBaseline) {
        continue;
      }
      likely += (likely.empty() ? "" : ", ") + std::string(ToString(diag.cause)) + " (" +
                diag.detail + ")";
    }
    line += likely.empty() ? "; likely cause not visible to xferd" : "; likely: " + likely;
    problems.push_back(line);
  }
  if (problems.empty()) {
    return "ok: " + std::to_string(good) + "/" + std::to_string(total) + " within band" + notes;
  }
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : " | ") + p;
  return out;
}

BaselineSet HealthTracker::Snapshot() const {
  std::lock_guard lock(mutex_);
  BaselineSet out = restored_;  // series not seen since the restart are kept, not dropped
  for (const auto& [uuid, device] : devices_) {
    for (const auto& [key, state] : device.series) {
      if (state.medians.empty()) continue;
      const SeriesHealth& h = state.health;
      out[uuid][SeriesKey(h.mode, h.direction, h.size_bytes)] =
          std::vector<double>(state.medians.begin(), state.medians.end());
    }
  }
  return out;
}

void HealthTracker::Restore(const BaselineSet& baselines) {
  std::lock_guard lock(mutex_);
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  restored_.clear();
  for (const auto& [uuid, series] : baselines) {
    for (const auto& [key, medians] : series) {
      std::vector<double> kept(medians);
      if (kept.size() > window) kept.erase(kept.begin(), kept.end() - static_cast<long>(window));
      // Series already live take the restored history; the rest wait for their first probe.
      bool applied = false;
      auto dev_it = devices_.find(uuid);
      if (dev_it != devices_.end()) {
        for (auto& [k, state] : dev_it->second.series) {
          if (SeriesKey(state.health.mode, state.health.direction, state.health.size_bytes) ==
              key) {
            state.medians.assign(kept.begin(), kept.end());
            applied = true;
          }
        }
      }
      if (!applied) restored_[uuid][key] = std::move(kept);
    }
  }
}

}  // namespace xferd::core
