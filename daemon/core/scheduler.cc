#include "core/scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/band.h"
#include "core/plan.h"
#include "platform/logging.h"

namespace xferd::core {

using platform::ScopedLogFields;

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

Scheduler::Scheduler(probes::TransferBackend& backend, std::vector<probes::DeviceInfo> devices,
                     const Settings& config, std::unique_ptr<BusyDetector> busy, Clock& clock,
                     std::uint64_t seed, SchedulerCallbacks callbacks)
    : backend_(backend),
      devices_(std::move(devices)),
      clock_(clock),
      callbacks_(std::move(callbacks)),
      rng_(seed),
      runner_(backend, clock, HangWatch::kReport),
      config_(config),
      busy_(std::move(busy)) {
  // Not full: the first cycle runs the headline and what one interval's refill buys, so a
  // start never spends the whole window at once; the reserve is there from the start.
  for (const auto& device : devices_) {
    allowances_.insert_or_assign(device.index, core::Allowance(config_, clock_.Now()));
    // The rate its probe sizes follow: what the path carries when healthy, read once so a
    // link that trains down later keeps its series (a maximum that cannot be read: the
    // link as trained now).
    plan_rate_[device.index] = HostLinkRate(backend_.ReadLinkPath(device.index));
  }
}

std::vector<probes::ProbeSpec> Scheduler::PlanOf(const Settings& config, int device) const {
  std::lock_guard lock(mutex_);
  auto it = plan_rate_.find(device);
  return PlanProbes(config, Deadlines::kAsConfigured, it == plan_rate_.end() ? 0 : it->second);
}

std::set<ProbeKey> Scheduler::Watched(int device) const {
  std::lock_guard lock(mutex_);
  std::set<ProbeKey> watched;
  if (auto it = watch_.find(device); it != watch_.end()) {
    for (const auto& [key, w] : it->second) {
      if (w.watch) watched.insert(key);
    }
  }
  return watched;
}

std::optional<double> Scheduler::Allowance(int device) const {
  std::lock_guard lock(mutex_);
  auto it = allowances_.find(device);
  if (it == allowances_.end()) return std::nullopt;
  return it->second.Balance();
}

void Scheduler::Reconfigure(const Settings& config, std::unique_ptr<BusyDetector> busy) {
  std::lock_guard lock(mutex_);
  if (config.interval != config_.interval) regrid_ = true;
  config_ = config;
  busy_ = std::move(busy);
}

std::optional<SteadyTime> Scheduler::LastCycleEnd() const {
  std::lock_guard lock(mutex_);
  return last_cycle_end_;
}

std::optional<Stall> Scheduler::CheckStall(SteadyTime now) {
  return runner_.CheckStall(now);
}

std::optional<SteadyTime> Scheduler::NextConfirmation() const {
  std::lock_guard lock(mutex_);
  std::optional<SteadyTime> due;
  for (const auto& [index, pending] : pending_) {
    for (const auto& [key, p] : pending) {
      if (!due || p.due < *due) due = p.due;
    }
  }
  return due;
}

SteadyTime Scheduler::ConfirmationDue(const Settings& config, SteadyTime now) {
  // Random, so a dip that comes and goes in step with something periodic is not confirmed
  // by the same rhythm; never more than half an interval, so short test intervals work.
  const double half = duration<double>(config.interval).count() / 2;
  const double lo = std::min(duration<double>(kConfirmDelayMin).count(), half / 2);
  const double hi = std::min(duration<double>(kConfirmDelayMax).count(), half);
  std::uniform_real_distribution<double> delay(lo, std::max(lo, hi));
  return now + duration_cast<SteadyTime::duration>(duration<double>(delay(rng_)));
}

void Scheduler::Run(std::stop_token stop) {
  SteadyTime next = clock_.Now();
  while (!stop.stop_requested()) {
    // A verdict that lapses before anything else is due is published when it does.
    if (callbacks_.next_expiry && callbacks_.on_expiry) {
      const auto expiry = callbacks_.next_expiry();
      const auto due = NextConfirmation();
      if (expiry && *expiry < next && (!due || *expiry < *due)) {
        if (!clock_.SleepUntil(*expiry, stop)) break;
        callbacks_.on_expiry();
        continue;
      }
    }
    // A confirmation due before the next cycle runs first, as a round of its own.
    if (const auto due = NextConfirmation(); due && *due < next) {
      if (!clock_.SleepUntil(*due, stop)) break;
      Settings config;
      std::shared_ptr<BusyDetector> busy;
      {
        std::lock_guard lock(mutex_);
        config = config_;
        busy = busy_;
      }
      CycleReport report = RunConfirmations(config, busy.get(), stop);
      if (stop.stop_requested()) break;
      report.number = cycles_completed_.load();
      report.next_in = duration_cast<milliseconds>(next - clock_.Now());
      if (!report.devices.empty() && callbacks_.on_cycle) callbacks_.on_cycle(report);
      continue;
    }
    if (!clock_.SleepUntil(next, stop)) break;
    Settings config;
    std::shared_ptr<BusyDetector> busy;
    const SteadyTime start = clock_.Now();
    {
      std::lock_guard lock(mutex_);
      config = config_;
      busy = busy_;
      if (regrid_) {
        grid_origin_ = start;
        grid_slot_ = 0;
        regrid_ = false;
      }
    }
    CycleReport report = RunCycle(config, busy.get(), stop);
    if (stop.stop_requested()) break;
    const SteadyTime end = clock_.Now();
    next = NextStart(config, start);
    report.next_in = duration_cast<milliseconds>(next - end);
    Forecast(config, next, report);
    {
      std::lock_guard lock(mutex_);
      last_cycle_end_ = end;
    }
    report.number = cycles_completed_.load() + 1;
    if (callbacks_.on_cycle) callbacks_.on_cycle(report);
    cycles_completed_.fetch_add(1);
  }
}

SteadyTime Scheduler::NextStart(const Settings& config, SteadyTime cycle_start) {
  const SteadyTime now = clock_.Now();
  SteadyTime floor = std::max(now, cycle_start);
  std::lock_guard lock(mutex_);
  // Only the headline can space cycles out: when its device time alone is more than one
  // interval's refill, cycles are spaced so that it fits (the duty-cycle cap holds). What
  // the rotation spends never delays the next cycle: it only spends what the balance holds.
  double headline_s = 0;
  int heaviest = -1;
  for (auto& [index, allowance] : allowances_) {
    allowance.Refill(config, now);
    if (allowance.HeadlineSeconds() > headline_s) {
      headline_s = allowance.HeadlineSeconds();
      heaviest = index;
    }
  }
  const double interval_s = duration<double>(config.interval).count();
  const double per_interval = config.max_duty_cycle * interval_s;
  if (config.max_duty_cycle > 0 && headline_s > per_interval) {
    const auto spacing = duration<double>(headline_s / config.max_duty_cycle);
    floor = std::max(floor, cycle_start + duration_cast<SteadyTime::duration>(spacing));
    if (!overdraw_warned_) {
      overdraw_warned_ = true;
      spdlog::warn(
          "gpu {}: the headline probes (pinned h2d/d2h) alone took {:.1f} ms of device "
          "time, more than max_duty_cycle {:g} allows per {:g} s interval ({:.1f} ms); "
          "cycles are spaced about {:.0f} s apart to keep the cap. Raise "
          "probe.max_duty_cycle to {:.4f} or probe smaller sizes to keep the interval "
          "(said once)",
          heaviest, headline_s * 1e3, config.max_duty_cycle, interval_s, per_interval * 1e3,
          spacing.count(), headline_s / interval_s);
    }
  }
  const auto interval = duration_cast<SteadyTime::duration>(config.interval);
  // Cycles sit on a grid (origin + k x interval), each a random fraction of the interval
  // late, so the average rate is the interval's and a fleet started together drifts apart.
  std::uniform_real_distribution<double> jitter_fraction(0.0, std::max(0.0, config.jitter));
  std::int64_t slot = grid_slot_ + 1;
  if (interval.count() > 0 && floor > grid_origin_ + slot * interval) {
    // Slots the cycle or the duty cap overran are dropped, not made up for.
    slot = std::max<std::int64_t>(slot, (floor - grid_origin_) / interval);
  }
  SteadyTime start = grid_origin_ + slot * interval +
                     duration_cast<SteadyTime::duration>(interval * jitter_fraction(rng_));
  if (start < floor) {
    ++slot;
    start = grid_origin_ + slot * interval +
            duration_cast<SteadyTime::duration>(interval * jitter_fraction(rng_));
  }
  grid_slot_ = slot;
  return std::max(start, floor);
}

bool Scheduler::SkipBusy(Round& round, DeviceCycle& dc,
                         const std::vector<probes::ProbeSpec>& specs) {
  if (!round.config.busy_detection || round.busy == nullptr) return false;
  dc.busy = round.busy->Check(dc.device);
  if (!dc.busy || !dc.busy->busy) return false;
  dc.skipped_busy = true;
  round.report.skipped_busy += static_cast<int>(specs.size());
  const std::string gpu = std::to_string(dc.device.index);
  ScopedLogFields fields(gpu, "");
  spdlog::info("gpu {}: busy ({}); skipping its probes {}", gpu, dc.busy->reason,
               round.report.confirmation ? "(confirmation)" : "this cycle");
  for (const auto& spec : specs) {
    if (callbacks_.on_skipped_busy) callbacks_.on_skipped_busy(dc.device, spec);
  }
  return true;
}

bool Scheduler::RunOne(Round& round, DeviceCycle& dc, const probes::ProbeSpec& spec,
                       bool headline) {
  if (round.stop.stop_requested()) return false;
  if (clock_.Now() - round.start >= round.config.cycle_budget) {
    ++dc.skipped_budget;
    ++round.report.skipped_budget;
    round.report.over_budget = true;
    return false;
  }
  ScopedLogFields fields(std::to_string(dc.device.index), std::string(probes::ToString(spec.mode)));
  std::optional<Measured> measured =
      runner_.Run(dc.device, spec, round.busy, round.config, !dc.link_read, round.stop);
  if (!measured) return false;  // cut short: not a result
  Book(round, dc, *measured, headline);
  if (callbacks_.on_probe) callbacks_.on_probe(dc.device, measured->sample);
  if (measured->link) BookLink(dc, std::move(*measured->link));
  Confirm(round.config, dc.device, dc.link_path, measured->sample);
  dc.samples.push_back(std::move(measured->sample));
  return true;
}

void Scheduler::Book(Round& round, DeviceCycle& dc, const Measured& measured, bool headline) {
  const probes::ProbeSample& sample = measured.sample;
  const probes::ProbeSpec& spec = sample.spec;
  const int gpu = dc.device.index;
  if (sample.status == probes::ProbeStatus::kOk && !sample.traffic && round.busy != nullptr) {
    bool& said = unreadable_said_[gpu];
    if (!said) {
      said = true;
      spdlog::info(
          "gpu {}: the link cannot be read around its probes ({}): another process's "
          "traffic cannot be told from a slow link, so readings are judged as they come "
          "(xferd_gpu_load_readable 0; said once)",
          gpu, round.busy->Describe());
    }
  }
  round.report.device_s += measured.cost_s;
  {
    std::lock_guard lock(mutex_);
    core::Allowance& allowance = allowances_[gpu];
    allowance.Charge(spec, measured.started, measured.cost_s, headline,
                     sample.Contended() ? ReadingFate::kSetAside : ReadingFate::kCounted);
    if (spec.mode == probes::TransferMode::kPinned && spec.direction == probes::Direction::kH2D &&
        sample.status == probes::ProbeStatus::kOk && !sample.Contended() &&
        sample.MedianBandwidth() > 0) {
      allowance.SetPinnedRate(sample.MedianBandwidth());
    }
  }
  switch (sample.status) {
    case probes::ProbeStatus::kOk:
      ++round.report.ok;
      if (sample.Contended()) {
        ++round.report.contended;
        ++dc.contended;
        spdlog::debug("gpu {} {} {} {}: contended: {}; the reading is set aside", gpu,
                      probes::ToString(spec.mode), probes::ToString(spec.direction),
                      probes::FormatSize(spec.size_bytes), sample.contention.reason);
      }
      break;
    case probes::ProbeStatus::kError:
    case probes::ProbeStatus::kTimeout: {
      const bool error = sample.status == probes::ProbeStatus::kError;
      ++(error ? round.report.errors : round.report.timeouts);
      spdlog::warn("gpu {} {} {} {}: probe {}: {}", gpu, probes::ToString(spec.mode),
                   probes::ToString(spec.direction), probes::FormatSize(spec.size_bytes),
                   error ? "error" : "timed out", sample.message);
      break;
    }
    case probes::ProbeStatus::kUnsupported: ++round.report.unsupported; break;
  }
}

void Scheduler::Confirm(const Settings& config, const probes::DeviceInfo& device,
                        const probes::LinkPath& path, const probes::ProbeSample& sample) {
  // Re-measure soon when the reading starts or continues a streak. A contended reading is
  // evidence of nothing: what was pending stays pending, to be tried again after another
  // delay.
  if (!callbacks_.flip_ahead) return;
  const SteadyTime due = ConfirmationDue(config, clock_.Now());
  const ProbeKey key = KeyOf(sample.spec);
  if (sample.Contended()) {
    std::lock_guard lock(mutex_);
    auto& pending = pending_[device.index];
    if (auto it = pending.find(key); it != pending.end()) it->second.due = due;
    return;
  }
  const FlipAhead flip = callbacks_.flip_ahead(device, path, sample);
  std::lock_guard lock(mutex_);
  watch_[device.index][key] = {flip.watch, flip.degraded};
  auto& pending = pending_[device.index];
  if (flip.readings > 0) {
    pending[key] = {sample.spec, flip, due};
  } else {
    pending.erase(key);
  }
}

void Scheduler::ReadLink(DeviceCycle& dc) {
  BookLink(dc, backend_.ReadLinkPath(dc.device.index));
}

void Scheduler::BookLink(DeviceCycle& dc, probes::LinkPath path) {
  dc.link_path = std::move(path);
  dc.link_read = true;
  // What unmeasured costs are estimated at: the link as it runs now (NVLink-C2C's rate).
  const probes::PcieLink* narrowest = dc.link_path.Narrowest();
  const double rate = dc.link_path.c2c ? probes::kC2cBytesPerSecond
                      : narrowest      ? narrowest->CurrentBytesPerSecond()
                                       : 0.0;
  if (rate > 0) {
    std::lock_guard lock(mutex_);
    allowances_[dc.device.index].SetLinkRate(rate);
  }
  if (callbacks_.on_link_path) callbacks_.on_link_path(dc.device, dc.link_path);
}

CycleReport Scheduler::RunCycle(const Settings& config, BusyDetector* busy, std::stop_token stop) {
  CycleReport report;
  report.started_at = std::chrono::system_clock::now();
  Round round{config, busy, stop, clock_.Now(), report};
  // From the first GPU the budget cut last time: whatever the budget cuts rotates.
  const std::size_t n = devices_.size();
  const std::size_t first = n == 0 ? 0 : first_device_ % n;
  for (std::size_t k = 0; k < n; ++k) {
    const probes::DeviceInfo& device = devices_[(first + k) % n];
    if (stop.stop_requested()) break;
    DeviceCycle dc;
    dc.device = device;
    const std::vector<probes::ProbeSpec> plan = PlanOf(config, device.index);
    if (SkipBusy(round, dc, plan)) {
      report.devices.push_back(std::move(dc));
      continue;
    }
    RunDevice(round, dc, plan);
    if (!dc.link_read && !stop.stop_requested()) ReadLink(dc);
    {
      std::lock_guard lock(mutex_);
      dc.allowance_s = allowances_[device.index].Balance();
    }
    report.devices.push_back(std::move(dc));
  }
  if (config.concurrent && !stop.stop_requested()) RunGroups(config, round.start, stop, report);
  report.wall_s = duration<double>(clock_.Now() - round.start).count();
  if (report.over_budget) {
    // Which GPUs went unmeasured, and the one the next cycle starts with.
    std::string cut;
    std::optional<std::size_t> next_first;
    for (const DeviceCycle& dc : report.devices) {
      if (dc.skipped_budget == 0) continue;
      cut +=
          fmt::format("{}gpu {}: {}", cut.empty() ? "" : ", ", dc.device.index, dc.skipped_budget);
      if (!next_first) {
        for (std::size_t i = 0; i < n; ++i) {
          if (devices_[i].index == dc.device.index) next_first = i;
        }
      }
    }
    if (next_first) first_device_ = *next_first;
    spdlog::warn(
        "cycle over its {} budget: {} probes not started ({}); the next cycle starts with "
        "gpu {}; raise probe.cycle_budget or probe fewer modes/sizes",
        FormatSeconds(duration<double>(config.cycle_budget).count()), report.skipped_budget, cut,
        devices_[first_device_ % n].index);
  }
  return report;
}

void Scheduler::RunDevice(Round& round, DeviceCycle& dc,
                          const std::vector<probes::ProbeSpec>& plan) {
  const int index = dc.device.index;
  const std::set<ProbeKey> watched = Watched(index);
  std::vector<OrderedProbe> ordered;
  {
    std::lock_guard lock(mutex_);
    core::Allowance& allowance = allowances_[index];
    allowance.Refill(round.config, clock_.Now());
    allowance.StartCycle();
    ordered = allowance.Order(plan, round.config, watched, clock_.Now());
  }
  std::set<ProbeKey> held;
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const OrderedProbe& probe = ordered[i];
    if (round.stop.stop_requested()) break;
    bool may = true;
    {
      std::lock_guard lock(mutex_);
      core::Allowance& allowance = allowances_[index];
      allowance.Refill(round.config, clock_.Now());
      may = allowance.MayRun(probe, round.config);
    }
    if (!may) {
      if (probe.cls == ProbeClass::kRotating || probe.cls == ProbeClass::kOverdue) {
        // Strict order: the stalest saves up instead of being starved by cheaper ones.
        for (std::size_t j = i; j < ordered.size(); ++j) held.insert(KeyOf(ordered[j].spec));
        break;
      }
      held.insert(KeyOf(probe.spec));  // under watch: the next one may be cheaper
      continue;
    }
    if (!RunOne(round, dc, probe.spec, probe.cls == ProbeClass::kHeadline) &&
        round.stop.stop_requested()) {
      break;
    }
  }
  dc.held_back = static_cast<int>(held.size());
  round.report.held_back += dc.held_back;
  for (const OrderedProbe& probe : ordered) {
    dc.outlook.push_back({probe.spec, probe.cls, held.contains(KeyOf(probe.spec)), std::nullopt});
  }
}

