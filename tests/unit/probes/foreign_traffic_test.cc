// The simulated device's foreign traffic: bursts on `duty` of the time, beginning at random
// moments (mid-probe too), taking their share of the link from probes in the same
// direction, and seen on the simulated link counters the way NVML's would show them.
#include "probes/sim/foreign_traffic.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "testing/fakes.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/sim_backend.h"
#include "xferd/probes/topology.h"

namespace xferd::probes {
namespace {

TEST(SimLinkTraffic, BurstsCoverTheirDutyOfTheTimeAndDependOnTheSeed) {
  SimLinkTraffic a({20e9, 0.3, Direction::kH2D}, 1), b({20e9, 0.3, Direction::kH2D}, 2);
  // Over four hours (~1500 bursts) the share of time on is the duty.
  double on_a = 0;
  int changes = 0;
  bool was_on = false;
  for (double t = 0; t < 4 * 3600; t += 0.1) {
    const bool on = a.ForeignRate(t).first > 0;
    on_a += on ? 0.1 : 0;
    changes += on != was_on;
    was_on = on;
  }
  EXPECT_NEAR(on_a / (4 * 3600), 0.3, 0.03);
  EXPECT_GT(changes, 500);  // bursts, not one long stretch
  // Counters integrate what flowed: duty x rate x time, plus the overhead.
  const auto [rx, tx] = a.Counters(4 * 3600);
  EXPECT_NEAR(rx / (4 * 3600), 0.3 * 20e9 * kSimCounterOverhead, 0.03 * 20e9);
  EXPECT_NEAR(tx / (4 * 3600), 0.3 * 20e9 * kSimCounterReverse, 0.03 * 20e9 * kSimCounterReverse);
  // Another seed, other moments.
  int differ = 0;
  for (double t = 0; t < 600; t += 1) differ += (a.ForeignRate(t) != b.ForeignRate(t));
  EXPECT_GT(differ, 10);
}

TEST(SimLinkTraffic, SteadyNoneAndOtherDirections) {
  SimLinkTraffic steady({10e9, 1.0, Direction::kD2H}, 1), none({10e9, 0.0, Direction::kH2D}, 1);
  for (double t : {0.0, 1.5, 1000.0}) {
    EXPECT_EQ(steady.ForeignRate(t), std::make_pair(0.0, 10e9));
    EXPECT_EQ(none.ForeignRate(t), std::make_pair(0.0, 0.0));
  }
  // A d2h workload does not slow an h2d probe; it does a d2h one and both ways at once.
  EXPECT_EQ(steady.Stretch(5, 0.001, Direction::kH2D, 25e9, 25e9), 0.001);
  EXPECT_NEAR(steady.Stretch(5, 0.001, Direction::kD2H, 25e9, 25e9), 0.001 * 35 / 25, 1e-9);
  EXPECT_GT(steady.Stretch(5, 0.001, Direction::kBidirectional, 22e9, 25e9), 0.001);
  EXPECT_EQ(none.Stretch(5, 0.001, Direction::kH2D, 25e9, 25e9), 0.001);
}

TEST(SimLinkTraffic, MemoryStaysBoundedOverDays) {
  SimLinkTraffic t({20e9, 0.5, Direction::kH2D}, 3);
  double last = 0;
  for (double at = 0; at < 3 * 86400; at += 60) last = t.Counters(at).first;
  EXPECT_GT(last, 0);
  // Old bursts are folded into a total: counting on from there stays exact.
  const double before = t.Counters(3 * 86400).first;
  const double after = t.Counters(3 * 86400 + 3600).first;
  EXPECT_NEAR((after - before) / 3600, 0.5 * 20e9 * kSimCounterOverhead, 0.2 * 20e9);
}

SimOptions WithForeign(double rate, double duty, std::chrono::steady_clock::time_point* now) {
  SimOptions o;
  o.time_scale = 0;
  o.foreign_traffic = {rate, duty, Direction::kH2D};
  o.clock = [now] { return *now; };
  return o;
}


TEST(SimBackend, SteadyForeignTrafficHalvesAProbeAndShowsOnTheCounters) {
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  SimBackend alone(WithForeign(0, 0, &now)), shared(WithForeign(25e9, 1.0, &now));
  const auto reader = MakeSimGpuLoadReader(0, 0, &shared);
  const DeviceInfo gpu = shared.Devices().at(0);
  const double solo = alone.Run(0, fakes::PinnedSpec(Direction::kH2D)).MedianBandwidth();
  reader->BeginWindow(gpu);
  const ProbeSample s = shared.Run(0, fakes::PinnedSpec(Direction::kH2D));
  const auto traffic = reader->EndWindow(gpu);
  // Gen4 x16 pinned alone ~25 GB/s; a 25 GB/s neighbour takes about half the link.
  EXPECT_NEAR(s.MedianBandwidth() / solo, 0.5, 0.05);
  ASSERT_TRUE(traffic);
  EXPECT_EQ(traffic->source, "simulated");
  EXPECT_GT(traffic->window_s, 0);
  // The counters saw the probe's own bytes and the neighbour's 25 GB/s over the window.
  EXPECT_NEAR(traffic->rx_bytes,
              kSimCounterOverhead * (s.link_h2d_bytes + 25e9 * traffic->window_s),
              0.01 * traffic->rx_bytes);
  EXPECT_NEAR(traffic->after_rx_bytes / traffic->after_s, kSimCounterOverhead * 25e9, 1e8);
  // The busy check sees the neighbour too.
  EXPECT_NEAR(reader->Read(gpu)->pcie_bytes_per_s, 25e9, 1);
  // Nothing to read on a device the reader's backend has no link for.
  DeviceInfo other = gpu;
  other.index = 5;
  reader->BeginWindow(other);
  EXPECT_FALSE(reader->EndWindow(other));
}

TEST(SimBackend, ABurstBeginningMidProbeSlowsOnlyWhatItOverlaps) {
  // Scan the timeline for a probe that a burst begins in the middle of: its later
  // transfers are slower than its first ones.
  auto now = std::chrono::steady_clock::time_point{};
  SimBackend sim(WithForeign(25e9, 0.3, &now));
  bool found = false;
  for (int i = 0; i < 20000 && !found; ++i) {
    now += std::chrono::milliseconds(50);
    ProbeSpec spec = fakes::PinnedSpec(Direction::kH2D);
    spec.iterations = 40;
    const ProbeSample s = sim.Run(0, spec);
    const auto& d = s.durations_s;
    found = d.front() * 1.5 < d.back() && d[d.size() / 2] > 0;
  }
  EXPECT_TRUE(found) << "no burst began mid-probe in 1000 s of probes";
}

}  // namespace
}  // namespace xferd::probes
