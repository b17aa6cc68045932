// One GPU's device-time allowance on its own: refill, the cost of a probe (measured or
// estimated), the rotation's order, and who may spend what (the rotation and groups above
// the reserve, confirmations the whole balance).
#include "core/allowance.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "core/band.h"
#include "core/plan.h"

namespace xferd::core {
namespace {

using namespace std::chrono_literals;
using probes::Direction;
using probes::ProbeSpec;
using probes::TransferMode;

const SteadyTime kStart = SteadyTime{} + 1000s;

Settings Config() {
  Settings c;
  c.interval = 60s;
  c.max_duty_cycle = 0.01;  // 0.6 s a minute; capacity 0.01 x 600 s + 1 s reserve = 7 s
  c.burst_reserve_s = 1.0;
  c.modes = {TransferMode::kPinned, TransferMode::kPageable, TransferMode::kManaged};
  c.sizes = {64ull << 20};
  return c;
}

ProbeSpec Spec(TransferMode mode, Direction direction) {
  ProbeSpec s;
  s.mode = mode;
  s.direction = direction;
  s.size_bytes = 64ull << 20;
  s.iterations = 20;
  s.warmup = 2;
  return s;
}

// Refills `a` to its capacity (a day after the start), then spends it down to `balance_s`.
void SetBalance(Allowance& a, const Settings& c, double balance_s) {
  a.Refill(c, kStart + 24h);
  a.Charge(a.Balance() - balance_s);
}

TEST(Allowance, StartsWithOneIntervalAboveTheReserveAndHoldsAtMostTheWindow) {
  const Settings c = Config();
  EXPECT_DOUBLE_EQ(AllowanceCapacity(c), 0.01 * 600 + 1.0);
  EXPECT_DOUBLE_EQ(InitialAllowance(c), 1.0 + 0.01 * 60);
  EXPECT_DOUBLE_EQ(Allowance(c, kStart).Balance(), InitialAllowance(c));

  // A long interval: the start never exceeds the capacity.
  Settings slow = c;
  slow.interval = 3600s;
  EXPECT_DOUBLE_EQ(InitialAllowance(slow), AllowanceCapacity(slow));
}

TEST(Allowance, RefillsAtTheDutyCycleUpToTheCapacity) {
  const Settings c = Config();
  Allowance a(c, kStart);
  a.Refill(c, kStart + 100s);
  EXPECT_NEAR(a.Balance(), InitialAllowance(c) + 0.01 * 100, 1e-9);
  a.Refill(c, kStart + 100s);  // no time passed: nothing added
  EXPECT_NEAR(a.Balance(), InitialAllowance(c) + 1.0, 1e-9);
  a.Refill(c, kStart + 10h);
  EXPECT_DOUBLE_EQ(a.Balance(), AllowanceCapacity(c));
  // A clock that reads earlier adds nothing (never a negative refill).
  a.Charge(3.0);
  a.Refill(c, kStart);
  EXPECT_DOUBLE_EQ(a.Balance(), AllowanceCapacity(c) - 3.0);
}

TEST(Allowance, AReloadToASmallerCapShrinksAFullerBalanceAtOnce) {
  const Settings c = Config();
  Allowance a(c, kStart);
  a.Refill(c, kStart + 10h);
  Settings tight = c;
  tight.max_duty_cycle = 0.001;
  a.Refill(tight, kStart + 10h);
  EXPECT_DOUBLE_EQ(a.Balance(), AllowanceCapacity(tight));
}

TEST(Allowance, AnUnmeasuredProbeCostsItsBytesAtItsShareOfTheLink) {
  Allowance a(Config(), kStart);
  const ProbeSpec pinned = Spec(TransferMode::kPinned, Direction::kH2D);
  const double bytes = 22.0 * (64 << 20);
  const double pinned_share = ProfileOf(TransferMode::kPinned, Direction::kH2D).cost_fraction;
  // Before the link is read: the conservative Gen3 x8 rate.
  EXPECT_NEAR(a.Cost(pinned), bytes / (kUnknownLinkBytesPerSecond * pinned_share), 1e-9);
  a.SetLinkRate(63e9);
  EXPECT_NEAR(a.Cost(pinned), bytes / (63e9 * pinned_share), 1e-9);
  // Both ways at once move the bytes twice.
  const ProbeSpec both = Spec(TransferMode::kPinned, Direction::kBidirectional);
  EXPECT_NEAR(a.Cost(both),
              2 * bytes / (63e9 * ProfileOf(TransferMode::kPinned, both.direction).cost_fraction),
              1e-9);
  // A slower mode is estimated dearer.
  EXPECT_GT(a.Cost(Spec(TransferMode::kManaged, Direction::kH2D)), 10 * a.Cost(pinned));
}

TEST(Allowance, AMeasuredProbeCostsWhatItTookLastTime) {
  const Settings c = Config();
  Allowance a(c, kStart);
  const ProbeSpec managed = Spec(TransferMode::kManaged, Direction::kH2D);
  a.Charge(managed, kStart, 0.25, false);
  EXPECT_DOUBLE_EQ(a.Cost(managed), 0.25);
  a.Charge(managed, kStart + 60s, 0.5, false);
  EXPECT_DOUBLE_EQ(a.Cost(managed), 0.5);
  EXPECT_NEAR(a.Balance(), InitialAllowance(c) - 0.75, 1e-9);
}

TEST(Allowance, TheHeadlineFirstThenTheStalestWithNeverRunFirst) {
  const Settings c = Config();
  Allowance a(c, kStart);
  const std::vector<ProbeSpec> plan = PlanProbes(c);
  // pageable h2d ran long ago, managed d2h recently; the rest never ran.
  a.Charge(Spec(TransferMode::kPageable, Direction::kH2D), kStart + 1s, 0.1, false);
  a.Charge(Spec(TransferMode::kManaged, Direction::kD2H), kStart + 50s, 0.1, false);
  const std::vector<ProbeSpec> order = a.Order(plan, c);
  ASSERT_EQ(order.size(), plan.size());
  std::vector<std::pair<TransferMode, Direction>> got;
  for (const ProbeSpec& s : order) got.emplace_back(s.mode, s.direction);
  const std::vector<std::pair<TransferMode, Direction>> want = {
      {TransferMode::kPinned, Direction::kH2D},  // the headline, in plan order
      {TransferMode::kPinned, Direction::kD2H},
      // never run, in plan order
      {TransferMode::kPageable, Direction::kD2H},
      {TransferMode::kManaged, Direction::kH2D},
      {TransferMode::kPinned, Direction::kBidirectional},
      {TransferMode::kPageable, Direction::kH2D},  // then the stalest
      {TransferMode::kManaged, Direction::kD2H},
  };
  EXPECT_EQ(got, want);
}

TEST(Allowance, TheRotationSpendsOnlyWhatLiesAboveTheReserve) {
  const Settings c = Config();
  const ProbeSpec pageable = Spec(TransferMode::kPageable, Direction::kH2D);
  Allowance a(c, kStart);
  a.Charge(pageable, kStart, 0.4, false);  // it cost 0.4 s
  SetBalance(a, c, 1.5);                   // 0.5 s above the 1 s reserve
  EXPECT_TRUE(a.FitsRotation(pageable, c));
  a.Charge(0.2);  // 0.3 above the reserve: 0.4 no longer fits
  EXPECT_FALSE(a.FitsRotation(pageable, c));
  // A confirmation may spend the reserve too.
  EXPECT_TRUE(a.FitsConfirmation(pageable));
  a.Charge(1.0);  // 0.3 s left in all
  EXPECT_FALSE(a.FitsConfirmation(pageable));
}

TEST(Allowance, AProbeDearerThanEverythingAboveTheReserveRunsWhenTheAllowanceIsFull) {
  const Settings c = Config();
  const ProbeSpec dear = Spec(TransferMode::kManaged, Direction::kH2D);
  Allowance a(c, kStart);
  a.Charge(dear, kStart, AllowanceCapacity(c), false);  // costs more than the whole capacity
  SetBalance(a, c, AllowanceCapacity(c));               // full again
  EXPECT_TRUE(a.FitsRotation(dear, c)) << "it would never run otherwise";
  a.Charge(0.01);  // not quite full: it waits
  EXPECT_FALSE(a.FitsRotation(dear, c));
}

TEST(Allowance, AGroupRunFitsAboveTheReserveOrWhenUnmeasuredOrFull) {
  const Settings c = Config();
  Allowance a(c, kStart);
  SetBalance(a, c, 1.2);
  EXPECT_TRUE(a.FitsGroup(std::nullopt, c)) << "never measured: run and learn";
  EXPECT_TRUE(a.FitsGroup(0.2, c));
  EXPECT_FALSE(a.FitsGroup(0.3, c));
  SetBalance(a, c, AllowanceCapacity(c));
  EXPECT_TRUE(a.FitsGroup(100.0, c));
}

TEST(Allowance, TheHeadlineTimeIsCountedPerCycle) {
  const Settings c = Config();
  Allowance a(c, kStart);
  a.Charge(Spec(TransferMode::kPinned, Direction::kH2D), kStart, 0.03, true);
  a.Charge(Spec(TransferMode::kPinned, Direction::kD2H), kStart, 0.02, true);
  a.Charge(Spec(TransferMode::kPageable, Direction::kH2D), kStart, 0.2, false);
  EXPECT_NEAR(a.HeadlineSeconds(), 0.05, 1e-12);
  a.StartCycle();
  EXPECT_EQ(a.HeadlineSeconds(), 0.0);
}

// A contended reading is paid for but is no turn: the series stays at the front of the
// rotation for kSetAsideRetries more tries, then waits its turn (a link shared for good
// must not starve the rest of the plan).
TEST(Allowance, AContendedReadingKeepsItsPlaceForABoundedRetry) {
  const Settings c = Config();
  Allowance a(c, kStart);
  const std::vector<ProbeSpec> plan = PlanProbes(c);
  // Everything but the headline ran at the start, pageable h2d first (so it is stalest).
  const ProbeSpec pageable = Spec(TransferMode::kPageable, Direction::kH2D);
  SteadyTime t = kStart;
  for (const ProbeSpec& spec : plan) {
    if (!IsHeadline(spec, c)) a.Charge(spec, t += 1s, 0.1, false);
  }
  const auto first_rotating = [&](SteadyTime now) {
    for (const OrderedProbe& p : a.Order(plan, c, {}, now)) {
      if (p.cls != ProbeClass::kHeadline) return KeyOf(p.spec);
    }
    return ProbeKey{};
  };
  ASSERT_EQ(first_rotating(kStart + 60s), KeyOf(pageable));
  const double before = a.Balance();
  // Its next run is contended: it paid, and it is still the first of the rotation.
  a.Charge(pageable, kStart + 60s, 0.1, false, ReadingFate::kSetAside);
  EXPECT_NEAR(a.Balance(), before - 0.1, 1e-9);
  EXPECT_DOUBLE_EQ(a.Cost(pageable), 0.1);
  EXPECT_EQ(first_rotating(kStart + 120s), KeyOf(pageable)) << "tried again next cycle";
  // Contended again, past the retries: now it waits its turn behind the rest.
  a.Charge(pageable, kStart + 120s, 0.1, false, ReadingFate::kSetAside);
  EXPECT_NE(first_rotating(kStart + 180s), KeyOf(pageable));
  const auto order = a.Order(plan, c, {}, kStart + 180s);
  EXPECT_EQ(KeyOf(order.back().spec), KeyOf(pageable)) << "last of the rotation";
  // A counted reading ends the retries: the next contended one is tried again.
  a.Charge(pageable, kStart + 240s, 0.1, false, ReadingFate::kCounted);
  const auto position = [&](const ProbeSpec& spec, SteadyTime now) {
    const auto order = a.Order(plan, c, {}, now);
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (KeyOf(order[i].spec) == KeyOf(spec)) return i;
    }
    return order.size();
  };
  const ProbeSpec managed = Spec(TransferMode::kManaged, Direction::kH2D);
  const std::size_t managed_at = position(managed, kStart + 300s);
  a.Charge(managed, kStart + 300s, 0.1, false, ReadingFate::kSetAside);
  EXPECT_EQ(position(managed, kStart + 360s), managed_at) << "its place kept, not lost";
  // Pageable h2d had a counted turn at 240 s; managed d2h at 270 s. A contended run of
  // pageable at 300 s keeps its 240 s place, ahead of managed d2h.
  const ProbeSpec managed_d2h = Spec(TransferMode::kManaged, Direction::kD2H);
  a.Charge(managed_d2h, kStart + 270s, 0.1, false, ReadingFate::kCounted);
  a.Charge(pageable, kStart + 300s, 0.1, false, ReadingFate::kSetAside);
  EXPECT_LT(position(pageable, kStart + 360s), position(managed_d2h, kStart + 360s))
      << "a retry again after a counted reading";
}

// Series under watch come after the headline and before the rotation; a series that waited
// half its bound is overdue and comes before them; both may spend half the reserve.
TEST(Allowance, OverdueThenWatchedThenTheRotation) {
  const Settings c = Config();
  Allowance a(c, kStart);
  const std::vector<ProbeSpec> plan = PlanProbes(c);
  const ProbeSpec managed = Spec(TransferMode::kManaged, Direction::kH2D);
  const ProbeSpec pageable = Spec(TransferMode::kPageable, Direction::kD2H);
  a.Charge(managed, kStart, 0.1, false);
  a.Charge(pageable, kStart + 20min, 0.1, false);
  const std::set<ProbeKey> watched = {KeyOf(pageable)};
  const auto order = a.Order(plan, c, watched, kStart + 16min);
  ASSERT_GE(order.size(), 5u);
  EXPECT_EQ(order[0].cls, ProbeClass::kHeadline);
  EXPECT_EQ(order[1].cls, ProbeClass::kHeadline);
  // Never run since the start 16 minutes ago, or run then: overdue (bound 30 min).
  EXPECT_EQ(order[2].cls, ProbeClass::kOverdue);
  std::size_t watched_at = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i].cls == ProbeClass::kWatched) watched_at = i;
  }
  EXPECT_EQ(order[watched_at].spec.direction, Direction::kD2H);
  for (std::size_t i = watched_at + 1; i < order.size(); ++i) {
    EXPECT_EQ(order[i].cls, ProbeClass::kRotating);
  }
  SetBalance(a, c, c.burst_reserve_s * 0.6 + a.Cost(pageable));
  EXPECT_TRUE(a.MayRun({pageable, ProbeClass::kWatched}, c)) << "above half the reserve";
  EXPECT_FALSE(a.MayRun({pageable, ProbeClass::kRotating}, c)) << "not above the reserve";
}

