// The probe loop with a fake clock and a fake backend: spacing, jitter, the device-time
// allowance and its rotation, budget, busy skips, deadlines and stalls, all without sleeping.
#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <set>
#include <thread>

#include "core/busy_detector.h"
#include "core/health_tracker.h"
#include "testing/fakes.h"

namespace xferd::core {

namespace {

using namespace std::chrono_literals;

using fakes::FakeBackend;
using fakes::FakeClock;

Settings SmallConfig() {
  Settings c;
  c.interval = 10s;
  c.jitter = 0;
  c.modes = {probes::TransferMode::kPinned, probes::TransferMode::kPageable};
  c.bidirectional = true;
  c.sizes = {1 << 20};
  c.max_duty_cycle = 1.0;
  c.cycle_budget = 30s;
  c.probe_deadline = 5s;
  c.concurrent = false;  // the concurrent groups have their own tests (Concurrent*)
  return c;
}

struct Harness {
  FakeClock clock;
  FakeBackend backend{&clock};
  std::vector<CycleReport> reports;
  std::vector<SteadyTime> starts;
  std::stop_source stop;
  int stop_after = 5;
  int skipped_busy_calls = 0;
  std::function<void(Scheduler&, const CycleReport&)> after_cycle;
  std::vector<std::size_t> ran_before_cycle;  // backend.Ran().size() at each cycle's end

