// The scheduler's concurrent groups: after a cycle's own probes, every group that is due
// runs pinned h2d, d2h (and both ways) on all its members at once. Never beside another
// probe (one probe thread runs both), at most once per concurrent_interval, and only while
// every member's allowance has room: each member pays its own device time.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/scheduler.h"

namespace xferd::core {
namespace {

// A group held back by the cycle budget this many due cycles in a row is not a busy
// moment but a plan that leaves it no time: the log says so, once.
constexpr int kBudgetMissesToSay = 3;

}  // namespace

bool Scheduler::GroupFits(const HostGroup& group, const probes::ProbeSpec& spec,
                          const GroupRecord& record, const Settings& config) {
  std::lock_guard lock(mutex_);
  for (int gpu : group.gpus) {
    core::Allowance& allowance = allowances_[gpu];
    allowance.Refill(config, clock_.Now());
    auto it = record.cost_s.find({gpu, spec.direction});
    if (!allowance.FitsGroup(
            it != record.cost_s.end() ? std::optional<double>(it->second) : std::nullopt, config)) {
      return false;
    }
  }
  return true;
}

void Scheduler::NoteBudgetMiss(const HostGroup& group, GroupRecord& record, const Settings& config,
                               SteadyTime::duration used) {
  if (++record.budget_misses < kBudgetMissesToSay || record.budget_said) return;
  record.budget_said = true;
  const double used_s = std::chrono::duration<double>(used).count();
  spdlog::warn(
      "concurrent group {} ({} GPUs) has not run in {} cycles: each time the cycle's own probes "
      "took {} of its {} probe.cycle_budget, and a group starts only while the budget has time "
      "left; raise probe.cycle_budget above {} plus the group's run, probe fewer modes or "
      "sizes, or set probe.concurrent = false (said once until it runs)",
      group.name, group.gpus.size(), record.budget_misses, FormatSeconds(used_s),
      FormatSeconds(std::chrono::duration<double>(config.cycle_budget).count()),
      FormatSeconds(used_s));
}

std::optional<GroupRun> Scheduler::RunGroup(const HostGroup& group, const probes::ProbeSpec& spec,
                                            GroupRecord& record, std::stop_token stop,
                                            CycleReport& report) {
  std::vector<double> solo;
  for (int gpu : group.gpus) {
    auto it = solo_.find({gpu, spec.direction, spec.size_bytes});
    solo.push_back(it != solo_.end() ? it->second : 0.0);
  }
  std::optional<MeasuredGroup> measured = runner_.RunGroup(group, devices_, solo, spec, stop);
  if (!measured) return std::nullopt;
  for (std::size_t i = 0; i < group.gpus.size(); ++i) {
    const int gpu = group.gpus[i];
    const probes::ProbeSample& sample = measured->run.samples[i];
    const double cost = measured->cost_s[i];
    report.device_s += cost;
    record.cost_s[{gpu, spec.direction}] = cost;
    {
      std::lock_guard lock(mutex_);
      allowances_[gpu].Charge(cost);
    }
    if (sample.status != probes::ProbeStatus::kOk) {
      spdlog::warn("concurrent {} gpu {} pinned {}: {}: {}", group.name, gpu,
                   probes::ToString(spec.direction), probes::ToString(sample.status),
                   sample.message);
    }
  }
  return std::move(measured->run);
}

void Scheduler::RunGroups(const Settings& config, SteadyTime cycle_start, std::stop_token stop,
                          CycleReport& report) {
  std::vector<probes::LinkPath> paths;
  std::vector<int> busy;
  for (const DeviceCycle& dc : report.devices) {
    if (dc.skipped_busy) busy.push_back(dc.device.index);
    if (!dc.skipped_busy) paths_[dc.device.index] = dc.link_path;
    for (const probes::ProbeSample& s : dc.samples) {
      // A contended reading is the neighbour's figure, not the GPU's solo one.
      if (s.spec.mode == probes::TransferMode::kPinned && s.status == probes::ProbeStatus::kOk &&
          !s.Contended()) {
        solo_[{dc.device.index, s.spec.direction, s.spec.size_bytes}] = s.MedianBandwidth();
      }
    }
  }
  for (const probes::DeviceInfo& d : devices_) paths.push_back(paths_[d.index]);
  for (const HostGroup& group : FindGroups(devices_, paths)) {
    if (stop.stop_requested()) return;
    // At the size the members' own plans give them (the slowest member's link), so each
    // one's concurrent figure compares with its solo one.
    double rate = 0;
    {
      std::lock_guard lock(mutex_);
      for (int gpu : group.gpus) {
        const double r = plan_rate_[gpu];
        if (r > 0 && (rate == 0 || r < rate)) rate = r;
      }
    }
    const std::vector<probes::ProbeSpec> plan =
        PlanConcurrent(config, Deadlines::kAsConfigured, rate);
    GroupRecord& record = groups_[group.name];
    const SteadyTime now = clock_.Now();
    if (record.last_run && now - *record.last_run < config.concurrent_interval) continue;
    const bool member_busy = std::any_of(group.gpus.begin(), group.gpus.end(), [&](int gpu) {
      return std::find(busy.begin(), busy.end(), gpu) != busy.end();
    });
    if (member_busy || now - cycle_start >= config.cycle_budget) {
      report.concurrent_held_back += static_cast<int>(plan.size());
      if (!member_busy) NoteBudgetMiss(group, record, config, now - cycle_start);
      continue;  // stays due
    }
    bool all_ran = true;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      if (!GroupFits(group, plan[i], record, config)) {
        report.concurrent_held_back += static_cast<int>(plan.size() - i);
        all_ran = false;
        break;
      }
      std::optional<GroupRun> run = RunGroup(group, plan[i], record, stop, report);
      if (!run) return;  // stopped
      report.concurrent.push_back(std::move(*run));
    }
    if (all_ran) {
      record.last_run = now;
      if (record.budget_said) {
        spdlog::info("concurrent group {} ran again within the cycle budget", group.name);
      }
      record.budget_misses = 0;
      record.budget_said = false;
    }
  }
}

}  // namespace xferd::core
