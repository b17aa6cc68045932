#include "core/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

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
  }
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
          "(no xferd_foreign_traffic_bytes_per_second series; said once)",
          gpu, round.busy->Describe());
    }
  }
  round.report.device_s += measured.cost_s;
  {
    std::lock_guard lock(mutex_);
    allowances_[gpu].Charge(spec, measured.started, measured.cost_s, headline);
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
  const ProbeKey key{sample.spec.mode, sample.spec.direction, sample.spec.size_bytes};
  if (sample.Contended()) {
    std::lock_guard lock(mutex_);
    auto& pending = pending_[device.index];
    if (auto it = pending.find(key); it != pending.end()) it->second.due = due;
    return;
  }
  const FlipAhead flip = callbacks_.flip_ahead(device, path, sample);
  std::lock_guard lock(mutex_);
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
  if (const probes::PcieLink* narrowest = dc.link_path.Narrowest()) {
    std::lock_guard lock(mutex_);
    allowances_[dc.device.index].SetLinkRate(narrowest->CurrentBytesPerSecond());
  }
  if (callbacks_.on_link_path) callbacks_.on_link_path(dc.device, dc.link_path);
}

CycleReport Scheduler::RunCycle(const Settings& config, BusyDetector* busy, std::stop_token stop) {
  CycleReport report;
  report.started_at = std::chrono::system_clock::now();
  Round round{config, busy, stop, clock_.Now(), report};
  const std::vector<probes::ProbeSpec> plan = PlanProbes(config);

  for (const auto& device : devices_) {
    if (stop.stop_requested()) break;
    DeviceCycle dc;
    dc.device = device;
    if (SkipBusy(round, dc, plan)) {
      report.devices.push_back(std::move(dc));
      continue;
    }
    std::vector<probes::ProbeSpec> ordered;
    {
      std::lock_guard lock(mutex_);
      core::Allowance& allowance = allowances_[device.index];
      allowance.Refill(config, clock_.Now());
      allowance.StartCycle();
      ordered = allowance.Order(plan, config);
    }
    for (std::size_t i = 0; i < ordered.size(); ++i) {
      const probes::ProbeSpec& spec = ordered[i];
      if (stop.stop_requested()) break;
      const bool headline = IsHeadline(spec, config);
      if (!headline) {
        std::lock_guard lock(mutex_);
        core::Allowance& allowance = allowances_[device.index];
        allowance.Refill(config, clock_.Now());
        if (!allowance.FitsRotation(spec, config)) {
          // Strict order: the stalest saves up instead of being starved by cheaper ones.
          dc.held_back = static_cast<int>(ordered.size() - i);
          report.held_back += dc.held_back;
          break;
        }
      }
      if (!RunOne(round, dc, spec, headline) && stop.stop_requested()) break;
    }
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
    spdlog::warn(
        "cycle over its {} budget: {} probes not started; raise "
        "probe.cycle_budget or probe fewer modes/sizes",
        FormatSeconds(duration<double>(config.cycle_budget).count()), report.skipped_budget);
  }
  return report;
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
  for (const auto& [key, p] : pending) {
    if (p.due > now || !p.flip.to_degraded || p.flip.readings != 1) continue;
    for (const auto& pair :
         {std::pair{probes::TransferMode::kPinned, probes::Direction::kH2D},
          std::pair{probes::TransferMode::kPageable, probes::Direction::kH2D},
          std::pair{probes::TransferMode::kPinned, probes::Direction::kBidirectional}}) {
      const auto cause = planned(pair.first, pair.second, p.spec.size_bytes);
      if (cause && std::none_of(due.begin(), due.end(), [&](const probes::ProbeSpec& d) {
            return d.mode == cause->mode && d.direction == cause->direction &&
                   d.size_bytes == cause->size_bytes;
          })) {
        due.push_back(*cause);
      }
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
  const std::vector<probes::ProbeSpec> plan = PlanProbes(config);

  for (const auto& device : devices_) {
    if (stop.stop_requested()) break;
    const std::vector<probes::ProbeSpec> due = DueConfirmations(device, plan);
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