  void Run(const Settings& config, std::unique_ptr<BusyDetector> busy = nullptr,
           std::uint64_t seed = 1) {
    SchedulerCallbacks cb;
    cb.on_skipped_busy = [&](const auto&, const auto&) { ++skipped_busy_calls; };
    Scheduler* self = nullptr;
    cb.on_cycle = [&](const CycleReport& r) {
      reports.push_back(r);
      ran_before_cycle.push_back(backend.Ran().size());
      if (after_cycle) after_cycle(*self, r);
      if (static_cast<int>(reports.size()) >= stop_after) stop.request_stop();
    };
    cb.on_probe = [&](const auto&, const auto&) {
      if (starts.size() < reports.size() + 1) starts.push_back(clock.Now());
    };
    Scheduler s(backend, backend.Devices(), config, std::move(busy), clock, seed, cb);
    self = &s;
    s.Run(stop.get_token());
  }
};

TEST(Scheduler, CyclesStartAtTheIntervalWithoutOverlap) {
  Harness h;
  h.Run(SmallConfig());
  ASSERT_EQ(h.reports.size(), 5u);
  for (size_t i = 1; i < h.starts.size(); ++i) {
    EXPECT_EQ(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(10s));
  }
  // 2 GPUs x 5 probes per cycle.
  EXPECT_EQ(h.reports[0].ok, 10);
  EXPECT_EQ(h.backend.runs, 50);
  EXPECT_EQ(h.reports[0].number, 1u);
  EXPECT_EQ(h.reports[4].number, 5u);
}

TEST(Scheduler, JitterDelaysStartsWithinItsFractionAndDiffersBySeed) {
  auto starts_for = [](std::uint64_t seed) {
    Harness h;
    Settings c = SmallConfig();
    c.jitter = 0.2;
    h.stop_after = 20;
    h.Run(c, nullptr, seed);
    std::vector<double> offsets;  // seconds late against the 10 s grid
    for (size_t i = 1; i < h.starts.size(); ++i) {
      const double t = std::chrono::duration<double>(h.starts[i] - h.starts[0]).count();
      offsets.push_back(t - 10.0 * static_cast<double>(i));
    }
    return offsets;
  };
  auto a = starts_for(1), b = starts_for(2);
  ASSERT_EQ(a.size(), 19u);
  for (double o : a) {
    EXPECT_GE(o, 0.0);
    EXPECT_LE(o, 2.0 + 1e-9);
  }
  EXPECT_NE(a, b);
  // Not all the same: it is jitter, not a fixed delay.
  EXPECT_GT(*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end()), 0.1);
}

// The default probe set with the per-probe device times measured on an H200 at 64 MiB
// (docs/gpu-results.md), at the default 0.25 % duty cycle and a 60 s interval: 22
// transfers each, as measured (no device-time target; the coverage tests below have one).
Settings H200Config() {
  Settings c;
  c.probe_time = 0ms;
  c.interval = 60s;
  c.jitter = 0;
  c.max_duty_cycle = 0.0025;
  c.cycle_budget = 30s;
  c.probe_deadline = 5s;
  c.concurrent = false;  // as on the one-GPU H200 host (the fake has two GPUs)
  return c;
}

void SetH200Costs(FakeBackend& b) {
  using M = probes::TransferMode;
  using D = probes::Direction;
  b.cost = {{{M::kPinned, D::kH2D}, 0.028},           {{M::kPinned, D::kD2H}, 0.027},
            {{M::kPinned, D::kBidirectional}, 0.032}, {{M::kPinnedAsync, D::kH2D}, 0.043},
            {{M::kPinnedAsync, D::kD2H}, 0.039},      {{M::kZeroCopy, D::kH2D}, 0.029},
            {{M::kZeroCopy, D::kD2H}, 0.029},         {{M::kPageable, D::kH2D}, 0.175},
            {{M::kPageable, D::kD2H}, 0.175},         {{M::kManaged, D::kH2D}, 0.38},
            {{M::kManaged, D::kD2H}, 0.38},           {{M::kManagedPrefetch, D::kH2D}, 0.185},
            {{M::kManagedPrefetch, D::kD2H}, 0.185}};
}

// Cycle numbers (0-based) in which GPU 0 ran a probe of `mode` and `direction`.
std::vector<int> CyclesThatRan(const Harness& h, probes::TransferMode mode,
                               probes::Direction direction) {
  std::vector<int> cycles;
  const std::vector<probes::ProbeSpec> ran = h.backend.Ran();
  for (std::size_t c = 0; c < h.ran_before_cycle.size(); ++c) {
    const std::size_t from = c == 0 ? 0 : h.ran_before_cycle[c - 1];
    for (std::size_t i = from; i < h.ran_before_cycle[c]; ++i) {
      if (ran[i].mode == mode && ran[i].direction == direction) {
        cycles.push_back(static_cast<int>(c));
      }
    }
  }
  return cycles;
}

double TotalDevice(const Harness& h) {
  double total = 0;
  for (const auto& r : h.reports) total += r.device_s;
  return total;
}

probes::LinkPath Gen5x16() {
  probes::LinkPath path;
  path.links.push_back({"0000:3b:00.0", 5, 16, 5, 16});
  return path;
}

// The fake GPUs as H200s (SetH200Costs) on a Gen5 x16 link.
void SetH200sOnGen5x16(FakeBackend& b) {
  SetH200Costs(b);
  b.link_path = Gen5x16();
}

TEST(Scheduler, HeadlineEveryIntervalFromTheStartAndEveryModeLearnedInBoundedTime) {
  Harness h;
  SetH200sOnGen5x16(h.backend);
  h.stop_after = 120;
  h.Run(H200Config());
  ASSERT_EQ(h.reports.size(), 120u);
  using M = probes::TransferMode;
  using D = probes::Direction;
  EXPECT_EQ(CyclesThatRan(h, M::kPinned, D::kH2D).size(), 120u);
  EXPECT_EQ(CyclesThatRan(h, M::kPinned, D::kD2H).size(), 120u);
  // No blind window: every cycle one interval after the last, from the first on, however
  // much the rotation spent (it never runs on credit).
  for (std::size_t i = 1; i < h.starts.size(); ++i) {
    EXPECT_EQ(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(60s))
        << "cycle " << i;
  }
  // The first cycle runs the headline and, never measured so overdue, what one interval's
  // refill and half the reserve buy: not all 13 probes, and half the reserve stays for the
  // confirmation rounds.
  EXPECT_GT(h.reports[0].devices[0].samples.size(), 4u);
  EXPECT_LT(h.reports[0].devices[0].samples.size(), 13u);
  EXPECT_GT(h.reports[0].held_back, 0);
  EXPECT_EQ(h.reports[0].skipped_budget, 0);
  EXPECT_EQ(h.reports[0].errors, 0);
  EXPECT_GE(h.reports[0].devices[0].allowance_s, Settings{}.burst_reserve_s / 2 - 1e-9);
  // Each cycle's headline runs first, the rest after.
  EXPECT_EQ(h.reports[5].devices[0].samples[0].spec.mode, M::kPinned);
  EXPECT_EQ(h.reports[5].devices[0].samples[1].spec.mode, M::kPinned);
  // Every other probe is learned within the first half hour (their estimated costs, about
  // 2.8 s, at 95 ms a minute) and keeps running: a full rotation costs (1.732 - 0.055) s at
  // (0.150 - 0.055) s a minute, about 18 minutes; none waits much longer than that.
  const std::vector<std::pair<M, D>> rotating = {
      {M::kPinned, D::kBidirectional}, {M::kPinnedAsync, D::kH2D},    {M::kPinnedAsync, D::kD2H},
      {M::kZeroCopy, D::kH2D},         {M::kZeroCopy, D::kD2H},       {M::kPageable, D::kH2D},
      {M::kPageable, D::kD2H},         {M::kManaged, D::kH2D},        {M::kManaged, D::kD2H},
      {M::kManagedPrefetch, D::kH2D},  {M::kManagedPrefetch, D::kD2H}};
  for (const auto& [mode, direction] : rotating) {
    const auto cycles = CyclesThatRan(h, mode, direction);
    SCOPED_TRACE(std::string(probes::ToString(mode)) + " " +
                 std::string(probes::ToString(direction)));
    ASSERT_GE(cycles.size(), 4u);
    EXPECT_LE(cycles.front(), 35);
    for (std::size_t i = 1; i < cycles.size(); ++i) EXPECT_LE(cycles[i] - cycles[i - 1], 22);
    EXPECT_LE(119 - cycles.back(), 22);
  }
  // The dearest probe (managed, 0.38 s) is not starved by the cheap ones.
  EXPECT_GE(CyclesThatRan(h, M::kManaged, D::kH2D).size(),
            CyclesThatRan(h, M::kZeroCopy, D::kH2D).size() - 1);
}

// The H200's measured per-transfer costs (a 22-transfer probe's device time / 22) with the
// default device-time target (25 ms, at least 5 timed transfers): the cheap probes keep
// their ~20 transfers, the dear ones (pageable, managed) drop to the floor, and every
// series is measured within 15 minutes, again and again, at the default duty cycle.
TEST(Scheduler, WithTheDeviceTimeTargetEverySeriesOfAnH200IsMeasuredWithinFifteenMinutes) {
  Harness h;
  SetH200sOnGen5x16(h.backend);
  h.stop_after = 60;
  Settings c = H200Config();
  c.probe_time = Settings{}.probe_time;
  h.Run(c);
  using M = probes::TransferMode;
  using D = probes::Direction;
  int longest = 0;
  for (const auto& [mode, direction] : probes::AllModeDirections()) {
    const auto cycles = CyclesThatRan(h, mode, direction);
    SCOPED_TRACE(std::string(probes::ToString(mode)) + " " +
                 std::string(probes::ToString(direction)));
    ASSERT_FALSE(cycles.empty());
    longest = std::max(longest, cycles.front() + 1);
    for (std::size_t i = 1; i < cycles.size(); ++i) {
      longest = std::max(longest, cycles[i] - cycles[i - 1]);
    }
    longest = std::max(longest, 59 - cycles.back());
  }
  std::printf("H200 costs, 25 ms target: every series at least every %d cycles (60 s)\n", longest);
  EXPECT_LE(longest, 15);
  EXPECT_EQ(CyclesThatRan(h, M::kPinned, D::kH2D).size(), 60u);
  // And within the cap over the hour: the refill plus what the allowance started with.
  const double span = 60 * 60.0;
  EXPECT_LE(TotalDevice(h) / 2, c.max_duty_cycle * span + InitialAllowance(c) + 0.5);
}

// The link around GPU 0's probes as a neighbour would leave it: every probe of `mode` and
// `direction` among the first `contended_runs` of them sees 20 GB/s of another process's
// traffic; every other window cannot be read (judged as before).
class NeighbourOn final : public BusyDetector {
 public:
  NeighbourOn(const FakeBackend& backend, probes::TransferMode mode, probes::Direction direction,
              int contended_runs)
      : backend_(backend), mode_(mode), direction_(direction), left_(contended_runs) {}
  std::optional<BusyReading> Check(const probes::DeviceInfo&) override { return std::nullopt; }
  std::string Describe() const override { return "a neighbour on one series"; }
  std::optional<probes::LinkTraffic> EndProbe(const probes::DeviceInfo& device) override {
    const std::vector<probes::ProbeSpec> ran = backend_.Ran();
    if (device.index != 0 || ran.empty() || ran.back().mode != mode_ ||
        ran.back().direction != direction_ || left_ == 0) {
      return std::nullopt;
    }
    --left_;
    probes::LinkTraffic t;
    t.source = "test";
    t.window_s = 0.05;
    t.rx_bytes = 20e9 * t.window_s + 2e9;  // the probe's own bytes and a neighbour's
    t.tx_bytes = 20e9 * t.window_s + 2e9;
    t.samples = 2;
    return t;
  }

