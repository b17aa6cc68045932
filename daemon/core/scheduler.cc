#include "core/scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/band.h"
#include "core/contention.h"
#include "core/plan.h"
#include "platform/logging.h"

namespace xferd::core {

using platform::ScopedLogFields;

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

double AllowanceCapacity(const Settings& config) {
  return config.max_duty_cycle * duration<double>(kAllowanceWindow).count() +
         config.burst_reserve_s;
}

double InitialAllowance(const Settings& config) {
  return std::min(
      AllowanceCapacity(config),
      config.burst_reserve_s + config.max_duty_cycle * duration<double>(config.interval).count());
}

milliseconds StallGrace(milliseconds deadline) {
  // A backend should answer kTimeout at its deadline; this much later it is not answering
  // at all. Generous, because a false stall gets the service restarted.
  return std::max(milliseconds(1000), deadline / 2);
}

Scheduler::Scheduler(probes::TransferBackend& backend, std::vector<probes::DeviceInfo> devices,
                     const Settings& config, std::unique_ptr<BusyDetector> busy, Clock& clock,
                     std::uint64_t seed, SchedulerCallbacks callbacks)
    : backend_(backend),
      devices_(std::move(devices)),
      clock_(clock),
      callbacks_(std::move(callbacks)),
      rng_(seed),
      config_(config),
      busy_(std::move(busy)) {
  // Not full: the first cycle runs the headline and what one interval's refill buys, so a
  // start never spends the whole window at once; the reserve is there from the start.
  for (const auto& device : devices_) {
    allowances_[device.index].balance_s = InitialAllowance(config_);
    allowances_[device.index].refilled_at = clock_.Now();
  }
}

std::optional<double> Scheduler::Allowance(int device) const {
  std::lock_guard lock(mutex_);
  auto it = allowances_.find(device);
  if (it == allowances_.end()) return std::nullopt;
  return it->second.balance_s;
}

void Scheduler::Refill(DeviceAllowance& allowance, const Settings& config, SteadyTime now) const {
  if (now > allowance.refilled_at) {
    allowance.balance_s +=
        config.max_duty_cycle * duration<double>(now - allowance.refilled_at).count();
    allowance.refilled_at = now;
  }
  // Also shrinks a fuller balance at once after a reload to a smaller cap.
  allowance.balance_s = std::min(allowance.balance_s, AllowanceCapacity(config));
}

double Scheduler::Cost(const DeviceAllowance& allowance, const probes::ProbeSpec& spec) const {
  auto it = allowance.probes.find({spec.mode, spec.direction, spec.size_bytes});
  if (it != allowance.probes.end() && it->second.last_run) return it->second.cost_s;
  // Never measured: its bytes at a conservative share of the link, so the balance has
  // saved enough before it first runs.
  const double link =
      allowance.link_bytes_per_s > 0 ? allowance.link_bytes_per_s : kUnknownLinkBytesPerSecond;
  const double bytes = static_cast<double>(spec.size_bytes) * (spec.warmup + spec.iterations) *
                       (spec.direction == probes::Direction::kBidirectional ? 2 : 1);
  return bytes / (link * ProfileOf(spec.mode, spec.direction).cost_fraction);
}

std::vector<probes::ProbeSpec> Scheduler::Order(const std::vector<probes::ProbeSpec>& plan,
                                                const Settings& config,
                                                const DeviceAllowance& allowance) const {
  std::vector<probes::ProbeSpec> ordered;
  std::vector<std::pair<std::optional<SteadyTime>, probes::ProbeSpec>> rotating;
  for (const auto& spec : plan) {
    if (IsHeadline(spec, config)) {
      ordered.push_back(spec);
      continue;
    }
    auto it = allowance.probes.find({spec.mode, spec.direction, spec.size_bytes});
    rotating.emplace_back(it == allowance.probes.end() ? std::nullopt : it->second.last_run, spec);
  }
  // Stalest first; never run sorts before any time (nullopt < value); ties keep plan order.
  std::stable_sort(rotating.begin(), rotating.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [_, spec] : rotating) ordered.push_back(std::move(spec));
  return ordered;
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
  std::lock_guard lock(mutex_);
  if (!in_probe_) return std::nullopt;
  const auto running = duration_cast<milliseconds>(now - probe_started_);
  if (running <= probe_spec_.deadline + StallGrace(probe_spec_.deadline)) return std::nullopt;
  Stall stall;
  stall.device = probe_device_;
  stall.spec = probe_spec_;
  stall.running_for = running;
  stall.first_report = stall_reported_serial_ != probe_serial_;
  stall_reported_serial_ = probe_serial_;
  return stall;
}

std::optional<SteadyTime> Scheduler::NextConfirmation() const {
  std::lock_guard lock(mutex_);
  std::optional<SteadyTime> due;
  for (const auto& [index, allowance] : allowances_) {
    for (const auto& [key, pending] : allowance.pending) {
      if (!due || pending.due < *due) due = pending.due;
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
    Refill(allowance, config, now);
    if (allowance.headline_s > headline_s) {
      headline_s = allowance.headline_s;
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
  const Settings& config = round.config;
  const probes::DeviceInfo& device = dc.device;
  const std::string gpu = std::to_string(device.index);
  if (round.stop.stop_requested()) return false;
  if (clock_.Now() - round.start >= config.cycle_budget) {
    ++dc.skipped_budget;
    ++round.report.skipped_budget;
    round.report.over_budget = true;
    return false;
  }
  ScopedLogFields fields(gpu, std::string(probes::ToString(spec.mode)));
  {
    std::lock_guard lock(mutex_);
    in_probe_ = true;
    probe_device_ = device.index;
    probe_spec_ = spec;
    probe_started_ = clock_.Now();
    ++probe_serial_;
  }
  if (round.busy != nullptr) round.busy->BeginProbe(device);
  const SteadyTime probe_start = clock_.Now();
  probes::ProbeSample sample = backend_.Run(device.index, spec, round.stop);
  const SteadyTime probe_end = clock_.Now();
  {
    std::lock_guard lock(mutex_);
    in_probe_ = false;
  }
  // Right after the probe: the link as the driver counted it, and right after that.
  if (round.busy != nullptr) sample.traffic = round.busy->EndProbe(device);
  if (round.stop.stop_requested()) return false;  // cut short: not a result
  const double elapsed = duration<double>(probe_end - probe_start).count();
  if (sample.status == probes::ProbeStatus::kOk &&
      elapsed > duration<double>(spec.deadline).count()) {
    // A backend that overran without noticing: the result came too late to trust.
    sample.status = probes::ProbeStatus::kTimeout;
    sample.message = fmt::format("finished after {:.2f} s, past its {:.2f} s deadline", elapsed,
                                 duration<double>(spec.deadline).count());
  }
  sample.contention = JudgeContention(sample, {config.busy_pcie_bytes_per_s});
  if (sample.status == probes::ProbeStatus::kOk && !sample.traffic && round.busy != nullptr) {
    bool& said = unreadable_said_[device.index];
    if (!said) {
      said = true;
      spdlog::info(
          "gpu {}: the link cannot be read around its probes ({}): another process's "
          "traffic cannot be told from a slow link, so readings are judged as they come "
          "(xferd_gpu_load_readable 0; said once)",
          gpu, round.busy->Describe());
    }
  }
  // Device time cannot exceed the wall time the call took (the call waits for the
  // device); a simulated device running faster than real time reports more.
  const double cost = sample.device_time_s > 0 ? std::min(sample.device_time_s, elapsed) : elapsed;
  round.report.device_s += cost;
  {
    std::lock_guard lock(mutex_);
    DeviceAllowance& allowance = allowances_[device.index];
    allowance.balance_s -= cost;
    allowance.probes[{spec.mode, spec.direction, spec.size_bytes}] = {probe_start, cost};
    if (headline) allowance.headline_s += cost;
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
  if (callbacks_.on_probe) callbacks_.on_probe(device, sample);
  if (!dc.link_read && sample.status == probes::ProbeStatus::kOk) {
    // Right after traffic, before an idle link trains down to save power.
    ReadLink(dc);
  }
  // What this reading does to its verdict: re-measure soon when it starts or continues a
  // streak. A contended reading is evidence of nothing: what was pending stays pending, to
  // be tried again after another delay.
  if (callbacks_.flip_ahead) {
    const SteadyTime due = ConfirmationDue(config, clock_.Now());
    const ProbeKey key{spec.mode, spec.direction, spec.size_bytes};
    if (sample.Contended()) {
      std::lock_guard lock(mutex_);
      auto& pending = allowances_[device.index].pending;
      if (auto it = pending.find(key); it != pending.end()) it->second.due = due;
    } else {
      const FlipAhead flip = callbacks_.flip_ahead(device, dc.link_path, sample);
      std::lock_guard lock(mutex_);
      auto& pending = allowances_[device.index].pending;
      if (flip.readings > 0) {
        pending[key] = {spec, flip, due};
      } else {
        pending.erase(key);
      }
    }
  }
  dc.samples.push_back(std::move(sample));
  return true;
}

void Scheduler::ReadLink(DeviceCycle& dc) {
  dc.link_path = backend_.ReadLinkPath(dc.device.index);
  dc.link_read = true;
  if (const probes::PcieLink* narrowest = dc.link_path.Narrowest()) {
    std::lock_guard lock(mutex_);
    allowances_[dc.device.index].link_bytes_per_s = narrowest->CurrentBytesPerSecond();
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
      DeviceAllowance& allowance = allowances_[device.index];
      Refill(allowance, config, clock_.Now());
      allowance.headline_s = 0;
      ordered = Order(plan, config, allowance);
    }
    for (std::size_t i = 0; i < ordered.size(); ++i) {
      const probes::ProbeSpec& spec = ordered[i];
      if (stop.stop_requested()) break;
      const bool headline = IsHeadline(spec, config);
      if (!headline) {
        std::lock_guard lock(mutex_);
        DeviceAllowance& allowance = allowances_[device.index];
        Refill(allowance, config, clock_.Now());
        // Only what lies above the reserve; a probe dearer than all of that runs when the
        // allowance is full, or it would never run at all.
        const double cost = Cost(allowance, spec);
        const double capacity = AllowanceCapacity(config);
        const bool fits =
            cost <= allowance.balance_s - config.burst_reserve_s ||
            (allowance.balance_s >= capacity - 1e-9 && cost > capacity - config.burst_reserve_s);
        if (!fits) {
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
      dc.allowance_s = allowances_[device.index].balance_s;
    }
    report.devices.push_back(std::move(dc));
  }
  if (config.concurrent && !stop.stop_requested()) RunGroups(config, round.start, stop, report);
  report.wall_s = duration<double>(clock_.Now() - round.start).count();
  if (report.over_budget) {
    spdlog::warn(
        "cycle over its {:.1f} s budget: {} probes not started; raise "
        "probe.cycle_budget or probe fewer modes/sizes",
        duration<double>(config.cycle_budget).count(), report.skipped_budget);
  }
  return report;
}

CycleReport Scheduler::RunConfirmations(const Settings& config, BusyDetector* busy,
                                        std::stop_token stop) {
  CycleReport report;
  report.confirmation = true;
  report.started_at = std::chrono::system_clock::now();
  Round round{config, busy, stop, clock_.Now(), report};
  const std::vector<probes::ProbeSpec> plan = PlanProbes(config);
  auto planned = [&](probes::TransferMode mode, probes::Direction direction,
                     std::uint64_t size) -> std::optional<probes::ProbeSpec> {
    for (const auto& spec : plan) {
      if (spec.mode == mode && spec.direction == direction && spec.size_bytes == size) {
        return spec;
      }
    }
    return std::nullopt;
  };

  for (const auto& device : devices_) {
    if (stop.stop_requested()) break;
    // The series due now, still in the plan (a reload may have dropped some), and with
    // them, where one more bad reading would flip a verdict to degraded, the probes that
    // name the cause: the pinned/pageable ratio and both ways at once.
    std::vector<probes::ProbeSpec> due;
    {
      std::lock_guard lock(mutex_);
      auto& pending = allowances_[device.index].pending;
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
    }
    if (due.empty()) continue;
    DeviceCycle dc;
    dc.device = device;
    auto postpone = [&](const probes::ProbeSpec& spec) {
      const SteadyTime later = ConfirmationDue(config, clock_.Now());
      std::lock_guard lock(mutex_);
      auto& pending = allowances_[device.index].pending;
      auto it = pending.find({spec.mode, spec.direction, spec.size_bytes});
      if (it != pending.end()) it->second.due = later;
    };
    if (SkipBusy(round, dc, due)) {
      for (const auto& spec : due) postpone(spec);
      report.devices.push_back(std::move(dc));
      continue;
    }
    for (const auto& spec : due) {
      if (stop.stop_requested()) break;
      bool fits = false;
      {
        // The whole balance, reserve included: this is what the reserve is for.
        std::lock_guard lock(mutex_);
        DeviceAllowance& allowance = allowances_[device.index];
        Refill(allowance, config, clock_.Now());
        fits = Cost(allowance, spec) <= allowance.balance_s;
      }
      if (!fits) {
        ++dc.held_back;
        ++report.held_back;
        postpone(spec);
        continue;
      }
      if (!RunOne(round, dc, spec, false)) {
        postpone(spec);
        if (stop.stop_requested()) break;
      }
    }
    if (!dc.link_read && !stop.stop_requested()) ReadLink(dc);
    {
      std::lock_guard lock(mutex_);
      dc.allowance_s = allowances_[device.index].balance_s;
    }
    report.devices.push_back(std::move(dc));
  }
  report.wall_s = duration<double>(clock_.Now() - round.start).count();
  return report;
}

}  // namespace xferd::core