// When each series is expected to run next: the headline at the next cycle, the rest as
// the refill pays for them in the rotation's order.
TEST(Allowance, TheForecastFollowsTheRulesOfACycle) {
  Settings c = Config();
  c.max_duty_cycle = 0.001;  // 60 ms a minute; capacity 1.6 s with the 1 s reserve
  Allowance a(c, kStart);
  const std::vector<ProbeSpec> plan = PlanProbes(c);
  for (const ProbeSpec& spec : plan)
    a.Charge(spec, kStart, IsHeadline(spec, c) ? 0.01 : 0.2, IsHeadline(spec, c));
  SetBalance(a, c, c.burst_reserve_s);
  const SteadyTime next = kStart + 24h + 1ms;  // right after SetBalance's refill
  const auto when = a.Forecast(plan, c, {}, next, 120);
  ASSERT_EQ(when.size(), plan.size());
  std::vector<SteadyTime> rotating;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    ASSERT_TRUE(when[i].has_value()) << i;
    if (IsHeadline(plan[i], c)) {
      EXPECT_EQ(*when[i], next);
    } else {
      rotating.push_back(*when[i]);
    }
  }
  // All overdue (they ran a day ago): half the reserve pays for two of them at once, then
  // 40 ms a cycle above the headline, one 0.2 s probe every five cycles.
  std::sort(rotating.begin(), rotating.end());
  ASSERT_EQ(rotating.size(), 5u);
  EXPECT_EQ(rotating[1], next);
  EXPECT_EQ(rotating[2], next + 3 * c.interval);  // from 0.58 s to 0.7 at 40 ms a cycle
  EXPECT_EQ(rotating[3], next + 8 * c.interval);  // then 0.2 s per five cycles
  EXPECT_EQ(rotating[4], next + 13 * c.interval);
}

}  // namespace
}  // namespace xferd::core