 private:
  const FakeBackend& backend_;
  probes::TransferMode mode_;
  probes::Direction direction_;
  int left_;
};

// A reading set aside as contended is tried again at the next cycle instead of waiting a
// whole rotation (the H200's pinned_async h2d waited 8 minutes after one); a series whose
// link stays shared gets that one retry, then waits its turn, and the rest of the plan is
// measured as before.
TEST(Scheduler, AContendedReadingIsRetriedNextCycleOnceThenWaitsItsTurn) {
  using M = probes::TransferMode;
  using D = probes::Direction;
  for (const int contended : {1, 1000}) {
    SCOPED_TRACE(contended == 1 ? "one contended reading" : "the link shared for good");
    Harness h;
    SetH200sOnGen5x16(h.backend);
    h.stop_after = 40;
    Settings c = H200Config();
    c.probe_time = Settings{}.probe_time;
    h.Run(c, std::make_unique<NeighbourOn>(h.backend, M::kPinnedAsync, D::kH2D, contended));
    const auto cycles = CyclesThatRan(h, M::kPinnedAsync, D::kH2D);
    ASSERT_GE(cycles.size(), 2u);
    EXPECT_EQ(cycles[1], cycles[0] + 1) << "retried at the next cycle";
    int contended_readings = 0;
    for (const CycleReport& r : h.reports) contended_readings += r.contended;
    EXPECT_EQ(contended_readings, std::min<int>(contended, static_cast<int>(cycles.size())));
    if (contended == 1) continue;
    // Shared for good: after the retry it goes to the back of the rotation, so the others
    // run before its third try, and none of them waits longer than without a neighbour.
    ASSERT_GE(cycles.size(), 3u);
    EXPECT_GT(cycles[2], cycles[1] + 1);
    for (const auto& [mode, direction] : probes::AllModeDirections()) {
      const auto ran = CyclesThatRan(h, mode, direction);
      SCOPED_TRACE(std::string(probes::ToString(mode)) + " " +
                   std::string(probes::ToString(direction)));
      ASSERT_FALSE(ran.empty());
      EXPECT_LE(ran.front(), 15);
      for (std::size_t i = 1; i < ran.size(); ++i) EXPECT_LE(ran[i] - ran[i - 1], 16);
    }
  }
}

TEST(Scheduler, UnmeasuredProbeCostIsEstimatedFromItsBytesAtTheLink) {
  Harness h;
  SetH200sOnGen5x16(h.backend);
  h.stop_after = 1;
  h.Run(H200Config());
  // managed h2d: 22 x 64 MiB at 0.04 of 63 GB/s = 0.59 s, more than one interval buys:
  // held back in the first cycle though its real cost is unknown.
  for (const auto& s : h.reports[0].devices[0].samples) {
    EXPECT_NE(s.spec.mode, probes::TransferMode::kManaged);
  }
}

TEST(Scheduler, DeviceTimeStaysWithinTheDutyCycleOverALongSpan) {
  for (bool reload_every_cycle : {false, true}) {
    SCOPED_TRACE(reload_every_cycle ? "with a reload every cycle" : "no reloads");
    Harness h;
    SetH200sOnGen5x16(h.backend);
    h.stop_after = 60;
    const Settings c = H200Config();
    const SteadyTime t0 = h.clock.Now();
    std::optional<SteadyTime> next_start;
    h.after_cycle = [&](Scheduler& s, const CycleReport& r) {
      next_start = h.clock.Now() + r.next_in;
      // A reload (SIGHUP) must not hand out a fresh allowance.
      if (reload_every_cycle) s.Reconfigure(c, nullptr);
    };
    h.Run(c);
    ASSERT_TRUE(next_start);
    const double span = std::chrono::duration<double>(*next_start - t0).count();
    EXPECT_GE(span, 59 * 60.0);
    // Per GPU: both fake GPUs probe alike, so half the cycle's total. At most the refill
    // plus what the allowance started with.
    EXPECT_LE(TotalDevice(h) / 2, c.max_duty_cycle * span + InitialAllowance(c) + 1e-9);
    // And it is not far under either: the rotation uses what it is given (the reserve,
    // unused without confirmations, stays banked).
    EXPECT_GE(TotalDevice(h) / 2, c.max_duty_cycle * span * 0.8);
  }
}

TEST(Scheduler, HeadlineOverdrawSpacesCyclesToKeepTheCap) {
  Harness h;
  Settings c = SmallConfig();
  c.modes = {probes::TransferMode::kPinned};
  c.bidirectional = false;
  c.max_duty_cycle = 0.001;  // 0.01 s per 10 s interval
  h.backend.probe_wall = 20ms;
  h.backend.device_time_s = 0.02;  // headline: 0.04 s a cycle, four intervals' worth
  h.stop_after = 20;
  h.Run(c);
  // Each cycle waits until the headline fits the cap: 0.04 s / 0.001 = 40 s apart, from
  // the first cycle on (the reserve is not spent on the headline).
  for (std::size_t i = 1; i < h.starts.size(); ++i) {
    EXPECT_GE(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(39s));
    EXPECT_LE(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(41s));
  }
  const double span =
      std::chrono::duration<double>(h.clock.Now() + h.reports.back().next_in - h.starts[0]).count();
  EXPECT_LE(TotalDevice(h) / 2, c.max_duty_cycle * span + InitialAllowance(c) + 1e-9);
  // Never a probe held back: these are the headline.
  for (const auto& r : h.reports) EXPECT_EQ(r.held_back, 0);
}

TEST(Scheduler, AProbeDearerThanEstimatedNeverDelaysTheNextCycle) {
  Harness h;
  SetH200sOnGen5x16(h.backend);
  // pageable h2d (the stalest rotating probe: first in the plan), estimated at ~0.34 s,
  // takes 2 s: the rotation runs into debt.
  using M = probes::TransferMode;
  using D = probes::Direction;
  h.backend.cost[{M::kPageable, D::kH2D}] = 2.0;
  h.stop_after = 15;
  h.Run(H200Config());
  const auto ran = CyclesThatRan(h, M::kPageable, D::kH2D);
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_LT(h.reports[ran[0]].devices[0].allowance_s, 0);  // in debt after it
  for (std::size_t i = 1; i < h.starts.size(); ++i) {
    EXPECT_EQ(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(60s))
        << "cycle " << i;
  }
  // The debt holds the rotation back, not the headline.
  for (std::size_t i = ran[0] + 1; i < h.reports.size(); ++i) {
    EXPECT_EQ(h.reports[i].devices[0].samples.size(), 2u) << "cycle " << i;
  }
}

TEST(Scheduler, ReloadToASmallerDutyCycleShrinksTheAllowance) {
  Harness h;
  SetH200Costs(h.backend);
  Settings generous = H200Config();
  generous.max_duty_cycle = 1.0;
  Settings tight = H200Config();
  std::vector<double> allowance;
  h.after_cycle = [&](Scheduler& s, const CycleReport& r) {
    allowance.push_back(*s.Allowance(0));
    if (r.number == 3) s.Reconfigure(tight, nullptr);
  };
  h.stop_after = 6;
  h.Run(generous);
  // Everything ran while generous; after the reload the balance is at most the new cap.
  EXPECT_EQ(h.reports[2].held_back, 0);
  EXPECT_GT(allowance[2], 100.0);
  for (std::size_t i = 3; i < allowance.size(); ++i) {
    EXPECT_LE(allowance[i], AllowanceCapacity(tight) + 1e-9);
  }
  int held = 0;
  for (std::size_t i = 3; i < h.reports.size(); ++i) held += h.reports[i].held_back;
  EXPECT_GT(held, 0);
}

TEST(Scheduler, DeviceTimeIsCappedByTheWallTimeOfTheCall) {
  Harness h;
  h.stop_after = 1;
  h.backend.probe_wall = 1ms;
  h.backend.device_time_s = 0.5;  // a simulated device faster than real time
  h.Run(SmallConfig());
  EXPECT_NEAR(h.reports[0].device_s, 10 * 0.001, 1e-9);
}

TEST(Scheduler, LongCycleDropsMissedSlotsInsteadOfOverlapping) {
  Harness h;
  h.backend.probe_wall = 3s;  // 10 probes x 3 s = 30 s, three intervals long
  Settings c = SmallConfig();
  c.probe_deadline = 5s;
  c.cycle_budget = 60s;
  h.Run(c);
  for (size_t i = 1; i < h.starts.size(); ++i) {
    EXPECT_GE(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(30s));
  }
}

TEST(Scheduler, BudgetStopsStartingProbes) {
  Harness h;
  h.backend.probe_wall = 1s;
  Settings c = SmallConfig();
  c.cycle_budget = 3s;
  h.stop_after = 1;
  h.Run(c);
  ASSERT_EQ(h.reports.size(), 1u);
  EXPECT_TRUE(h.reports[0].over_budget);
  EXPECT_EQ(h.reports[0].ok, 3);
  EXPECT_EQ(h.reports[0].skipped_budget, 7);
  EXPECT_EQ(h.backend.runs, 3);
}

TEST(Scheduler, BusyGpuIsSkippedAndCounted) {
  Harness h;
  h.stop_after = 2;
  h.Run(SmallConfig(), fakes::BusyOnly(1));
  EXPECT_EQ(h.backend.runs_per_device[0], 10);
  EXPECT_EQ(h.backend.runs_per_device[1], 0);
  EXPECT_EQ(h.reports[0].skipped_busy, 5);
  EXPECT_TRUE(h.reports[0].devices[1].skipped_busy);
  EXPECT_EQ(h.skipped_busy_calls, 10);
}

TEST(Scheduler, BusyDetectionOffIgnoresTheDetector) {
  Harness h;
  h.stop_after = 1;
  Settings c = SmallConfig();
  c.busy_detection = false;
  h.Run(c, fakes::BusyOnly(1));
  EXPECT_EQ(h.backend.runs_per_device[1], 5);
}

TEST(Scheduler, ResultPastItsDeadlineIsATimeout) {
  Harness h;
  h.stop_after = 1;
  h.backend.probe_wall = 6s;
  Settings c = SmallConfig();
  c.cycle_budget = 600s;
  h.Run(c);
  EXPECT_EQ(h.reports[0].timeouts, 10);
  EXPECT_EQ(h.reports[0].ok, 0);
  EXPECT_NE(h.reports[0].devices[0].samples[0].message.find("deadline"), std::string::npos);
}

TEST(Scheduler, LinkPathReadOncePerGpuPerCycle) {
  Harness h;
  h.stop_after = 3;
  h.Run(SmallConfig());
  // Once per GPU at the start (the rate its probe sizes follow), then once per cycle.
  EXPECT_EQ(h.backend.link_reads, 2 + 6);
}

// A backend call that never returns, not even when asked to stop: CheckStall reports it
// once past deadline + grace, and Run still ends when stopped once the call comes back.
TEST(Scheduler, HungProbeIsReportedAsAStallOnce) {
  FakeClock clock;
  FakeBackend backend(nullptr, 1);
  backend.Hold(/*ignore_stop=*/true);
  Settings c = SmallConfig();
  c.probe_deadline = 2s;
  std::stop_source stop;
  Scheduler s(backend, backend.Devices(), c, nullptr, clock, 1, {});
  std::thread t([&] { s.Run(stop.get_token()); });
  while (!backend.Entered()) std::this_thread::sleep_for(1ms);
  const SteadyTime t0 = clock.Now();
  EXPECT_FALSE(s.CheckStall(t0 + 2s));          // within its deadline
  EXPECT_FALSE(s.CheckStall(t0 + 2s + 900ms));  // within the grace
  auto stall = s.CheckStall(t0 + 3500ms);
  ASSERT_TRUE(stall);
  EXPECT_TRUE(stall->first_report);
  EXPECT_EQ(stall->spec.mode, probes::TransferMode::kPinned);
  auto again = s.CheckStall(t0 + 4s);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->first_report);
  stop.request_stop();
  backend.Release();
  t.join();
  EXPECT_EQ(s.CyclesCompleted(), 0u);  // the cut-short cycle is not reported
  EXPECT_FALSE(s.CheckStall(t0 + 10s));
}

