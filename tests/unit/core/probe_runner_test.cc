// One probe measured and judged as every caller gets it: the deadline and what past it
// means, what the device spent, the link window and its contention, the link read, a hung
// call reported or cancelled, a group run, and the verdicts a user reads.
#include "core/probe_runner.h"

#include <gtest/gtest.h>

#include <thread>

#include "testing/fakes.h"

namespace xferd::core {
namespace {

using namespace std::chrono_literals;
using fakes::FakeBackend;
using fakes::FakeClock;
using probes::Direction;
using probes::ProbeStatus;
using probes::TransferMode;

probes::ProbeSpec Spec(TransferMode mode = TransferMode::kPinned,
                       Direction direction = Direction::kH2D) {
  probes::ProbeSpec s;
  s.mode = mode;
  s.direction = direction;
  s.size_bytes = 64ull << 20;
  s.iterations = 4;
  s.warmup = 0;
  s.deadline = 5s;
  return s;
}

probes::LinkPath Gen4x16() {
  probes::LinkPath path;
  probes::PcieLink link;
  link.bdf = "0000:01:00.0";
  link.current_gen = link.max_gen = 4;
  link.current_width = link.max_width = 16;
  path.links.push_back(link);
  return path;
}

// A link window that counts `foreign_bytes_per_s` of someone else's traffic h2d beside the
// probe's own bytes; counts its windows.
class WindowWith final : public BusyDetector {
 public:
  explicit WindowWith(double foreign_bytes_per_s) : foreign_(foreign_bytes_per_s) {}
  std::optional<BusyReading> Check(const probes::DeviceInfo&) override { return std::nullopt; }
  std::string Describe() const override { return "test window"; }
  void BeginProbe(const probes::DeviceInfo&) override { ++begun; }
  std::optional<probes::LinkTraffic> EndProbe(const probes::DeviceInfo&) override {
    ++ended;
    probes::LinkTraffic t;
    t.source = "test";
    t.window_s = 1.0;
    t.rx_bytes = 4.0 * (64 << 20) + foreign_;  // the probe's own bytes and the neighbour's
    t.samples = 2;
    return t;
  }
  int begun = 0, ended = 0;

 private:
  double foreign_;
};

TEST(ProbeRunner, AResultPastItsDeadlineIsATimeoutThatSaysBoth) {
  FakeClock clock;
  FakeBackend backend(&clock);
  backend.probe_wall = 6s;
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  const auto m = runner.Run(backend.Devices()[0], Spec(), nullptr, Settings{}, false, {});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->sample.status, ProbeStatus::kTimeout);
  EXPECT_EQ(m->sample.message, "finished after 6.00 s, past its 5.00 s deadline");
  EXPECT_DOUBLE_EQ(m->elapsed_s, 6.0);

  backend.probe_wall = 4s;
  const auto in_time = runner.Run(backend.Devices()[0], Spec(), nullptr, Settings{}, false, {});
  EXPECT_EQ(in_time->sample.status, ProbeStatus::kOk);
}

TEST(ProbeRunner, ADeadlineUnderASecondIsSaidInMilliseconds) {
  FakeClock clock;
  FakeBackend backend(&clock);
  backend.probe_wall = 50ms;
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  probes::ProbeSpec spec = Spec();
  spec.deadline = 40ms;
  const auto m = runner.Run(backend.Devices()[0], spec, nullptr, Settings{}, false, {});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->sample.message, "finished after 50 ms, past its 40 ms deadline");
}

TEST(ProbeRunner, TheCostIsTheDeviceTimeAtMostTheCallsWallTime) {
  FakeClock clock;
  FakeBackend backend(&clock);
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  backend.probe_wall = 100ms;
  backend.device_time_s = 0.04;
  EXPECT_DOUBLE_EQ(runner.Run(backend.Devices()[0], Spec(), nullptr, {}, false, {})->cost_s, 0.04);
  // A simulated device faster than real time reports more than the call took.
  backend.device_time_s = 0.5;
  EXPECT_DOUBLE_EQ(runner.Run(backend.Devices()[0], Spec(), nullptr, {}, false, {})->cost_s, 0.1);
  // None reported: the wall time.
  backend.device_time_s = 0;
  EXPECT_DOUBLE_EQ(runner.Run(backend.Devices()[0], Spec(), nullptr, {}, false, {})->cost_s, 0.1);
}

