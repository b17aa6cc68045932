// Link errors judged across readings: growth per counter, a count that goes back is no
// count (and is said once, not every cycle), and the link_errors cause named only where
// the counters grew around a low reading.
#include "core/link_errors.h"

#include <gtest/gtest.h>

#include "core/diagnosis.h"
#include "core/health_tracker.h"
#include "testing/fakes.h"

namespace xferd::core {
namespace {

using namespace std::chrono_literals;
using probes::AerClass;

probes::DeviceInfo Gpu() {
  probes::DeviceInfo d;
  d.index = 0;
  d.uuid = "GPU-0";
  d.pci_bus_id = "0000:03:00.0";
  return d;
}

// The GPU, a switch's port and a root port, with these correctable counts, and replays.
probes::LinkErrors Read(std::uint64_t gpu_cor, std::uint64_t port_cor, std::uint64_t replays,
                        std::uint64_t root_fatal = 0) {
  probes::LinkErrors e;
  for (const char* bdf : {"0000:03:00.0", "0000:02:00.0", "0000:00:01.0"}) {
    probes::AerCounters c;
    c.bdf = bdf;
    c.device = {0, 0, 0};
    e.aer.push_back(c);
  }
  e.aer[0].device[0] = gpu_cor;
  e.aer[0].kinds = {{AerClass::kCorrectable, "RxErr", gpu_cor}};
  e.aer[1].device[0] = port_cor;
  e.aer[1].kinds = {{AerClass::kCorrectable, "BadTLP", port_cor}};
  e.aer[2].root_port = true;
  e.aer[2].device[2] = root_fatal;
  e.aer[2].rootport = {gpu_cor + port_cor, 0, root_fatal};
  e.replays.value = replays;
  return e;
}

using fakes::LogCapture;

TEST(LinkErrorTracker, GrowthPerCounterSinceTheLastReading) {
  LinkErrorTracker t;
  const SteadyTime t0{};
  const LinkErrorReading first = t.Observe(Gpu(), Read(5, 0, 100), t0);
  EXPECT_EQ(first.interval_s, 0);
  EXPECT_EQ(first.aer[0].grown[0], 0u);  // nothing to compare the first reading with
  EXPECT_FALSE(t.Growth("GPU-0").Significant());
  const LinkErrorReading second = t.Observe(Gpu(), Read(5, 30, 110), t0 + 60s);
  EXPECT_DOUBLE_EQ(second.interval_s, 60);
  EXPECT_TRUE(second.aer[1].readable);
  EXPECT_EQ(second.aer[1].grown[0], 30u);
  ASSERT_EQ(second.aer[1].kinds_grown.size(), 1u);
  EXPECT_EQ(second.aer[1].kinds_grown[0].name, "BadTLP");
  EXPECT_EQ(second.replays_grown, 10u);
  const LinkErrorGrowth g = t.Growth("GPU-0");
  EXPECT_DOUBLE_EQ(g.window_s, 60);
  EXPECT_EQ(g.aer[0], 30u);
  EXPECT_EQ(g.replays, 10u);
  EXPECT_EQ(g.worst_bdf, "0000:02:00.0");
  EXPECT_EQ(g.worst_where, "the port above the GPU");
  EXPECT_TRUE(g.Significant());  // 30 correctable in a minute: over DCGM's 8 a minute
  // The window holds the last two intervals only: quiet minutes let the growth go.
  t.Observe(Gpu(), Read(5, 30, 110), t0 + 120s);
  EXPECT_TRUE(t.Growth("GPU-0").Significant());
  t.Observe(Gpu(), Read(5, 30, 110), t0 + 180s);
  EXPECT_FALSE(t.Growth("GPU-0").Significant());
}

TEST(LinkErrorGrowth, DcgmsRateForRetriesAnyUncorrectableError) {
  LinkErrorGrowth g;
  g.window_s = 120;
  g.replays = 15;  // 7.5 a minute: under DCGM's 8
  EXPECT_FALSE(g.Significant());
  g.replays = 16;
  EXPECT_TRUE(g.Significant());
  g.replays = 0;
  g.aer[static_cast<std::size_t>(AerClass::kFatal)] = 1;
  EXPECT_TRUE(g.Significant());
  // Over a window shorter than a minute (`xferd probe`), a minute's worth is still needed.
  LinkErrorGrowth quick;
  quick.window_s = 3;
  quick.replays = 7;
  EXPECT_FALSE(quick.Significant());
  quick.replays = 8;
  EXPECT_TRUE(quick.Significant());
}

TEST(LinkErrorTracker, ACountThatGoesBackIsNotReadableAndSaidOnce) {
  LogCapture log;
  LinkErrorTracker t;
  SteadyTime now{};
  t.Observe(Gpu(), Read(500, 0, 100), now);
  // A file that flips between two values every cycle (or a device reset, then not).
  int unreadable = 0;
  for (int cycle = 1; cycle <= 20; ++cycle) {
    now += 60s;
    const LinkErrorReading r = t.Observe(Gpu(), Read(cycle % 2 ? 3 : 500, 0, 100), now);
    if (!r.aer[0].readable) {
      ++unreadable;
      EXPECT_NE(r.aer[0].problem.find("went back from 500 to 3"), std::string::npos)
          << r.aer[0].problem;
      EXPECT_EQ(r.aer[0].grown[0], 0u);  // no growth is made of it
    }
    EXPECT_TRUE(r.aer[1].readable);
  }
  EXPECT_EQ(unreadable, 10);
  // 20 changes of state in 20 minutes: two lines per 10 minutes, not twenty (and the
  // first reading's summary).
  EXPECT_LE(log.Count("0000:03:00.0 (the GPU)"), 5) << log.Text();
  EXPECT_GE(log.Count("changes since the last line about it"), 1) << log.Text();
  EXPECT_GE(log.Count("went back"), 1) << log.Text();
  EXPECT_FALSE(t.Growth("GPU-0").Significant());
}

TEST(LinkErrorTracker, MissingAerIsSaidOnceAsNoFault) {
  LogCapture log;
  LinkErrorTracker t;
  probes::LinkErrors vm;
  probes::AerCounters gpu;
  gpu.bdf = "0000:00:06.0";
  gpu.missing = true;
  gpu.problem = "no AER counters in sysfs";
  vm.aer = {gpu};
  vm.replays.value = 0;
  SteadyTime now{};
  for (int cycle = 0; cycle < 5; ++cycle, now += 60s) {
    const LinkErrorReading r = t.Observe(Gpu(), vm, now);
    EXPECT_FALSE(r.aer[0].readable);
    EXPECT_TRUE(r.replays_readable);
  }
  EXPECT_EQ(log.Count("no AER counters"), 2) << log.Text();  // the first reading's summary too
  EXPECT_EQ(log.Count("[warning]"), 0) << log.Text();
  EXPECT_NE(log.Text().find("which is no fault"), std::string::npos);
}

SeriesHealth Low() {
  SeriesHealth s;
  s.mode = probes::TransferMode::kPinned;
  s.direction = probes::Direction::kH2D;
  s.median_bytes_per_s = 12e9;
  s.below_band = true;
  return s;
}

core::ExpectedBand Band() {
  return {19.85e9, 26.15e9, "link Gen4 x16 at 0000:03:00.0"};
}

bool Names(const std::vector<Diagnosis>& causes, DiagnosisCause cause) {
  return std::any_of(causes.begin(), causes.end(),
                     [&](const Diagnosis& d) { return d.cause == cause; });
}

TEST(LinkErrorsCause, NamedWhenTheCountersGrewAroundALowReading) {
  LinkErrorTracker t;
  t.Observe(Gpu(), Read(0, 0, 0), SteadyTime{});
  t.Observe(Gpu(), Read(0, 0, 400), SteadyTime{} + 60s);
  CycleObservation obs;
  obs.device = Gpu();
  obs.link_errors = t.Growth("GPU-0");
  const SeriesHealth low = Low();
  const auto causes = Diagnose(obs, Band(), {&low}, 0.8);
  ASSERT_TRUE(Names(causes, DiagnosisCause::kLinkErrors));
  const Diagnosis& d = *std::find_if(causes.begin(), causes.end(), [](const Diagnosis& c) {
    return c.cause == DiagnosisCause::kLinkErrors;
  });
  EXPECT_NE(d.detail.find("+400 PCIe replays"), std::string::npos) << d.detail;
  EXPECT_NE(d.advice.find("Reseat the GPU"), std::string::npos) << d.advice;
  // The same growth on a path that reads well names nothing: the alert speaks for it.
  SeriesHealth fine = Low();
  fine.below_band = false;
  fine.median_bytes_per_s = 24e9;
  EXPECT_FALSE(Names(Diagnose(obs, Band(), {&fine}, 0.8), DiagnosisCause::kLinkErrors));
}

TEST(LinkErrorsCause, NeverOnAHealthyPathAndTheAdviceFollowsTheErrors) {
  LinkErrorTracker t;
  t.Observe(Gpu(), Read(3, 0, 10), SteadyTime{});
  t.Observe(Gpu(), Read(4, 0, 12), SteadyTime{} + 60s);  // a stray error: healthy links have some
  CycleObservation obs;
  obs.device = Gpu();
  obs.link_errors = t.Growth("GPU-0");
  const SeriesHealth low = Low();
  EXPECT_FALSE(Names(Diagnose(obs, Band(), {&low}, 0.8), DiagnosisCause::kLinkErrors));
  // A fatal error at the root port: upstream advice and the drain.
  t.Observe(Gpu(), Read(4, 0, 12, 1), SteadyTime{} + 120s);
  obs.link_errors = t.Growth("GPU-0");
  const auto causes = Diagnose(obs, Band(), {&low}, 0.8);
  const auto d = std::find_if(causes.begin(), causes.end(), [](const Diagnosis& c) {
    return c.cause == DiagnosisCause::kLinkErrors;
  });
  ASSERT_NE(d, causes.end());
  EXPECT_NE(d->detail.find("+1 fatal"), std::string::npos) << d->detail;
  EXPECT_NE(d->detail.find("0000:00:01.0 (the root port"), std::string::npos) << d->detail;
  EXPECT_NE(d->advice.find("upstream"), std::string::npos) << d->advice;
  EXPECT_NE(d->advice.find("RMA"), std::string::npos) << d->advice;
}

TEST(LinkErrorsCause, TheHealthTrackerCarriesItToTheVerdictsCauses) {
  Settings settings;
  settings.consecutive_bad = 1;
  HealthTracker health(settings);
  LinkErrorTracker t;
  t.Observe(Gpu(), Read(0, 0, 0), SteadyTime{});
  t.Observe(Gpu(), Read(0, 50, 0), SteadyTime{} + 60s);
  CycleObservation obs;
  obs.device = Gpu();
  probes::PcieLink own{"0000:03:00.0", 4, 16, 4, 16};
  obs.link_path.links = {own};
  obs.link_errors = t.Growth("GPU-0");
  probes::ProbeSample s;
  s.spec.size_bytes = 64ull << 20;
  s.status = probes::ProbeStatus::kOk;
  s.bytes_per_transfer = s.spec.size_bytes;
  s.durations_s = {s.spec.size_bytes / 10e9};  // 10 GB/s on a Gen4 x16 link: far below band
  obs.samples = {s};
  const DeviceHealth h = health.Observe(obs);
  EXPECT_TRUE(h.Has(DiagnosisCause::kLinkErrors));
  EXPECT_NE(health.Summary().find("link_errors"), std::string::npos) << health.Summary();
}

}  // namespace
}  // namespace xferd::core
