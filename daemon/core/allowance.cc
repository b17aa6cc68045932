#include "core/allowance.h"

#include <algorithm>

#include "core/band.h"
#include "core/freshness.h"
#include "core/plan.h"

namespace xferd::core {

using std::chrono::duration;

double AllowanceCapacity(const Settings& config) {
  return config.max_duty_cycle * duration<double>(kAllowanceWindow).count() +
         config.burst_reserve_s;
}

double InitialAllowance(const Settings& config) {
  return std::min(
      AllowanceCapacity(config),
      config.burst_reserve_s + config.max_duty_cycle * duration<double>(config.interval).count());
}

Allowance::Allowance(const Settings& config, SteadyTime now)
    : balance_s_(InitialAllowance(config)), refilled_at_(now) {}

void Allowance::Refill(const Settings& config, SteadyTime now) {
  if (now > refilled_at_) {
    balance_s_ += config.max_duty_cycle * duration<double>(now - refilled_at_).count();
    refilled_at_ = now;
  }
  balance_s_ = std::min(balance_s_, AllowanceCapacity(config));
}

bool Allowance::Full(const Settings& config) const {
  // Full at this cycle's refill: only its headline spent of it since.
  return balance_s_ + headline_s_ >= AllowanceCapacity(config) - 1e-9;
}

double Allowance::Cost(const probes::ProbeSpec& spec) const {
  auto it = probes_.find(KeyOf(spec));
  if (it != probes_.end() && it->second.cost_s) return *it->second.cost_s;
  const double link = pinned_bytes_per_s_ > 0 ? pinned_bytes_per_s_ / kPinnedLinkShare
                      : link_bytes_per_s_ > 0 ? link_bytes_per_s_
                                              : kUnknownLinkBytesPerSecond;
  const double bytes = static_cast<double>(spec.size_bytes) *
                       (spec.direction == probes::Direction::kBidirectional ? 2 : 1);
  const double transfer_s = bytes / (link * ProfileOf(spec.mode, spec.direction).cost_fraction);
  // As many transfers as its device-time target (or its count) takes at that pace.
  return transfer_s * probes::ExpectedTransfers(spec, transfer_s);
}

std::string_view ToString(ProbeClass c) {
  switch (c) {
    case ProbeClass::kHeadline: return "headline";
    case ProbeClass::kOverdue: return "overdue";
    case ProbeClass::kWatched: return "watched";
    case ProbeClass::kRotating: return "rotating";
  }
  return "rotating";
}

std::vector<probes::ProbeSpec> Allowance::Order(const std::vector<probes::ProbeSpec>& plan,
                                                const Settings& config) const {
  std::vector<probes::ProbeSpec> ordered;
  for (OrderedProbe& p : Order(plan, config, {}, refilled_at_))
    ordered.push_back(std::move(p.spec));
  return ordered;
}

std::vector<OrderedProbe> Allowance::Order(const std::vector<probes::ProbeSpec>& plan,
                                           const Settings& config,
                                           const std::set<ProbeKey>& watched,
                                           SteadyTime now) const {
  const auto overdue_after = std::chrono::duration_cast<SteadyTime::duration>(
      duration<double>(FreshnessOf(config).rotating_s / 2));
  std::vector<OrderedProbe> ordered;
  std::vector<std::pair<std::optional<SteadyTime>, OrderedProbe>> overdue, watch, rotating;
  for (const auto& spec : plan) {
    if (IsHeadline(spec, config)) {
      ordered.push_back({spec, ProbeClass::kHeadline});
      continue;
    }
    auto it = probes_.find(KeyOf(spec));
    const std::optional<SteadyTime> last = it == probes_.end() ? std::nullopt : it->second.last_run;
    // Never measured is the stalest a series can be: overdue from the start, so a new GPU
    // (or a mode added on reload) has every series read within its first minutes.
    if (!last || now - *last >= overdue_after) {
      overdue.emplace_back(last, OrderedProbe{spec, ProbeClass::kOverdue});
    } else if (watched.contains(KeyOf(spec))) {
      watch.emplace_back(last, OrderedProbe{spec, ProbeClass::kWatched});
    } else {
      rotating.emplace_back(last, OrderedProbe{spec, ProbeClass::kRotating});
    }
  }
  // Stalest first; never run sorts before any time (nullopt < value); ties keep plan order.
  const auto stalest = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::stable_sort(overdue.begin(), overdue.end(), stalest);
  std::stable_sort(watch.begin(), watch.end(), stalest);
  std::stable_sort(rotating.begin(), rotating.end(), stalest);
  for (auto& [_, p] : overdue) ordered.push_back(std::move(p));
  for (auto& [_, p] : watch) ordered.push_back(std::move(p));
  for (auto& [_, p] : rotating) ordered.push_back(std::move(p));
  return ordered;
}

bool Allowance::MayRun(const OrderedProbe& probe, const Settings& config) const {
  switch (probe.cls) {
    case ProbeClass::kHeadline: return true;
    // Half the reserve: the other half stays for the confirmation rounds that flip a
    // verdict, however long a fault lasts.
    case ProbeClass::kOverdue:
    case ProbeClass::kWatched: return Cost(probe.spec) <= balance_s_ - config.burst_reserve_s / 2;
    case ProbeClass::kRotating: return FitsRotation(probe.spec, config);
  }
  return false;
}

std::vector<std::optional<SteadyTime>> Allowance::Forecast(
    const std::vector<probes::ProbeSpec>& plan, const Settings& config,
    const std::set<ProbeKey>& watched, SteadyTime next_cycle, int cycles) const {
  std::vector<std::optional<SteadyTime>> next(plan.size());
  std::map<ProbeKey, std::size_t> index;
  for (std::size_t i = 0; i < plan.size(); ++i) index.emplace(KeyOf(plan[i]), i);
  Allowance copy = *this;
  std::size_t known = 0;
  const auto interval = std::max<SteadyTime::duration>(
      std::chrono::duration_cast<SteadyTime::duration>(config.interval),
      std::chrono::milliseconds(1));
  for (int k = 0; k < cycles && known < plan.size(); ++k) {
    const SteadyTime at = next_cycle + k * interval;
    copy.Refill(config, at);
    for (const OrderedProbe& p : copy.Order(plan, config, watched, at)) {
      if (!copy.MayRun(p, config)) {
        // Strict order from the overdue on, as the scheduler.
        if (p.cls == ProbeClass::kRotating || p.cls == ProbeClass::kOverdue) break;
        continue;
      }
      const double cost = copy.Cost(p.spec);
      copy.Charge(p.spec, at, cost, p.cls == ProbeClass::kHeadline);
      auto& slot = next[index.at(KeyOf(p.spec))];
      if (!slot) {
        slot = at;
        ++known;
      }
    }
  }
  return next;
}

bool Allowance::FitsRotation(const probes::ProbeSpec& spec, const Settings& config) const {
  // Full at this cycle's refill (the headline may have spent a little since): it will
  // never hold more, so a probe dearer than what lies above the reserve runs now.
  return Cost(spec) <= balance_s_ - config.burst_reserve_s || Full(config);
}

bool Allowance::FitsConfirmation(const probes::ProbeSpec& spec) const {
  return Cost(spec) <= balance_s_;
}

bool Allowance::FitsGroup(std::optional<double> cost_s, const Settings& config) const {
  return !cost_s || *cost_s <= balance_s_ - config.burst_reserve_s || Full(config);
}

void Allowance::Charge(const probes::ProbeSpec& spec, SteadyTime started, double cost_s,
                       bool headline, ReadingFate fate) {
  balance_s_ -= cost_s;
  if (headline) headline_s_ += cost_s;
  ProbeRecord& record = probes_[KeyOf(spec)];
  record.cost_s = cost_s;
  if (fate == ReadingFate::kSetAside && record.set_aside < kSetAsideRetries) {
    ++record.set_aside;  // its place in the rotation stays: tried again next cycle
    return;
  }
  record.last_run = started;
  record.set_aside = 0;
}

}  // namespace xferd::core