TEST(Scheduler, ReconfigureTakesEffectNextCycle) {
  FakeClock clock;
  FakeBackend backend(&clock);
  Settings c = SmallConfig();
  std::stop_source stop;
  std::vector<int> ok_per_cycle;
  Scheduler* self = nullptr;
  SchedulerCallbacks cb;
  cb.on_cycle = [&](const CycleReport& r) {
    ok_per_cycle.push_back(r.ok);
    if (ok_per_cycle.size() == 1) {
      Settings smaller = c;
      smaller.modes = {probes::TransferMode::kPinned};
      smaller.bidirectional = false;
      self->Reconfigure(smaller, nullptr);
    }
    if (ok_per_cycle.size() == 2) stop.request_stop();
  };
  Scheduler s(backend, backend.Devices(), c, nullptr, clock, 1, cb);
  self = &s;
  s.Run(stop.get_token());
  EXPECT_EQ(ok_per_cycle, (std::vector<int>{10, 4}));
}

// The scheduler wired to a health tracker as the service wires them: each cycle and each
// confirmation round observed, each reading asked what it does to its verdict.
struct Watched {
  FakeClock clock;
  FakeBackend backend{&clock, 1};
  Settings config = H200Config();
  std::unique_ptr<HealthTracker> health;
  std::vector<CycleReport> reports;
  std::vector<SteadyTime> report_times;
  std::optional<SteadyTime> degraded_at;
  std::stop_source stop;
  std::function<void(const CycleReport&)> after_report;
  std::function<void(const probes::ProbeSample&)> after_probe;
  SteadyTime until{};