TEST(ProbeRunner, TheLinkWindowIsJudgedWithTheConfiguredThreshold) {
  FakeClock clock;
  FakeBackend backend(&clock);
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  Settings settings;
  settings.busy_pcie_bytes_per_s = 2e9;
  WindowWith busy(5e9), quiet(0.5e9);
  const auto contended = runner.Run(backend.Devices()[0], Spec(), &busy, settings, false, {});
  EXPECT_EQ(busy.begun, 1);
  EXPECT_EQ(busy.ended, 1);
  ASSERT_TRUE(contended->sample.traffic);
  EXPECT_TRUE(contended->sample.Contended()) << contended->sample.contention.reason;
  const auto clear = runner.Run(backend.Devices()[0], Spec(), &quiet, settings, false, {});
  EXPECT_EQ(clear->sample.contention.state, probes::ContentionState::kClear);
  // A higher threshold lets the same neighbour pass.
  settings.busy_pcie_bytes_per_s = 10e9;
  const auto tolerated = runner.Run(backend.Devices()[0], Spec(), &busy, settings, false, {});
  EXPECT_EQ(tolerated->sample.contention.state, probes::ContentionState::kClear);
  // No window: not read, so unknown.
  const auto unread = runner.Run(backend.Devices()[0], Spec(), nullptr, settings, false, {});
  EXPECT_FALSE(unread->sample.traffic);
  EXPECT_EQ(unread->sample.contention.state, probes::ContentionState::kUnknown);
}

TEST(ProbeRunner, TheContentionThresholdFollowsWhatThePathCarries) {
  // 1.5 GB/s beside the probe: under the configured 2 GB/s, but a fifth of a Gen4 x4 link.
  Settings settings;
  settings.busy_pcie_bytes_per_s = 2e9;
  WindowWith neighbour(1.5e9);
  FakeClock clock;
  FakeBackend narrow(&clock);
  narrow.link_path = Gen4x16();
  narrow.link_path.links[0].max_width = 4;
  narrow.link_path.links[0].current_width = 4;
  ProbeRunner on_x4(narrow, clock, HangWatch::kReport);
  const auto seen = on_x4.Run(narrow.Devices()[0], Spec(), &neighbour, settings, false, {});
  EXPECT_TRUE(seen->sample.Contended()) << seen->sample.contention.reason;
  // What a path carries does not change at idle: read once, not at every probe.
  on_x4.Run(narrow.Devices()[0], Spec(), &neighbour, settings, false, {});
  EXPECT_EQ(narrow.link_reads, 1);
  // On Gen4 x16 the same neighbour cannot move a healthy reading out of its band.
  FakeBackend wide(&clock);
  wide.link_path = Gen4x16();
  ProbeRunner on_x16(wide, clock, HangWatch::kReport);
  const auto clear = on_x16.Run(wide.Devices()[0], Spec(), &neighbour, settings, false, {});
  EXPECT_EQ(clear->sample.contention.state, probes::ContentionState::kClear)
      << clear->sample.contention.reason;
  // The link the probe read is the one judged by (a downtrained x4 link can still carry
  // x16: held to x16's threshold).
  narrow.link_path.links[0].max_width = 16;
  const auto read = on_x4.Run(narrow.Devices()[0], Spec(), &neighbour, settings, true, {});
  EXPECT_EQ(read->sample.contention.state, probes::ContentionState::kClear)
      << read->sample.contention.reason;
}

TEST(ProbeRunner, TheLinkIsReadWhenAskedAndOnlyAfterAProbeThatFinished) {
  FakeClock clock;
  FakeBackend backend(&clock);
  backend.link_path = Gen4x16();
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  const probes::DeviceInfo gpu = backend.Devices()[0];
  EXPECT_FALSE(runner.Run(gpu, Spec(), nullptr, {}, false, {})->link);
  EXPECT_EQ(backend.link_reads, 0);
  const auto read = runner.Run(gpu, Spec(), nullptr, {}, true, {});
  ASSERT_TRUE(read->link);
  EXPECT_EQ(read->link->links.at(0).bdf, "0000:01:00.0");
  backend.status = ProbeStatus::kError;
  EXPECT_FALSE(runner.Run(gpu, Spec(), nullptr, {}, true, {})->link);
  EXPECT_EQ(backend.link_reads, 1);
}

