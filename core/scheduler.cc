#include "core/scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/plan.h"
#include "platform/logging.h"

namespace xferd::core {

using platform::ScopedLogFields;

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

double AllowanceCapacity(const Settings& config) {
  return config.max_duty_cycle * duration<double>(kAllowanceWindow).count();
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
  // Full from the start: the first cycle (before READY) measures every probe.
  for (const auto& device : devices_) {
    allowances_[device.index] = {AllowanceCapacity(config_), clock_.Now(), {}};
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

void Scheduler::Run(std::stop_token stop) {
  SteadyTime next = clock_.Now();
  while (!stop.stop_requested()) {
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
  // A GPU in debt (its headline probes, or a probe dearer than estimated, overdrew the
  // allowance) waits until the refill has paid it back: that keeps the duty-cycle cap.
  double debt_s = 0;
  int debtor = -1;
  for (auto& [index, allowance] : allowances_) {
    Refill(allowance, config, now);
    if (-allowance.balance_s > debt_s) {
      debt_s = -allowance.balance_s;
      debtor = index;
    }
  }
  if (debt_s > 0 && config.max_duty_cycle > 0) {
    const auto wait = duration<double>(debt_s / config.max_duty_cycle);
    floor = std::max(floor, now + duration_cast<SteadyTime::duration>(wait));
    const DeviceAllowance& allowance = allowances_[debtor];
    const double per_interval = config.max_duty_cycle * duration<double>(config.interval).count();
    if (!overdraw_warned_ && allowance.headline_s > per_interval) {
      overdraw_warned_ = true;
      spdlog::warn(
          "gpu {}: the headline probes (pinned h2d/d2h) alone took {:.1f} ms of device "
          "time, more than max_duty_cycle {:g} allows per {:g} s interval ({:.1f} ms); "
          "cycles are spaced about {:.0f} s apart to keep the cap. Raise "
          "probe.max_duty_cycle to {:.4f} or probe smaller sizes to keep the interval "
          "(said once)",
          debtor, allowance.headline_s * 1e3, config.max_duty_cycle,
          duration<double>(config.interval).count(), per_interval * 1e3,
          allowance.headline_s / config.max_duty_cycle,
          allowance.headline_s / duration<double>(config.interval).count());
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

bool Scheduler::SkipIfBusy(const probes::DeviceInfo& device,
                           const std::vector<probes::ProbeSpec>& plan, BusyDetector& busy,
                           DeviceCycle& dc, CycleReport& report) {
  dc.busy = busy.Check(device);
  if (!dc.busy || !dc.busy->busy) return false;
  dc.skipped_busy = true;
  report.skipped_busy += static_cast<int>(plan.size());
  const std::string gpu = std::to_string(device.index);
  ScopedLogFields fields(gpu, "");
  spdlog::info("gpu {}: busy ({}); skipping its probes this cycle", gpu, dc.busy->reason);
  for (const auto& spec : plan) {
    if (callbacks_.on_skipped_busy) callbacks_.on_skipped_busy(device, spec);
  }
  return true;
}

bool Scheduler::Fits(int device, const probes::ProbeSpec& spec, const Settings& config) {
  std::lock_guard lock(mutex_);
  DeviceAllowance& allowance = allowances_[device];
  Refill(allowance, config, clock_.Now());
  auto it = allowance.probes.find({spec.mode, spec.direction, spec.size_bytes});
  // Unknown cost: run it and learn. A probe dearer than the whole allowance runs when the
  // allowance is full, or it would never run at all.
  return it == allowance.probes.end() || !it->second.last_run ||
         it->second.cost_s <= allowance.balance_s ||
         allowance.balance_s >= AllowanceCapacity(config);
}

std::optional<probes::ProbeSample> Scheduler::RunProbe(const probes::DeviceInfo& device,
                                                       const probes::ProbeSpec& spec, bool headline,
                                                       std::stop_token stop, CycleReport& report) {
  const std::string gpu = std::to_string(device.index);
  ScopedLogFields fields(gpu, std::string(probes::ToString(spec.mode)));
  const SteadyTime probe_start = clock_.Now();
  {
    std::lock_guard lock(mutex_);
    in_probe_ = true;
    probe_device_ = device.index;
    probe_spec_ = spec;
    probe_started_ = probe_start;
    ++probe_serial_;
  }
  probes::ProbeSample sample = backend_.Run(device.index, spec, stop);
  const SteadyTime probe_end = clock_.Now();
  {
    std::lock_guard lock(mutex_);
    in_probe_ = false;
  }
  if (stop.stop_requested()) return std::nullopt;  // cut short: not a result
  const double elapsed = duration<double>(probe_end - probe_start).count();
  const double deadline_s = duration<double>(spec.deadline).count();
  if (sample.status == probes::ProbeStatus::kOk && elapsed > deadline_s) {
    // A backend that overran without noticing: the result came too late to trust.
    sample.status = probes::ProbeStatus::kTimeout;
    sample.message =
        fmt::format("finished after {:.2f} s, past its {:.2f} s deadline", elapsed, deadline_s);
  }
  // Device time cannot exceed the wall time the call took (the call waits for the device);
  // a simulated device running faster than real time reports more.
  const double cost = sample.device_time_s > 0 ? std::min(sample.device_time_s, elapsed) : elapsed;
  report.device_s += cost;
  {
    std::lock_guard lock(mutex_);
    DeviceAllowance& allowance = allowances_[device.index];
    allowance.balance_s -= cost;
    allowance.probes[{spec.mode, spec.direction, spec.size_bytes}] = {probe_start, cost};
    if (headline) allowance.headline_s += cost;
  }
  switch (sample.status) {
    case probes::ProbeStatus::kOk: ++report.ok; break;
    case probes::ProbeStatus::kError: ++report.errors; break;
    case probes::ProbeStatus::kTimeout: ++report.timeouts; break;
    case probes::ProbeStatus::kUnsupported: ++report.unsupported; break;
  }
  if (sample.status == probes::ProbeStatus::kError ||
      sample.status == probes::ProbeStatus::kTimeout) {
    spdlog::warn("gpu {} {} {} {}: probe {}: {}", gpu, probes::ToString(spec.mode),
                 probes::ToString(spec.direction), probes::FormatSize(spec.size_bytes),
                 sample.status == probes::ProbeStatus::kError ? "error" : "timed out",
                 sample.message);
  }
  return sample;
}

DeviceCycle Scheduler::ProbeDevice(const probes::DeviceInfo& device,
                                   const std::vector<probes::ProbeSpec>& plan,
                                   const Settings& config, SteadyTime cycle_start,
                                   std::stop_token stop, CycleReport& report) {
  DeviceCycle dc;
  dc.device = device;
  std::vector<probes::ProbeSpec> ordered;
  {
    std::lock_guard lock(mutex_);
    DeviceAllowance& allowance = allowances_[device.index];
    Refill(allowance, config, clock_.Now());
    allowance.headline_s = 0;
    ordered = Order(plan, config, allowance);
  }
  const auto read_link = [&] {
    dc.link_path = backend_.ReadLinkPath(device.index);
    if (callbacks_.on_link_path) callbacks_.on_link_path(device, dc.link_path);
  };
  bool link_read = false;
  for (std::size_t i = 0; i < ordered.size() && !stop.stop_requested(); ++i) {
    const probes::ProbeSpec& spec = ordered[i];
    const bool headline = IsHeadline(spec, config);
    if (!headline && !Fits(device.index, spec, config)) {
      // Strict order: the stalest saves up instead of being starved by cheaper ones.
      dc.held_back = static_cast<int>(ordered.size() - i);
      report.held_back += dc.held_back;
      break;
    }
    if (clock_.Now() - cycle_start >= config.cycle_budget) {
      ++dc.skipped_budget;
      ++report.skipped_budget;
      report.over_budget = true;
      continue;
    }
    std::optional<probes::ProbeSample> sample = RunProbe(device, spec, headline, stop, report);
    if (!sample) break;
    if (callbacks_.on_probe) callbacks_.on_probe(device, *sample);
    if (!link_read && sample->status == probes::ProbeStatus::kOk) {
      read_link();  // right after traffic, before an idle link trains down to save power
      link_read = true;
    }
    dc.samples.push_back(std::move(*sample));
  }
  if (!link_read && !stop.stop_requested()) read_link();
  std::lock_guard lock(mutex_);
  dc.allowance_s = allowances_[device.index].balance_s;
  return dc;
}

CycleReport Scheduler::RunCycle(const Settings& config, BusyDetector* busy, std::stop_token stop) {
  CycleReport report;
  report.started_at = std::chrono::system_clock::now();
  const SteadyTime start = clock_.Now();
  const std::vector<probes::ProbeSpec> plan = PlanProbes(config);
  for (const auto& device : devices_) {
    if (stop.stop_requested()) break;
    DeviceCycle dc;
    dc.device = device;
    if (config.busy_detection && busy != nullptr && SkipIfBusy(device, plan, *busy, dc, report)) {
      report.devices.push_back(std::move(dc));
      continue;
    }
    report.devices.push_back(ProbeDevice(device, plan, config, start, stop, report));
  }
  if (config.concurrent && !stop.stop_requested()) RunGroups(config, start, stop, report);
  report.wall_s = duration<double>(clock_.Now() - start).count();
  if (report.over_budget) {
    spdlog::warn(
        "cycle over its {:.1f} s budget: {} probes not started; raise "
        "probe.cycle_budget or probe fewer modes/sizes",
        duration<double>(config.cycle_budget).count(), report.skipped_budget);
  }
  return report;
}

}  // namespace xferd::core