void Scheduler::Forecast(const Settings& config, SteadyTime next_cycle, CycleReport& report) {
  for (DeviceCycle& dc : report.devices) {
    if (dc.outlook.empty()) {
      // Skipped busy: the plan as it stands, nothing held back by the allowance.
      const std::set<ProbeKey> watched = Watched(dc.device.index);
      for (const probes::ProbeSpec& spec : PlanOf(config, dc.device.index)) {
        const ProbeClass cls = IsHeadline(spec, config)        ? ProbeClass::kHeadline
                               : watched.contains(KeyOf(spec)) ? ProbeClass::kWatched
                                                               : ProbeClass::kRotating;
        dc.outlook.push_back({spec, cls, false, std::nullopt});
      }
    }
    std::vector<probes::ProbeSpec> plan;
    for (const auto& o : dc.outlook) plan.push_back(o.spec);
    const std::set<ProbeKey> watched = Watched(dc.device.index);
    std::vector<std::optional<SteadyTime>> next;
    {
      std::lock_guard lock(mutex_);
      next =
          allowances_[dc.device.index].Forecast(plan, config, watched, next_cycle, kOutlookCycles);
    }
    for (std::size_t i = 0; i < dc.outlook.size(); ++i) dc.outlook[i].next_run = next[i];
  }
}