  Watched() {
    SetH200sOnGen5x16(backend);
    SetBandwidth(1.0);
  }
  // H200 figures x `factor`: pinned 55 GB/s, pageable 6.4, both ways 100, ...
  void SetBandwidth(double factor) {
    using M = probes::TransferMode;
    using D = probes::Direction;
    backend.bandwidth = 40e9 * factor;
    backend.bandwidth_of = {{{M::kPinned, D::kH2D}, 55e9 * factor},
                            {{M::kPinned, D::kD2H}, 55e9 * factor},
                            {{M::kPinned, D::kBidirectional}, 100e9 * factor},
                            {{M::kPageable, D::kH2D}, 6.4e9 * factor},
                            {{M::kPageable, D::kD2H}, 12e9 * factor}};
  }
  void Run(std::chrono::seconds span) {
    health = std::make_unique<HealthTracker>(config);
    until = clock.Now() + span;
    SchedulerCallbacks cb;
    const auto device = backend.Devices().at(0);
    cb.on_probe = [&](const auto&, const probes::ProbeSample& s) {
      if (after_probe) after_probe(s);
    };
    cb.on_cycle = [&](const CycleReport& r) {
      reports.push_back(r);
      report_times.push_back(clock.Now());
      for (const auto& dc : r.devices) {
        CycleObservation obs{dc.device, dc.link_path, dc.samples, dc.skipped_busy, -1};
        const DeviceHealth h = health->Observe(obs);
        if (h.Degraded() && !degraded_at) degraded_at = clock.Now();
      }
      if (after_report) after_report(r);
      if (clock.Now() >= until) stop.request_stop();
    };
    cb.flip_ahead = [&](const probes::DeviceInfo& d, const probes::LinkPath& path,
                        const probes::ProbeSample& s) {
      return health->ReadingsToFlip(d, path, s);
    };
    Scheduler s(backend, {device}, config, nullptr, clock, 1, cb);
    s.Run(stop.get_token());
  }
  int Confirmations() const {
    int n = 0;
    for (const auto& r : reports) n += r.confirmation;
    return n;
  }
};