TEST(ProbeRunner, AProbeCutShortByStopIsNoResultButItsWindowCloses) {
  FakeClock clock;
  FakeBackend backend(&clock);
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  std::stop_source stop;
  stop.request_stop();
  WindowWith window(0);
  EXPECT_FALSE(runner.Run(backend.Devices()[0], Spec(), &window, {}, true, stop.get_token()));
  EXPECT_EQ(window.ended, 1);
}

TEST(ProbeRunner, AHungCallIsReportedOnceWhileItHangs) {
  FakeClock clock;
  FakeBackend backend(&clock);
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  backend.Hold();
  std::stop_source stop;
  std::thread probe(
      [&] { runner.Run(backend.Devices()[1], Spec(), nullptr, {}, false, stop.get_token()); });
  while (!backend.Entered()) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(runner.CheckStall(clock.Now() + 5s + HangGrace(5s)));
  const auto stall = runner.CheckStall(clock.Now() + 5s + HangGrace(5s) + 1ms);
  ASSERT_TRUE(stall);
  EXPECT_EQ(stall->device, 1);
  EXPECT_TRUE(stall->first_report);
  EXPECT_FALSE(runner.CheckStall(clock.Now() + 60s)->first_report);
  stop.request_stop();
  probe.join();
  EXPECT_FALSE(runner.CheckStall(clock.Now() + 60s));
}

TEST(ProbeRunner, OneShotCommandsCancelAHungCallAndCallItATimeout) {
  SteadyClock clock;
  FakeBackend backend;
  ProbeRunner runner(backend, clock, HangWatch::kCancel);
  backend.Hold();
  probes::ProbeSpec spec = Spec();
  spec.deadline = 100ms;
  const auto start = std::chrono::steady_clock::now();
  const auto m = runner.Run(backend.Devices()[0], spec, nullptr, {}, true, {});
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(m);
  EXPECT_EQ(m->sample.status, ProbeStatus::kTimeout);
  EXPECT_EQ(m->sample.message,
            "no answer within the 100 ms deadline (hung device?); the probe was cancelled");
  EXPECT_FALSE(m->link);
  EXPECT_GE(waited, spec.deadline + HangGrace(spec.deadline));
}

TEST(ProbeRunner, OneShotCommandsReadTheLinkWhileTheProbeRuns) {
  SteadyClock clock;
  FakeBackend backend;
  backend.link_path = Gen4x16();
  ProbeRunner runner(backend, clock, HangWatch::kCancel);
  backend.Hold();
  std::thread release([&] {
    while (backend.link_reads < 3) std::this_thread::sleep_for(1ms);
    backend.Release();
  });
  const auto m = runner.Run(backend.Devices()[0], Spec(), nullptr, {}, true, {});
  release.join();
  ASSERT_TRUE(m->link);
  EXPECT_EQ(m->sample.status, ProbeStatus::kOk);
}

TEST(ProbeRunner, AGroupRunHoldsEveryMemberToTheDeadlineInGroupOrder) {
  FakeClock clock;
  FakeBackend backend(&clock, 3);
  ProbeRunner runner(backend, clock, HangWatch::kReport);
  HostGroup group;
  group.name = "host";
  group.gpus = {0, 2};
  const auto m = runner.RunGroup(group, backend.Devices(), {20e9, 0}, Spec(), {});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->run.samples.size(), 2u);
  EXPECT_EQ(m->run.devices.at(1).uuid, "FAKE-2");
  EXPECT_EQ(m->run.solo_bytes_per_s, (std::vector<double>{20e9, 0}));
  EXPECT_EQ(m->cost_s.size(), 2u);
  EXPECT_EQ(m->run.group.name, "host");
  EXPECT_TRUE(m->run.AllOk());

  backend.probe_wall = 6s;  // each member takes 6 s of the call
  const auto late = runner.RunGroup(group, backend.Devices(), {}, Spec(), {});
  for (const auto& s : late->run.samples) {
    EXPECT_EQ(s.status, ProbeStatus::kTimeout);
    EXPECT_NE(s.message.find("past its 5.00 s deadline"), std::string::npos) << s.message;
  }
  EXPECT_EQ(late->run.solo_bytes_per_s, (std::vector<double>{0, 0}));
}