std::vector<probes::ProbeSpec> Scheduler::DueConfirmations(
    const probes::DeviceInfo& device, const std::vector<probes::ProbeSpec>& plan) {
  auto planned = [&](probes::TransferMode mode, probes::Direction direction,
                     std::uint64_t size) -> std::optional<probes::ProbeSpec> {
    for (const auto& spec : plan) {
      if (spec.mode == mode && spec.direction == direction && spec.size_bytes == size) {
        return spec;
      }
    }
    return std::nullopt;
  };
  // The series due now, still in the plan (a reload may have dropped some), and with them,
  // where one more bad reading would flip a verdict to degraded, the probes that name the
  // cause: the pinned/pageable ratio and both ways at once.
  std::vector<probes::ProbeSpec> due;
  std::lock_guard lock(mutex_);
  auto& pending = pending_[device.index];
  const SteadyTime now = clock_.Now();
  for (auto it = pending.begin(); it != pending.end();) {
    const Pending& p = it->second;
    const auto spec = planned(p.spec.mode, p.spec.direction, p.spec.size_bytes);
    if (!spec) {
      it = pending.erase(it);
      continue;
    }
    if (p.due <= now) due.push_back(*spec);
    ++it;
  }
  const auto add = [&](const std::optional<probes::ProbeSpec>& spec) {
    if (spec && std::none_of(due.begin(), due.end(), [&](const probes::ProbeSpec& d) {
          return KeyOf(d) == KeyOf(*spec);
        })) {
      due.push_back(*spec);
    }
  };
  // A round that can bring a series back to ok re-measures every degraded series of the
  // GPU too: whatever cleared the fault likely cleared it for them, and none keeps the
  // GPU DEGRADED on a reading from before (the rotation would reach them only later).
  const bool recovering = std::any_of(pending.begin(), pending.end(), [&](const auto& entry) {
    return entry.second.due <= now && !entry.second.flip.to_degraded;
  });
  if (recovering) {
    for (const auto& [key, w] : watch_[device.index]) {
      if (w.degraded) add(planned(std::get<0>(key), std::get<1>(key), std::get<2>(key)));
    }
  }
  // The probes that name a cause, for the round that can turn a GPU DEGRADED: once it is,
  // its causes are named already, and its allowance goes to re-measuring.
  const bool gpu_degraded = std::any_of(watch_[device.index].begin(), watch_[device.index].end(),
                                        [](const auto& entry) { return entry.second.degraded; });
  for (const auto& [key, p] : pending) {
    if (gpu_degraded) break;
    if (p.due > now || !p.flip.to_degraded || p.flip.readings != 1) continue;
    for (const auto& pair :
         {std::pair{probes::TransferMode::kPinned, probes::Direction::kH2D},
          std::pair{probes::TransferMode::kPageable, probes::Direction::kH2D},
          std::pair{probes::TransferMode::kPinned, probes::Direction::kBidirectional}}) {
      add(planned(pair.first, pair.second, p.spec.size_bytes));
    }
  }
  return due;
}

