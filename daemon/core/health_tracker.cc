#include "core/health_tracker.h"

#include <algorithm>

#include "core/probe_runner.h"
#include "xferd/probes/stats.h"

namespace xferd::core {
namespace {

using probes::Direction;
using probes::ProbeStatus;
using probes::TransferMode;

// How severe a degraded series is, for the headline: below its band first, then below its
// baseline with a link-bound mode before a host-bound one, then a degraded series whose
// last reading was good again; within a class, the largest shortfall.
std::pair<int, double> Severity(const SeriesHealth& s, const ExpectedBand& device_band) {
  const ExpectedBand band = ModeBand(device_band, s.mode, s.direction);
  if (s.below_band && band.lower_bytes_per_s > 0) {
    return {3, 1.0 - PerDirection(s.direction, s.median_bytes_per_s) / band.lower_bytes_per_s};
  }
  if (s.below_baseline && s.BaselineReference() > 0) {
    return {probes::IsLinkBound(s.mode, s.direction) ? 2 : 1,
            1.0 - s.median_bytes_per_s / s.BaselineReference()};
  }
  return {0, 0.0};
}

}  // namespace

HealthTracker::Reading HealthTracker::JudgeReading(const DeviceState& device, const Key& key,
                                                   const ExpectedBand& band,
                                                   const SeriesState& state,
                                                   const probes::ProbeSample& sample) const {
  const double median = sample.MedianBandwidth();
  const std::vector<double> learned(state.medians.begin(), state.medians.end());
  const int n = static_cast<int>(learned.size());
  Reading r;
  r.below_band = JudgeSample(sample, band).BelowBand();
  r.below_baseline = n >= kProvisionalBaselineCycles &&
                     median < config_.drift_fraction * probes::RobustBaseline(learned);
  if (n < kMinBaselineCycles) {
    // Learning: its peers' baseline says what this hardware reads, so a fault present from
    // the first cycle is not learned as normal.
    const double peers = PeerBaseline(device, key);
    if (peers > 0 && median < config_.drift_fraction * peers) {
      r.below_baseline = true;
      r.peers = peers;
    }
  }
  return r;
}

double HealthTracker::PeerBaseline(const DeviceState& device, const Key& key) const {
  std::vector<double> baselines;
  for (const auto& [uuid, other] : devices_) {
    if (&other == &device || other.name != device.name || other.name.empty() ||
        other.link_rate != device.link_rate || other.shape != device.shape) {
      continue;
    }
    auto it = other.series.find(key);
    if (it == other.series.end() || it->second.medians.empty()) continue;
    const std::vector<double> m(it->second.medians.begin(), it->second.medians.end());
    baselines.push_back(probes::RobustBaseline(m));
  }
  return baselines.empty() ? 0.0 : probes::Median(baselines);
}

FlipAhead HealthTracker::ReadingsToFlip(const probes::DeviceInfo& device,
                                        const probes::LinkPath& path,
                                        const probes::ProbeSample& sample) const {
  if (sample.status != ProbeStatus::kOk || sample.durations_s.empty() || sample.Contended()) {
    return {};
  }
  std::lock_guard lock(mutex_);
  const int k = std::max(1, config_.consecutive_bad);
  const Key key = KeyOf(sample.spec);
  SeriesState fresh;
  const SeriesState* state = &fresh;
  DeviceState unknown;
  const DeviceState* dev = &unknown;
  unknown.name = device.name;
  unknown.shape = ReadingShape(device);
  if (auto d = devices_.find(device.uuid); d != devices_.end()) {
    dev = &d->second;
    if (auto it = d->second.series.find(key); it != d->second.series.end()) {
      state = &it->second;
    }
  }
  if (state == &fresh) {
    // Not observed yet: its restored history judges it, as Observe will.
    if (auto r = restored_.find(device.uuid); r != restored_.end()) {
      if (auto it = r->second.find(KeyText(key, dev->shape)); it != r->second.end()) {
        fresh.medians.assign(it->second.begin(), it->second.end());
      }
    }
  }
  const Reading r = JudgeReading(*dev, key, ResolveBand(config_, device, path), *state, sample);
  const SeriesHealth& h = state->health;
  bool degraded_after = state->degraded;
  FlipAhead flip;
  if (r.Bad() && !state->degraded) {
    flip = {std::max(0, k - (h.bad_streak + 1)), true};
    degraded_after = h.bad_streak + 1 >= k;
  } else if (!r.Bad() && state->degraded) {
    flip = {std::max(0, k - (h.good_streak + 1)), false};
    degraded_after = h.good_streak + 1 < k;
  }
  flip.degraded = degraded_after;
  flip.watch = r.Bad() || degraded_after;
  return flip;
}

std::vector<Diagnosis> DiagnoseOnce(const Settings& config, const CycleObservation& observation) {
  Settings once = config;
  once.consecutive_bad = 1;
  return HealthTracker(once).Observe(observation).diagnoses;
}

bool DeviceHealth::Degraded() const {
  // A flapping link is a fault of its own: the probes see the link only while they run.
  return Has(DiagnosisCause::kLinkFlapping) ||
         std::any_of(verdicts.begin(), verdicts.end(), [](const auto& v) { return v.degraded; });
}

bool DeviceHealth::Unknown() const {
  return !unjudgeable.empty() && !Degraded();
}

bool DeviceHealth::Stale() const {
  return !Degraded() && unjudgeable.empty() &&
         std::any_of(series.begin(), series.end(),
                     [](const SeriesHealth& s) { return s.headline && s.stale; });
}

int DeviceHealth::StaleSeries() const {
  return static_cast<int>(
      std::count_if(series.begin(), series.end(), [](const SeriesHealth& s) { return s.stale; }));
}

bool DeviceHealth::Has(DiagnosisCause cause) const {
  return std::any_of(diagnoses.begin(), diagnoses.end(),
                     [cause](const Diagnosis& d) { return d.cause == cause; });
}

const SeriesHealth* WorstDegraded(const DeviceHealth& health) {
  const SeriesHealth* worst = nullptr;
  for (const SeriesHealth& s : health.series) {
    if (!s.degraded) continue;
    if (!worst || Severity(s, health.band) > Severity(*worst, health.band)) worst = &s;
  }
  return worst;
}

std::optional<DiagnosisCause> LeadingCause(const DeviceHealth& health) {
  const SeriesHealth* worst = WorstDegraded(health);
  if (worst == nullptr) {
    // DEGRADED with no series low: a link that flaps between probes is the fault itself.
    if (health.Has(DiagnosisCause::kLinkFlapping)) return DiagnosisCause::kLinkFlapping;
    return std::nullopt;
  }
  // The causes are ranked (Diagnose): the first fault that explains a low reading.
  for (const Diagnosis& d : health.diagnoses) {
    if (IsNote(d.cause) || d.cause == DiagnosisCause::kBelowBand ||
        d.cause == DiagnosisCause::kBelowBaseline) {
      continue;
    }
    return d.cause;
  }
  if (worst->below_band) return DiagnosisCause::kBelowBand;
  if (worst->below_baseline) return DiagnosisCause::kBelowBaseline;
  // Recovering: what it was below when it flipped is not known any more; the cycle's own.
  for (const Diagnosis& d : health.diagnoses) {
    if (!IsNote(d.cause)) return d.cause;
  }
  return std::nullopt;
}

std::string SeriesKey(TransferMode mode, Direction direction, std::uint64_t size_bytes) {
  return std::string(probes::ToString(mode)) + "/" + std::string(probes::ToString(direction)) +
         "/" + probes::FormatSize(size_bytes);
}

std::string ReadingShape(const probes::DeviceInfo& device) {
  std::string shape = device.cc.On() ? "cc" : "";
  if (device.mig.Enabled()) {
    int engines = 0;
    for (std::size_t i : probes::LinkInstances(device.mig)) {
      engines = std::max(engines, device.mig.instances[i].copy_engines);
    }
    shape += std::string(shape.empty() ? "" : "+") + "mig" +
             (engines > 0 ? "-" + std::to_string(engines) + "ce" : "");
  }
  return shape;
}

std::string BaselineKey(TransferMode mode, Direction direction, std::uint64_t size_bytes,
                        const std::string& shape) {
  return SeriesKey(mode, direction, size_bytes) + (shape.empty() ? "" : "@" + shape);
}

HealthTracker::HealthTracker(const Settings& config) : config_(config) {}

void HealthTracker::Reconfigure(const Settings& config) {
  std::lock_guard lock(mutex_);
  config_ = config;
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  for (auto& [uuid, state] : devices_) {
    DeviceState& device = state;  // a plain reference: lambdas below capture it
    // Sizes as the plan makes them on this GPU's link (PlannedSize).
    auto configured = [&](const SeriesHealth& h) {
      const bool mode =
          std::find(config_.modes.begin(), config_.modes.end(), h.mode) != config_.modes.end();
      const bool size = std::any_of(config_.sizes.begin(), config_.sizes.end(), [&](auto size) {
        return PlannedSize(config_, size, device.link_rate) == h.size_bytes;
      });
      const bool direction = h.direction != Direction::kBidirectional || config_.bidirectional;
      return mode && size && direction;
    };
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
        restored_[uuid][BaselineKey(h.mode, h.direction, h.size_bytes, device.shape)] =
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
  device.name = obs.device.name;
  if (device.last.band.link_bytes_per_s > 0) device.link_rate = device.last.band.link_bytes_per_s;
  Reshape(device, obs.device.uuid, ReadingShape(obs.device));
  device.last.cc = obs.device.cc;
  device.last.mig = obs.device.mig;
  device.last.unjudgeable = probes::UnjudgeableReason(obs.device.cc, obs.device.mig);
  device.last.pair_bands.clear();
  for (const auto& [mode, direction] : OwnBandPairs(config_)) {
    device.last.pair_bands.push_back(
        {mode, direction, ModeBand(device.last.band, mode, direction)});
  }
  // The plan's series are known from the start: one the rotation never reaches goes stale.
  for (const probes::ProbeSpec& spec : obs.planned)
    SeriesOf(device, obs.device.uuid, KeyOf(spec), obs);
  std::vector<Key> observed;  // in the order first measured
  for (const probes::ProbeSample& sample : obs.samples) {
    const Key key = KeyOf(sample.spec);
    Fold(device, key, SeriesOf(device, obs.device.uuid, key, obs), sample, obs);
    if (std::find(observed.begin(), observed.end(), key) == observed.end()) {
      observed.push_back(key);
    }
  }
  Refresh(device, obs.at);
  Publish(device);
  Explain(device, obs, observed);
  return device.last;
}

void HealthTracker::Reshape(DeviceState& device, const std::string& uuid,
                            const std::string& shape) {
  if (shape == device.shape) return;
  // Its readings from now on are of another shape (confidential computing or MIG turned on
  // or off, other instances): what each series learned is kept under its old shape's key
  // (it comes back with that shape), and each series starts over, from what was learned in
  // the new shape before, if anything.
  for (const auto& [key, state] : device.series) {
    if (state.medians.empty()) continue;
    restored_[uuid][KeyText(key, device.shape)] =
        std::vector<double>(state.medians.begin(), state.medians.end());
  }
  device.series.clear();
  device.last.series.clear();
  device.last.verdicts.clear();
  device.last.diagnoses.clear();
  device.shape = shape;
}

HealthTracker::SeriesState& HealthTracker::SeriesOf(DeviceState& device, const std::string& uuid,
                                                    const Key& key, const CycleObservation& obs) {
  auto [it, inserted] = device.series.try_emplace(key);
  SeriesState& state = it->second;
  if (!inserted) return state;
  state.since = obs.at;
  SeriesHealth& h = state.health;
  std::tie(h.mode, h.direction, h.size_bytes) = key;
  // Take over what the state file held for this series.
  auto dev_it = restored_.find(uuid);
  if (dev_it == restored_.end()) return state;
  auto series_it = dev_it->second.find(KeyText(key, device.shape));
  if (series_it == dev_it->second.end()) return state;
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  for (double m : series_it->second) state.medians.push_back(m);
  while (state.medians.size() > window) state.medians.pop_front();
  dev_it->second.erase(series_it);
  if (dev_it->second.empty()) restored_.erase(dev_it);
  return state;
}

void HealthTracker::Fold(DeviceState& device, const Key& key, SeriesState& state,
                         const probes::ProbeSample& sample, const CycleObservation& obs) {
  SeriesHealth& h = state.health;
  state.probed = true;
  h.status = sample.status;
  h.below_band = h.below_baseline = h.contended = false;
  h.peer_baseline_bytes_per_s = 0;
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
  const Reading reading = JudgeReading(device, key, device.last.band, state, sample);
  h.below_band = reading.below_band;
  h.below_baseline = reading.below_baseline;
  h.peer_baseline_bytes_per_s = reading.peers;
  // Contention is not a device fault: a busy cycle moves neither verdict nor baseline.
  if (!obs.busy) {
    const bool was_healthy = !state.degraded && h.bad_streak == 0;
    Count(state);
    h.measured_at = obs.at;
    h.measured_wall = obs.at_wall;
    if (reading.Bad()) state.last_bad = obs.at;
    // Only health is learned: not a reading judged bad (below band or baseline), nor one of
    // a series on a bad streak or degraded, nor a confirmation round's (re-measured because
    // something looked wrong), so a fault never teaches the baseline that it is normal.
    if (!reading.Bad() && was_healthy && !state.degraded && !obs.confirmation) {
      Learn(state, h.median_bytes_per_s);
    }
  }
  const std::vector<double> learned(state.medians.begin(), state.medians.end());
  h.baseline_bytes_per_s = probes::RobustBaseline(learned);
  h.baseline_cycles = static_cast<int>(learned.size());
}

void HealthTracker::Count(SeriesState& state) const {
  SeriesHealth& h = state.health;
  const int k = std::max(1, config_.consecutive_bad);
  if (h.Bad()) {
    ++h.bad_streak;
    h.good_streak = 0;
    if (h.bad_streak >= k) state.degraded = true;
  } else {
    ++h.good_streak;
    h.bad_streak = 0;
    if (h.good_streak >= k) state.degraded = false;
  }
}

void HealthTracker::Learn(SeriesState& state, double median) const {
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  state.medians.push_back(median);
  while (state.medians.size() > window) state.medians.pop_front();
}

std::vector<DeviceHealth> HealthTracker::Expire(SteadyTime now) {
  std::lock_guard lock(mutex_);
  std::vector<DeviceHealth> changed;
  for (auto& [uuid, device] : devices_) {
    if (!device.judged_at || now <= *device.judged_at) continue;  // no clock, or current
    std::vector<std::pair<bool, bool>> before;
    for (const auto& [key, state] : device.series) {
      before.emplace_back(state.health.degraded, state.health.stale);
    }
    Refresh(device, now);
    std::vector<std::pair<bool, bool>> after;
    for (const auto& [key, state] : device.series) {
      after.emplace_back(state.health.degraded, state.health.stale);
    }
    if (after == before) continue;
    Publish(device);
    changed.push_back(device.last);
  }
  return changed;
}

std::optional<SteadyTime> HealthTracker::NextExpiry() const {
  std::lock_guard lock(mutex_);
  const FreshnessBounds bounds = FreshnessOf(config_);
  const auto after = [](const std::optional<SteadyTime>& t, double s) {
    return *t + std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(s));
  };
  std::optional<SteadyTime> next;
  for (const auto& [uuid, device] : devices_) {
    if (!device.judged_at) continue;
    for (const auto& [key, state] : device.series) {
      const SeriesHealth& h = state.health;
      if (h.status == ProbeStatus::kUnsupported) continue;
      std::optional<SteadyTime> at;
      if (state.degraded && state.last_bad && !h.stale) {
        at = after(state.last_bad, bounds.degraded_s);
      } else if (!h.stale) {
        const std::optional<SteadyTime>& from = h.measured_at ? h.measured_at : state.since;
        if (from) at = after(from, h.headline ? bounds.headline_s : bounds.rotating_s);
      }
      // Only what lies ahead of the last judgement (a lapse already judged is no news).
      if (at && *at > *device.judged_at && (!next || *at < *next)) next = at;
    }
  }
  return next;
}

void HealthTracker::Refresh(DeviceState& device, const std::optional<SteadyTime>& at) {
  const FreshnessBounds bounds = FreshnessOf(config_);
  if (at) device.judged_at = at;
  const auto age = [&](const std::optional<SteadyTime>& t) {
    return std::chrono::duration<double>(*at - *t).count();
  };
  for (auto& [key, state] : device.series) {
    SeriesHealth& h = state.health;
    h.headline = IsHeadline(probes::ProbeSpec{std::get<0>(key), std::get<1>(key), std::get<2>(key)},
                            config_);
    if (!at || h.status == ProbeStatus::kUnsupported) {
      // No clock: every reading counts. A mode the GPU cannot do is never stale.
      h.degraded = state.degraded;
      h.stale = false;
      continue;
    }
    if (state.degraded) {
      if (state.last_bad && age(state.last_bad) < bounds.degraded_s) {
        h.degraded = true;
        h.stale = false;
        continue;
      }
      if (h.measured_at && state.last_bad && *h.measured_at > *state.last_bad) {
        // No bad reading within the bound, and it read well since: the fault is gone.
        state.degraded = false;
        h.bad_streak = 0;
      } else {
        // Its verdict rested on a reading too old to keep it DEGRADED, and none came since.
        h.degraded = false;
        h.stale = true;
        continue;
      }
    }
    h.degraded = false;
    const std::optional<SteadyTime>& from = h.measured_at ? h.measured_at : state.since;
    h.stale = from && age(from) >= (h.headline ? bounds.headline_s : bounds.rotating_s);
  }
}

void HealthTracker::Publish(DeviceState& device) {
  device.last.series.clear();
  struct Pair {
    bool degraded = false, stale = false;
  };
  std::map<std::pair<TransferMode, Direction>, Pair> pairs;
  for (auto& [key, state] : device.series) {
    const SeriesHealth& h = state.health;
    // A series planned but never probed yet, and not stale yet, has nothing to show.
    if (!state.probed && !h.stale) continue;
    device.last.series.push_back(h);
    Pair& p = pairs[{h.mode, h.direction}];
    p.degraded = p.degraded || h.degraded;
    p.stale = p.stale || h.stale;
  }
  std::map<std::pair<TransferMode, Direction>, bool> before;
  for (const PairVerdict& v : device.last.verdicts) before[{v.mode, v.direction}] = v.degraded;
  device.last.verdicts.clear();
  for (const auto& [pair, p] : pairs) {
    auto it = before.find(pair);
    const bool was = it != before.end() && it->second;
    device.last.verdicts.push_back(
        {pair.first, pair.second, p.degraded, !p.degraded && p.stale, p.degraded != was});
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
  RankCauses(device.last.diagnoses);
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
  std::size_t total = 0, good = 0, stale = 0;
  std::vector<std::string> problems;
  std::string notes;  // causes that hold on healthy devices: worth a glance, not a verdict
  const auto text = [](const Diagnosis& d) {
    return std::string(ToString(d.cause)) + " (" + d.detail + ")";
  };
  for (const DeviceHealth& d : devices) {
    if (d.Unknown()) {
      // Nothing to judge it by as it is: its own line, as a stale GPU has (not "ok").
      problems.push_back("UNKNOWN gpu" + std::to_string(d.gpu) + ": " + d.unjudgeable);
      continue;
    }
    total += d.verdicts.size();
    std::size_t degraded_pairs = 0;
    for (const PairVerdict& v : d.verdicts) {
      if (v.degraded) ++degraded_pairs;
      if (v.stale) ++stale;
    }
    if (!d.Degraded()) {
      for (const PairVerdict& v : d.verdicts) good += !v.stale;
      for (const Diagnosis& diag : d.diagnoses) {
        if (diag.cause == DiagnosisCause::kBelowBand ||
            diag.cause == DiagnosisCause::kBelowBaseline) {
          continue;  // one bad cycle is not news; the verdict decides
        }
        notes += "; gpu" + std::to_string(d.gpu) + " " + text(diag);
      }
      if (d.Stale()) {
        problems.push_back("STALE gpu" + std::to_string(d.gpu) +
                           ": its headline probes have no current reading, so its verdict is "
                           "not known (busy, the cycle budget or failing probes: see the log)");
      }
      continue;
    }
    good += d.verdicts.size() - degraded_pairs;

    // Headline: the most severe degraded series (WorstDegraded), and the causes ranked.
    const SeriesHealth* worst = WorstDegraded(d);
    std::string line = "DEGRADED gpu" + std::to_string(d.gpu) + " ";
    if (worst == nullptr) {
      // DEGRADED with every series within band: its link flaps between probes (the cause,
      // listed below, says what the link watch saw).
      line += "PCIe link";
    } else if (worst->below_band) {
      line += PairName(worst->mode, worst->direction) + " " + BandReading(*worst) + " < " +
              FormatGBps(ModeBand(d.band, worst->mode, worst->direction).lower_bytes_per_s) +
              " band";
    } else if (worst->below_baseline) {
      line += PairName(worst->mode, worst->direction) + " " +
              FormatGBps(worst->median_bytes_per_s) + " < " +
              (worst->peer_baseline_bytes_per_s > 0 ? "its peers' baseline " : "baseline ") +
              FormatGBps(worst->BaselineReference());
    } else {
      line += PairName(worst->mode, worst->direction) + " " +
              FormatGBps(worst->median_bytes_per_s) + " (recovering)";
    }
    if (degraded_pairs > 1) line += " (+" + std::to_string(degraded_pairs - 1) + " more)";
    std::string likely, also;
    for (const Diagnosis& diag : d.diagnoses) {
      if (diag.cause == DiagnosisCause::kBelowBand ||
          diag.cause == DiagnosisCause::kBelowBaseline) {
        continue;
      }
      std::string& list = IsNote(diag.cause) ? also : likely;
      list += (list.empty() ? "" : ", ") + text(diag);
    }
    line += likely.empty() ? "; likely cause not visible to xferd" : "; likely: " + likely;
    if (!also.empty()) line += "; not a fault: " + also;
    problems.push_back(line);
  }
  if (problems.empty()) {
    return "ok: " + std::to_string(good) + "/" + std::to_string(total) + " within band" +
           (stale > 0 ? ", " + std::to_string(stale) + " stale" : std::string()) + notes;
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
      out[uuid][BaselineKey(h.mode, h.direction, h.size_bytes, device.shape)] =
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
          if (BaselineKey(state.health.mode, state.health.direction, state.health.size_bytes,
                          dev_it->second.shape) == key) {
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