TEST(Scheduler, ABadReadingIsConfirmedWithinSecondsAndTheCauseProbesRun) {
  Watched w;
  std::optional<SteadyTime> fault_at;
  w.after_report = [&](const CycleReport& r) {
    // Half an hour of healthy cycles (baselines learned), then the link halves.
    if (!r.confirmation && r.number == 30) {
      w.SetBandwidth(0.5);
      fault_at = w.clock.Now();
    }
  };
  w.Run(3600s);
  ASSERT_TRUE(fault_at);
  ASSERT_TRUE(w.degraded_at);
  const double after = std::chrono::duration<double>(*w.degraded_at - *fault_at).count();
  // The next cycle (within 66 s) reads it bad, two confirmations 5-15 s apart flip it.
  EXPECT_LE(after, 66 + 2 * 15 + 1) << after << " s";
  std::printf("DEGRADED %.1f s after the fault (interval 60 s, jitter 0)\n", after);
  // The round that flipped it also ran the probes that name the cause.
  std::size_t flip = 0;
  for (std::size_t i = 0; i < w.reports.size(); ++i) {
    if (w.report_times[i] == *w.degraded_at) flip = i;
  }
  const CycleReport& round = w.reports[flip];
  EXPECT_TRUE(round.confirmation);
  EXPECT_EQ(round.number, 31u);  // a round after cycle 31, not a cycle of its own
  std::set<std::pair<probes::TransferMode, probes::Direction>> ran;
  for (const auto& s : round.devices.at(0).samples) ran.insert({s.spec.mode, s.spec.direction});
  using M = probes::TransferMode;
  using D = probes::Direction;
  EXPECT_TRUE(ran.count({M::kPinned, D::kH2D}));
  EXPECT_TRUE(ran.count({M::kPinned, D::kD2H}));
  EXPECT_TRUE(ran.count({M::kPageable, D::kH2D}));
  EXPECT_TRUE(ran.count({M::kPinned, D::kBidirectional}));
  // Paid from the reserve, not more than it holds.
  EXPECT_GE(round.devices.at(0).allowance_s, -1e-9);
  // Confirmation rounds are not cycles: the cycles kept their cadence.
  std::vector<SteadyTime> cycle_starts;
  for (std::size_t i = 0; i < w.reports.size(); ++i) {
    if (!w.reports[i].confirmation) cycle_starts.push_back(w.report_times[i]);
  }
  for (std::size_t i = 1; i < cycle_starts.size(); ++i) {
    EXPECT_LT(cycle_starts[i] - cycle_starts[i - 1],
              std::chrono::duration_cast<SteadyTime::duration>(61s));
  }
}

TEST(Scheduler, ATransientDipIsNotConfirmed) {
  Watched w;
  bool dipped = false;
  w.after_report = [&](const CycleReport& r) {
    if (!r.confirmation && r.number == 30) w.SetBandwidth(0.5);
  };
  // The dip lasts for one reading: the next one (its confirmation) is back to normal.
  w.after_probe = [&](const probes::ProbeSample& s) {
    if (!dipped && s.MedianBandwidth() < 30e9 && s.spec.mode == probes::TransferMode::kPinned) {
      dipped = true;
      w.SetBandwidth(1.0);
    }
  };
  w.Run(3600s);
  EXPECT_TRUE(dipped);
  EXPECT_GE(w.Confirmations(), 1);  // it was re-measured ...
  EXPECT_FALSE(w.degraded_at);      // ... and found fine
}

