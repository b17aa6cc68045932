#include "core/allowance.h"

#include <algorithm>

#include "core/band.h"
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

double Allowance::Cost(const probes::ProbeSpec& spec) const {
  auto it = probes_.find({spec.mode, spec.direction, spec.size_bytes});
  if (it != probes_.end() && it->second.last_run) return it->second.cost_s;
  const double link = link_bytes_per_s_ > 0 ? link_bytes_per_s_ : kUnknownLinkBytesPerSecond;
  const double bytes = static_cast<double>(spec.size_bytes) * (spec.warmup + spec.iterations) *
                       (spec.direction == probes::Direction::kBidirectional ? 2 : 1);
  return bytes / (link * ProfileOf(spec.mode, spec.direction).cost_fraction);
}

std::vector<probes::ProbeSpec> Allowance::Order(const std::vector<probes::ProbeSpec>& plan,
                                                const Settings& config) const {
  std::vector<probes::ProbeSpec> ordered;
  std::vector<std::pair<std::optional<SteadyTime>, probes::ProbeSpec>> rotating;
  for (const auto& spec : plan) {
    if (IsHeadline(spec, config)) {
      ordered.push_back(spec);
      continue;
    }
    auto it = probes_.find({spec.mode, spec.direction, spec.size_bytes});
    rotating.emplace_back(it == probes_.end() ? std::nullopt : it->second.last_run, spec);
  }
  // Stalest first; never run sorts before any time (nullopt < value); ties keep plan order.
  std::stable_sort(rotating.begin(), rotating.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [_, spec] : rotating) ordered.push_back(std::move(spec));
  return ordered;
}

bool Allowance::FitsRotation(const probes::ProbeSpec& spec, const Settings& config) const {
  const double cost = Cost(spec);
  const double capacity = AllowanceCapacity(config);
  return cost <= balance_s_ - config.burst_reserve_s ||
         (balance_s_ >= capacity - 1e-9 && cost > capacity - config.burst_reserve_s);
}

bool Allowance::FitsConfirmation(const probes::ProbeSpec& spec) const {
  return Cost(spec) <= balance_s_;
}

bool Allowance::FitsGroup(std::optional<double> cost_s, const Settings& config) const {
  return !cost_s || *cost_s <= balance_s_ - config.burst_reserve_s ||
         balance_s_ >= AllowanceCapacity(config);
}

void Allowance::Charge(const probes::ProbeSpec& spec, SteadyTime started, double cost_s,
                       bool headline) {
  balance_s_ -= cost_s;
  probes_[{spec.mode, spec.direction, spec.size_bytes}] = {started, cost_s};
  if (headline) headline_s_ += cost_s;
}

}  // namespace xferd::core