void Scheduler::Postpone(const Settings& config, int device, const probes::ProbeSpec& spec) {
  const SteadyTime later = ConfirmationDue(config, clock_.Now());
  std::lock_guard lock(mutex_);
  auto& pending = pending_[device];
  auto it = pending.find({spec.mode, spec.direction, spec.size_bytes});
  if (it != pending.end()) it->second.due = later;
}

CycleReport Scheduler::RunConfirmations(const Settings& config, BusyDetector* busy,
                                        std::stop_token stop) {
  CycleReport report;
  report.confirmation = true;
  report.started_at = std::chrono::system_clock::now();
  Round round{config, busy, stop, clock_.Now(), report};
  for (const auto& device : devices_) {
    if (stop.stop_requested()) break;
    const std::vector<probes::ProbeSpec> due =
        DueConfirmations(device, PlanOf(config, device.index));
    if (due.empty()) continue;
    DeviceCycle dc;
    dc.device = device;
    if (SkipBusy(round, dc, due)) {
      for (const auto& spec : due) Postpone(config, device.index, spec);
      report.devices.push_back(std::move(dc));
      continue;
    }
    for (const auto& spec : due) {
      if (stop.stop_requested()) break;
      bool fits = false;
      {
        std::lock_guard lock(mutex_);
        core::Allowance& allowance = allowances_[device.index];
        allowance.Refill(config, clock_.Now());
        fits = allowance.FitsConfirmation(spec);
      }
      if (!fits) {
        ++dc.held_back;
        ++report.held_back;
        Postpone(config, device.index, spec);
        continue;
      }
      if (!RunOne(round, dc, spec, false)) {
        Postpone(config, device.index, spec);
        if (stop.stop_requested()) break;
      }
    }
    if (!dc.link_read && !stop.stop_requested()) ReadLink(dc);
    {
      std::lock_guard lock(mutex_);
      dc.allowance_s = allowances_[device.index].Balance();
    }
    report.devices.push_back(std::move(dc));
  }
  report.wall_s = duration<double>(clock_.Now() - round.start).count();
  return report;
}

}  // namespace xferd::core