TEST(Scheduler, ConfirmationsSpendTheReserveTheRotationDoesNot) {
  Watched w;
  w.after_report = [&](const CycleReport& r) {
    if (!r.confirmation && r.number == 30) w.SetBandwidth(0.5);
  };
  w.Run(40 * 60s);
  // Before the fault the rotation never dipped into the reserve, save for series overdue
  // (waited half their bound: the H200's 22-transfer probes rotate in about 17 minutes),
  // which may spend half of it; the other half stays for confirmation.
  bool dipped = false;
  for (const auto& r : w.reports) {
    if (r.number >= 30) break;
    bool overdue = false;
    for (const auto& o : r.devices.at(0).outlook)
      overdue = overdue || o.cls == ProbeClass::kOverdue;
    EXPECT_GE(r.devices.at(0).allowance_s, w.config.burst_reserve_s / 2 - 1e-9) << r.number;
    if (r.devices.at(0).allowance_s < w.config.burst_reserve_s - 1e-9) {
      EXPECT_TRUE(overdue || dipped) << r.number << ": into the reserve with nothing overdue";
      dipped = true;
    }
  }
  // The confirmation rounds spent below half of it.
  bool below = false;
  for (const auto& r : w.reports) {
    below = below || (r.confirmation && r.devices.at(0).allowance_s < w.config.burst_reserve_s / 2);
  }
  EXPECT_TRUE(below);
}

// ---- concurrent groups ----------------------------------------------------------------

Settings ConcurrentConfig() {
  Settings c = SmallConfig();
  c.concurrent = true;
  c.concurrent_interval = 30s;
  return c;
}

TEST(SchedulerConcurrent, GroupsRunAfterTheSoloProbesAtTheirOwnCadence) {
  Harness h;
  h.stop_after = 7;
  h.Run(ConcurrentConfig());
  ASSERT_EQ(h.reports.size(), 7u);
  // Cycles every 10 s, the "host" group (both fake GPUs) every 30 s: h2d, d2h, bidir.
  const std::vector<std::size_t> expected = {3, 0, 0, 3, 0, 0, 3};
  for (std::size_t i = 0; i < h.reports.size(); ++i) {
    EXPECT_EQ(h.reports[i].concurrent.size(), expected[i]) << "cycle " << i + 1;
  }
  const GroupRun& run = h.reports[0].concurrent[0];
  EXPECT_EQ(run.group.name, "host");
  EXPECT_EQ(run.group.GpuList(), "0,1");
  EXPECT_EQ(run.spec.mode, probes::TransferMode::kPinned);
  EXPECT_EQ(run.spec.direction, probes::Direction::kH2D);
  ASSERT_EQ(run.samples.size(), 2u);
  EXPECT_TRUE(run.AllOk());
  // Solo figures from the same cycle's pinned h2d, to hold the concurrent ones against.
  ASSERT_EQ(run.solo_bytes_per_s.size(), 2u);
  EXPECT_GT(run.solo_bytes_per_s[0], 0);
  EXPECT_EQ(h.reports[0].concurrent[2].spec.direction, probes::Direction::kBidirectional);
  // Each GPU ran its 5 solo probes per cycle plus 3 concurrent ones per group run.
  EXPECT_EQ(h.backend.runs_per_device[0], 7 * 5 + 3 * 3);
  EXPECT_EQ(h.backend.runs_per_device[1], 7 * 5 + 3 * 3);
}

TEST(SchedulerConcurrent, EachMemberPaysItsOwnDeviceTime) {
  Harness h;
  h.stop_after = 1;
  h.backend.device_time_s = 0.01;
  h.backend.bandwidth = 50e9;  // what unmeasured costs are estimated from: all five fit
  Settings c = ConcurrentConfig();
  c.max_duty_cycle = 0.01;  // holds 6 s
  std::optional<double> after;
  h.after_cycle = [&](Scheduler& s, const CycleReport&) { after = s.Allowance(1); };
  h.Run(c);
  ASSERT_TRUE(after);
  // 5 solo and 3 concurrent probes at 10 ms each, against what the allowance starts with
  // (the reserve and one interval's refill; the refill over the cycle's wall time is a few
  // ms x 0.01).
  EXPECT_NEAR(*after, InitialAllowance(c) - 8 * 0.01, 0.002);
  EXPECT_NEAR(h.reports[0].device_s, 2 * 8 * 0.01, 1e-9);
}

TEST(SchedulerConcurrent, AGroupWithABusyMemberStaysDue) {
  Harness h;
  h.stop_after = 2;
  std::atomic<int> reads{0};
  // GPU 1 is busy when first asked only.
  auto busy = MakeBusyDetector(
      std::make_unique<fakes::FakeGpuLoadReader>([&reads](const probes::DeviceInfo& d) {
        const bool first = d.index == 1 && reads++ == 0;
        return probes::GpuLoad{first ? 95.0 : 0.0, 0};
      }),
      BusyThresholds{});
  h.Run(ConcurrentConfig(), std::move(busy));
  ASSERT_EQ(h.reports.size(), 2u);
  EXPECT_TRUE(h.reports[0].concurrent.empty());
  EXPECT_EQ(h.reports[0].concurrent_held_back, 3);
  // Due since: the next cycle runs it, although concurrent_interval has not passed.
  EXPECT_EQ(h.reports[1].concurrent.size(), 3u);
}