TEST(JudgeSample, SaysWhatFailedWhatWasContendedAndWhatTheBandSays) {
  const ExpectedBand band{20e9, 26e9, "config"};
  probes::ProbeSample s;
  s.spec = Spec();
  s.bytes_per_transfer = s.spec.size_bytes;
  s.durations_s = {s.spec.size_bytes / 25e9};
  s.status = ProbeStatus::kOk;
  SampleVerdict v = JudgeSample(s, band);
  EXPECT_EQ(v.text, "ok");
  EXPECT_FALSE(v.bad);
  EXPECT_EQ(v.band, BandVerdict::kOk);

  s.durations_s = {s.spec.size_bytes / 10e9};
  v = JudgeSample(s, band);
  EXPECT_EQ(v.text, "below band");
  EXPECT_TRUE(v.bad && v.BelowBand());

  s.contention.state = probes::ContentionState::kContended;
  s.contention.reason = "5.0 GB/s foreign traffic";
  v = JudgeSample(s, band);
  EXPECT_EQ(v.text, "contended: 5.0 GB/s foreign traffic");
  EXPECT_FALSE(v.bad || v.band) << "a neighbour's figure is neither bad nor judged";

  s.status = ProbeStatus::kError;
  s.message = "device lost";
  v = JudgeSample(s, band);
  EXPECT_EQ(v.text, "error: device lost");
  EXPECT_TRUE(v.bad);
  s.status = ProbeStatus::kTimeout;
  EXPECT_EQ(JudgeSample(s, band).text, "timeout");
  EXPECT_TRUE(JudgeSample(s, band).bad);
  s.status = ProbeStatus::kUnsupported;
  s.message = "no managed memory";
  EXPECT_EQ(JudgeSample(s, band).text, "unsupported: no managed memory");
  EXPECT_FALSE(JudgeSample(s, band).bad);

  s.status = ProbeStatus::kOk;
  s.contention = {};
  s.spec.mode = TransferMode::kPageable;
  EXPECT_EQ(JudgeSample(s, band).text, "n/a (not link-bound)");
}

TEST(JudgeAggregate, HoldsEachDirectionsSumToTheGroupsBand) {
  const ExpectedBand band{40e9, 52e9, "group"};
  GroupRun run;
  run.spec = Spec();
  for (int i = 0; i < 2; ++i) {
    probes::ProbeSample s;
    s.spec = run.spec;
    s.status = ProbeStatus::kOk;
    s.bytes_per_transfer = s.spec.size_bytes;
    s.durations_s = {s.spec.size_bytes / 22e9};
    run.samples.push_back(s);
  }
  EXPECT_EQ(JudgeAggregate(run, band).text, "ok");
  EXPECT_EQ(JudgeAggregate(run, ExpectedBand{}).text, "n/a (no expected band)");
  run.samples[1].durations_s = {run.spec.size_bytes / 10e9};
  EXPECT_EQ(JudgeAggregate(run, band).text, "below expected");
  EXPECT_TRUE(JudgeAggregate(run, band).bad);
  run.spec.direction = Direction::kBidirectional;
  EXPECT_EQ(JudgeAggregate(run, band).text, "n/a (both ways: not held to the band)");
  EXPECT_FALSE(JudgeAggregate(run, band).bad);
  run.samples[0].status = ProbeStatus::kTimeout;
  EXPECT_EQ(JudgeAggregate(run, band).text, "error: a member's probe failed");
  EXPECT_TRUE(JudgeAggregate(run, band).bad);
}

}  // namespace
}  // namespace xferd::core
