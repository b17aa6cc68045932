// The probe loop with a fake clock and a fake backend: spacing, jitter, the device-time
// allowance and its rotation, budget, busy skips, deadlines and stalls, all without sleeping.
#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/busy_detector.h"
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
// (docs/gpu-results.md), at the default 0.25 % duty cycle and a 60 s interval.
Settings H200Config() {
  Settings c;
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

TEST(Scheduler, HeadlineProbesRunEveryCycleAndTheRestRotateStalestFirst) {
  Harness h;
  SetH200Costs(h.backend);
  h.stop_after = 120;
  h.Run(H200Config());
  ASSERT_EQ(h.reports.size(), 120u);
  using M = probes::TransferMode;
  using D = probes::Direction;
  EXPECT_EQ(CyclesThatRan(h, M::kPinned, D::kH2D).size(), 120u);
  EXPECT_EQ(CyclesThatRan(h, M::kPinned, D::kD2H).size(), 120u);
  // The first cycle measures everything (the allowance starts full, every cost unknown).
  EXPECT_EQ(h.reports[0].devices[0].samples.size(), 13u);
  EXPECT_EQ(h.reports[0].held_back, 0);
  // Then the rest is held back, not counted as errors or skips.
  EXPECT_GT(h.reports[1].held_back, 0);
  EXPECT_EQ(h.reports[1].skipped_budget, 0);
  EXPECT_EQ(h.reports[1].errors, 0);
  // Each cycle's headline runs first, the rest after.
  EXPECT_EQ(h.reports[5].devices[0].samples[0].spec.mode, M::kPinned);
  EXPECT_EQ(h.reports[5].devices[0].samples[1].spec.mode, M::kPinned);
  // Every other probe keeps running: a full rotation costs (1.732 - 0.055) s at
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
    ASSERT_GE(cycles.size(), 5u);  // 120 minutes, a rotation every ~18
    for (std::size_t i = 1; i < cycles.size(); ++i) EXPECT_LE(cycles[i] - cycles[i - 1], 22);
    EXPECT_LE(119 - cycles.back(), 22);
  }
  // The dearest probe (managed, 0.38 s) is not starved by the cheap ones.
  EXPECT_GE(CyclesThatRan(h, M::kManaged, D::kH2D).size(),
            CyclesThatRan(h, M::kZeroCopy, D::kH2D).size() - 1);
}

TEST(Scheduler, DeviceTimeStaysWithinTheDutyCycleOverALongSpan) {
  for (bool reload_every_cycle : {false, true}) {
    SCOPED_TRACE(reload_every_cycle ? "with a reload every cycle" : "no reloads");
    Harness h;
    SetH200Costs(h.backend);
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
    const double capacity = c.max_duty_cycle * 600;
    // Per GPU: both fake GPUs probe alike, so half the cycle's total.
    EXPECT_LE(TotalDevice(h) / 2, c.max_duty_cycle * span + capacity + 1e-9);
    // And it is not far under either: the rotation uses what it is given.
    EXPECT_GE(TotalDevice(h) / 2, c.max_duty_cycle * span * 0.8);
  }
}

TEST(Scheduler, HeadlineOverdrawDelaysTheNextCycle) {
  Harness h;
  Settings c = SmallConfig();
  c.modes = {probes::TransferMode::kPinned};
  c.bidirectional = false;
  c.max_duty_cycle = 0.001;  // 0.01 s per 10 s interval, 0.6 s of allowance
  h.backend.probe_wall = 20ms;
  h.backend.device_time_s = 0.02;  // headline: 0.04 s a cycle, four intervals' worth
  h.stop_after = 40;
  h.Run(c);
  // The full allowance first keeps the interval: 0.6 s / (0.04 - 0.01) s = 20 cycles.
  EXPECT_EQ(h.starts[1] - h.starts[0], std::chrono::duration_cast<SteadyTime::duration>(10s));
  // Then each cycle waits until the debt is repaid: 0.04 s / 0.001 = 40 s apart.
  for (std::size_t i = 30; i < h.starts.size(); ++i) {
    EXPECT_GE(h.starts[i] - h.starts[i - 1], std::chrono::duration_cast<SteadyTime::duration>(39s));
  }
  const double span =
      std::chrono::duration<double>(h.clock.Now() + h.reports.back().next_in - h.starts[0]).count();
  EXPECT_LE(TotalDevice(h) / 2, c.max_duty_cycle * span + c.max_duty_cycle * 600 + 1e-9);
  // Never a probe held back: these are the headline.
  for (const auto& r : h.reports) EXPECT_EQ(r.held_back, 0);
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
  for (std::size_t i = 3; i < allowance.size(); ++i) EXPECT_LE(allowance[i], 0.0025 * 600 + 1e-9);
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
  EXPECT_EQ(h.backend.link_reads, 6);
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
  Settings c = ConcurrentConfig();
  c.max_duty_cycle = 0.01;  // holds 6 s
  std::optional<double> after;
  h.after_cycle = [&](Scheduler& s, const CycleReport&) { after = s.Allowance(1); };
  h.Run(c);
  ASSERT_TRUE(after);
  // 5 solo and 3 concurrent probes at 10 ms each, against a full 6 s (the refill over the
  // cycle's wall time is a few ms x 0.01).
  EXPECT_NEAR(*after, 6.0 - 8 * 0.01, 0.002);
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