TEST(SchedulerConcurrent, AGroupShortOfAllowanceWaits) {
  Harness h;
  h.stop_after = 2;
  h.backend.cost[{probes::TransferMode::kPinned, probes::Direction::kBidirectional}] = 0.5;
  Settings c = ConcurrentConfig();
  c.max_duty_cycle = 0.001;  // holds 0.6 s
  c.concurrent_interval = 10s;
  h.Run(c);
  ASSERT_EQ(h.reports.size(), 2u);
  // The first cycle spends the full allowance (unknown costs run once to be learned)...
  EXPECT_EQ(h.reports[0].concurrent.size(), 3u);
  // ... so the next finds the members in debt: the group waits for them to save up.
  EXPECT_TRUE(h.reports[1].concurrent.empty());
  EXPECT_EQ(h.reports[1].concurrent_held_back, 3);
}

// A plan whose own probes fill the cycle budget every time leaves the groups no time: they
// are never run, and the log says why and what to change, once (not every cycle).
TEST(SchedulerConcurrent, AGroupTheBudgetNeverFitsIsSaidOnceWithTheFix) {
  fakes::LogCapture log;
  Harness h;
  h.stop_after = 8;
  // Each GPU's pinned h2d takes 2 s: the cycle's own probes take 4 s of a 3 s budget.
  h.backend.cost[{probes::TransferMode::kPinned, probes::Direction::kH2D}] = 2.0;
  Settings c = ConcurrentConfig();
  c.probe_time = 0ms;  // exactly `iterations` transfers: the cost as set
  c.cycle_budget = 3s;
  c.concurrent_interval = 10s;
  h.Run(c);
  ASSERT_EQ(h.reports.size(), 8u);
  for (const CycleReport& r : h.reports) {
    EXPECT_TRUE(r.concurrent.empty()) << r.number;
    EXPECT_EQ(r.concurrent_held_back, 3) << r.number;
  }
  EXPECT_EQ(log.Count("concurrent group host (2 GPUs) has not run in 3 cycles"), 1) << log.Text();
  EXPECT_EQ(log.Count("has not run in"), 1) << log.Text();
  EXPECT_NE(log.Text().find("raise probe.cycle_budget"), std::string::npos) << log.Text();
  EXPECT_NE(log.Text().find("probe.concurrent = false"), std::string::npos) << log.Text();
}

// Held back now and then (a busy member, one long cycle) is no plan problem: nothing said.
TEST(SchedulerConcurrent, AGroupHeldBackOnceIsNotReported) {
  fakes::LogCapture log;
  Harness h;
  h.stop_after = 6;
  Settings c = ConcurrentConfig();
  c.probe_time = 0ms;  // exactly `iterations` transfers: the cost as set
  c.cycle_budget = 3s;
  c.concurrent_interval = 10s;
  // Slow only in the first two cycles.
  h.backend.cost[{probes::TransferMode::kPinned, probes::Direction::kH2D}] = 2.0;
  h.after_cycle = [&](Scheduler&, const CycleReport& r) {
    if (r.number == 2) h.backend.cost.clear();
  };
  h.Run(c);
  ASSERT_EQ(h.reports.size(), 6u);
  EXPECT_TRUE(h.reports[0].concurrent.empty());
  EXPECT_EQ(h.reports[2].concurrent.size(), 3u);
  EXPECT_EQ(log.Count("has not run in"), 0) << log.Text();
}

TEST(SchedulerConcurrent, OneGpuHasNoGroup) {
  FakeClock clock;
  FakeBackend backend{&clock, 1};
  std::vector<CycleReport> reports;
  std::stop_source stop;
  SchedulerCallbacks cb;
  cb.on_cycle = [&](const CycleReport& r) {
    reports.push_back(r);
    stop.request_stop();
  };
  Scheduler s(backend, backend.Devices(), ConcurrentConfig(), nullptr, clock, 1, cb);
  s.Run(stop.get_token());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].concurrent.empty());
  EXPECT_EQ(backend.runs, 5);
}

// Simulated time ([simulate] speedup): a wait passes `speedup` times faster than real
// time, a probe moves the clock by exactly its simulated time, and a stop ends a wait.
TEST(SimulatedClock, RunsFasterWhileWaitingAndMovesByWhatProbesTake) {
  SimulatedClock clock(1000);
  const SteadyTime t0 = clock.Now();
  clock.Advance(2s);
  EXPECT_EQ(clock.Now() - t0, std::chrono::duration_cast<SteadyTime::duration>(2s));
  const auto real0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(clock.SleepUntil(t0 + 12s, std::stop_token{}));  // 10 s at 1000x: 10 ms
  EXPECT_EQ(clock.Now(), t0 + std::chrono::duration_cast<SteadyTime::duration>(12s));
  EXPECT_LT(std::chrono::steady_clock::now() - real0, 5s);
  std::stop_source stop;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    stop.request_stop();
  });
  EXPECT_FALSE(clock.SleepUntil(clock.Now() + 1000h, stop.get_token()));
  t.join();
  EXPECT_LT(clock.Now(), t0 + 1000h);
}

TEST(SteadyClock, SleepEndsEarlyOnStop) {
  SteadyClock clock;
  std::stop_source stop;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    stop.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(clock.SleepUntil(t0 + 60s, stop.get_token()));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  t.join();
  EXPECT_TRUE(clock.SleepUntil(std::chrono::steady_clock::now() + 1ms, std::stop_token{}));
}

}  // namespace
}  // namespace xferd::core
