// The link watch's counting rule on a fake clock: a width change counts at any moment, a
// speed change only while the GPU moves data (its traffic on both sides of the reading, or
// xferd's own probe); power saving at idle and the moments traffic starts and stops count
// nothing; time below capability is held from reading to reading; a link flaps at the
// rule's transitions or a tenth of its window below capability, and stops once the window
// lets them go. And the watch's poll over a reader, on the same fake clock.
#include "core/link_watch.h"

#include <gtest/gtest.h>

#include <map>

#include "testing/fakes.h"

namespace xferd::core {
namespace {

using namespace std::chrono_literals;
using probes::LinkState;

constexpr LinkState kFull{5, 16};

// Two links (the GPU's, its switch's uplink), both Gen5 x16 at most, polled every second.
class FlapRule : public ::testing::Test {
 protected:
  FlapRule() {
    counter.SetLinks(
        {{"0000:17:00.0", "0000:18:00.0", 5, 16}, {"0000:15:01.0", "0000:16:00.0", 5, 16}});
    rule.interval = 1000ms;
    rule.window = 600s;
    rule.transitions = 4;
    rule.busy_bytes_per_s = 2e9;
  }
  // One poll a second: the GPU's own link as given, the uplink full; the traffic over the
  // second before it; whether xferd probed.
  bool Poll(LinkState own, std::optional<double> traffic = std::nullopt, bool probing = false) {
    now += 1s;
    return counter.Observe({now, {own, kFull}, traffic, probing}, rule);
  }
  LinkWatchState State() const { return counter.State(now, rule); }

  LinkFlapCounter counter;
  LinkWatchRule rule;
  SteadyTime now{std::chrono::hours(1)};
};

TEST_F(FlapRule, ASteadyLinkCountsNothing) {
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(Poll(kFull, i % 2 ? 30e9 : 0.0));
  const LinkWatchState s = State();
  EXPECT_TRUE(s.watching);
  EXPECT_EQ(s.transitions, 0u);
  EXPECT_EQ(s.reduced_s, 0);
  EXPECT_FALSE(s.flapping);
  EXPECT_EQ(s.last_seen, "");
}

TEST_F(FlapRule, PowerSavingAtIdleIsHealthy) {
  // The link drops to Gen1 between bursts of nothing, and trains up and down again: no
  // traffic, no probe, so no speed is judged.
  for (int i = 0; i < 200; ++i) Poll(i % 3 ? LinkState{1, 16} : kFull, 0.0);
  // Unreadable traffic (no NVML) is no traffic either.
  for (int i = 0; i < 50; ++i) Poll(i % 2 ? LinkState{2, 16} : kFull);
  EXPECT_EQ(State().transitions, 0u);
  EXPECT_EQ(State().reduced_s, 0);
  EXPECT_FALSE(State().flapping);
}

TEST_F(FlapRule, TrafficStartingAndStoppingIsNoTransition) {
  // Idle at Gen1; a workload starts just before a reading (the link still at Gen1 then, the
  // traffic of that second small), runs at Gen5, stops just before a reading (the link
  // already back at Gen1, the traffic of that second large, none after), again and again.
  for (int round = 0; round < 10; ++round) {
    Poll({1, 16}, 0.0);
    Poll({1, 16}, 0.3e9);
    for (int i = 0; i < 5; ++i) Poll(kFull, 20e9);
    Poll({1, 16}, 18e9);
    Poll({1, 16}, 0.0);
  }
  EXPECT_EQ(State().transitions, 0u);
  EXPECT_EQ(State().reduced_s, 0);
}

TEST_F(FlapRule, AWidthThatFlipsFlapsAtAnyMoment) {
  Poll(kFull);
  EXPECT_FALSE(Poll({5, 8}));  // judged one poll later
  EXPECT_TRUE(Poll(kFull));    // x16 -> x8, and a second held at x8
  EXPECT_EQ(State().transitions, 1u);
  EXPECT_DOUBLE_EQ(State().reduced_s, 1.0);
  EXPECT_FALSE(State().flapping);
  Poll({5, 8});
  Poll(kFull);
  Poll(kFull);  // judges the last x16
  const LinkWatchState s = State();
  EXPECT_EQ(s.transitions, 4u);
  EXPECT_DOUBLE_EQ(s.reduced_s, 2.0);
  EXPECT_TRUE(s.flapping);
  EXPECT_FALSE(s.low_only);
  EXPECT_EQ(s.last_seen, "0000:17:00.0-0000:18:00.0 Gen5 x8 -> Gen5 x16 (max Gen5 x16)");
  EXPECT_EQ(s.Describe(),
            "4 transitions and 2 s below capability in the last 10 min; last "
            "0000:17:00.0-0000:18:00.0 Gen5 x8 -> Gen5 x16 (max Gen5 x16)");
}

TEST_F(FlapRule, ASpeedThatFlipsWhileDataMovesFlaps) {
  // 20 GB/s of traffic all along; the link falls to Gen2 and back every other second.
  for (int i = 0; i < 10; ++i) Poll(i % 2 ? LinkState{2, 16} : kFull, 20e9);
  const LinkWatchState s = State();
  EXPECT_EQ(s.transitions, 8u);  // the last reading is judged at the next poll
  EXPECT_DOUBLE_EQ(s.reduced_s, 4.0);
  EXPECT_TRUE(s.flapping);
  EXPECT_EQ(s.last_seen, "0000:17:00.0-0000:18:00.0 Gen2 x16 -> Gen5 x16 (max Gen5 x16)");
}

TEST_F(FlapRule, XferdsOwnProbeIsDataMoving) {
  // No traffic counter (no NVML), but a probe in flight at each reading.
  for (int i = 0; i < 6; ++i) Poll(i % 2 ? LinkState{3, 16} : kFull, std::nullopt, true);
  EXPECT_EQ(State().transitions, 4u);
  EXPECT_TRUE(State().flapping);
}

TEST_F(FlapRule, ALinkDownToGen1IsBusyAtAQuarterOfWhatItCarries) {
  // Gen1 x16 carries 4 GB/s: 1.5 GB/s is a link held back by its speed, not an idle one,
  // although under [busy] pcie_bytes_per_second.
  EXPECT_DOUBLE_EQ(MovingDataThreshold(rule, probes::PcieBytesPerSecond(1, 16)), 1e9);
  EXPECT_DOUBLE_EQ(MovingDataThreshold(rule, probes::PcieBytesPerSecond(5, 16)), 2e9);
  for (int i = 0; i < 70; ++i) Poll({1, 16}, 1.5e9);
  const LinkWatchState s = State();
  EXPECT_EQ(s.transitions, 0u);
  EXPECT_DOUBLE_EQ(s.reduced_s, 69.0);  // the last reading is judged at the next poll
  // A tenth of the window below capability: it flaps, by its time alone.
  EXPECT_TRUE(s.flapping);
  EXPECT_TRUE(s.low_only);
  EXPECT_EQ(s.last_seen, "0000:17:00.0-0000:18:00.0 Gen1 x16 while moving data (max Gen5 x16)");
}

TEST_F(FlapRule, ALinkBackAtCapabilityAfterOneLowEpisodeFlapsNoMore) {
  // x8 for 70 s (a downtrained link, which the probes name link_downtrained), then back at
  // x16 (reseated, or the fault cleared): one transition, and the time below capability
  // stays in the window, but the episode is over.
  Poll(kFull);
  for (int i = 0; i < 70; ++i) Poll({5, 8});
  EXPECT_TRUE(State().flapping);
  EXPECT_TRUE(State().low_only);
  Poll(kFull);
  Poll(kFull);
  const LinkWatchState s = State();
  EXPECT_FALSE(s.flapping) << s.Describe();
  EXPECT_GE(s.window_reduced_s, 60.0);
  EXPECT_EQ(s.window_transitions, 2);
  // Low again: the time in the window counts again at once.
  Poll({5, 8});
  Poll({5, 8});
  EXPECT_TRUE(State().flapping);
}

TEST_F(FlapRule, TimeIsHeldAFewPollsAtMostAndTheWindowLetsGo) {
  Poll(kFull);
  Poll({5, 4});
  now += 1h;  // a poll an hour late (a suspended machine) does not count the hour
  counter.Observe({now, {{5, 4}, kFull}, std::nullopt, false}, rule);
  EXPECT_DOUBLE_EQ(State().reduced_s, 3.0);  // kMaxHeldPolls intervals
  for (int i = 0; i < 3; ++i) {
    Poll({5, 8});
    Poll(kFull);
  }
  EXPECT_TRUE(State().flapping);
  const std::uint64_t total = State().transitions;
  now += 11min;  // the window moves past them
  const LinkWatchState later = State();
  EXPECT_FALSE(later.flapping);
  EXPECT_EQ(later.window_transitions, 0);
  EXPECT_EQ(later.transitions, total);  // the totals stay
  EXPECT_EQ(later.last_seen, "");
}

TEST_F(FlapRule, AnUnreadableReadingCountsNothing) {
  Poll(kFull);
  Poll({0, 0});
  Poll({5, 8});
  Poll({0, 0});
  Poll(kFull);
  Poll(kFull);
  // x8 was seen (a second below capability), but no two readable readings in a row differ.
  EXPECT_EQ(State().transitions, 0u);
  EXPECT_DOUBLE_EQ(State().reduced_s, 1.0);
  // A device that does not answer reads all ones: x63 at 32 GT/s, no state of this link.
  for (int i = 0; i < 6; ++i) Poll(i % 2 ? LinkState{5, 63} : kFull);
  EXPECT_EQ(State().transitions, 0u);
}

// A reader the test scripts: each GPU's links as set, its traffic counter as set.
class ScriptedReader final : public probes::LinkStateReader {
 public:
  std::vector<probes::WatchedLink> Links(const probes::DeviceInfo&,
                                         const probes::LinkPath& path) override {
    return probes::WatchedLinks(path);
  }
  void Read(const std::vector<probes::WatchedGpu>& gpus,
            std::vector<probes::LinkWatchReading>& out) override {
    out.resize(gpus.size());
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      out[i].source = "scripted";
      out[i].problem = problem;
      out[i].links = {links[gpus[i].device.index]};
    }
    ++reads;
  }
  std::optional<probes::LinkTrafficCount> Traffic(const probes::DeviceInfo& device) override {
    ++traffic_reads;
    return probes::LinkTrafficCount{bytes[device.index], seconds};
  }
  std::string Describe() const override { return "scripted"; }

  std::map<int, LinkState> links;
  std::map<int, double> bytes;
  double seconds = 0;
  std::string problem;
  int reads = 0, traffic_reads = 0;
};

probes::LinkPath OneLink(const std::string& bdf) {
  probes::LinkPath path;
  path.links.push_back({bdf, 5, 16, 5, 16});
  return path;
}

TEST(LinkWatcher, PollsEveryGpuAndReportsWhatChanged) {
  fakes::FakeClock clock;
  ScriptedReader reader;
  std::vector<probes::DeviceInfo> devices(2);
  for (int i = 0; i < 2; ++i) {
    devices[i].index = i;
    devices[i].uuid = "GPU-" + std::to_string(i);
    reader.links[i] = kFull;
  }
  Settings settings;
  settings.link_watch_interval = 1000ms;
  std::vector<std::pair<int, LinkWatchState>> changes;
  bool probing = false;
  LinkWatchHooks hooks;
  hooks.probing_since = [&](int device) -> std::optional<SteadyTime> {
    if (!probing || device != 1) return std::nullopt;
    return clock.Now() - 50ms;
  };
  hooks.on_change = [&](const probes::DeviceInfo& d, const LinkWatchState& s) {
    changes.emplace_back(d.index, s);
  };
  LinkWatcher watch(reader, devices, settings, clock, hooks);
  watch.Poll();
  EXPECT_EQ(reader.reads, 0);  // no path yet: nothing to read
  watch.SetPath(devices[0], OneLink("0000:01:00.0"));
  watch.SetPath(devices[1], OneLink("0000:02:00.0"));
  for (int i = 0; i < 3; ++i) {
    clock.Advance(1s);
    watch.Poll();
  }
  EXPECT_EQ(reader.reads, 3);
  EXPECT_EQ(reader.traffic_reads, 0);  // every link at full speed: no traffic asked
  // Each GPU reported once, at its first reading (with the source it was read from).
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_TRUE(changes[0].second.watching);
  EXPECT_EQ(changes[0].second.transitions, 0u);
  changes.clear();
  EXPECT_TRUE(watch.State("GPU-0").watching);
  EXPECT_EQ(watch.State("GPU-0").source, "scripted");

  // GPU 1 drops to Gen2 under xferd's own probe, then flaps: reported as it counts.
  probing = true;
  for (int i = 0; i < 6; ++i) {
    reader.links[1] = i % 2 ? kFull : LinkState{2, 16};
    clock.Advance(1s);
    watch.Poll();
  }
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back().first, 1);
  EXPECT_TRUE(watch.State("GPU-1").flapping);
  EXPECT_FALSE(watch.State("GPU-0").flapping);
  EXPECT_GT(reader.traffic_reads, 0);  // asked around the slow readings

  // Ten minutes later the window has let them go: reported once more, as steady.
  probing = false;
  reader.links[1] = kFull;
  changes.clear();
  clock.Advance(11min);
  watch.Poll();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].second.flapping);

  // A link that cannot be read is said, and counts nothing.
  reader.problem = "0000:02:00.0/current_link_width: it is a FIFO, not a regular file";
  reader.links[1] = {};
  clock.Advance(1s);
  watch.Poll();
  EXPECT_EQ(watch.State("GPU-1").problem, reader.problem);
}

TEST(LinkWatcher, ReadsTrafficAroundASlowReadingToJudgeIt) {
  fakes::FakeClock clock;
  ScriptedReader reader;
  std::vector<probes::DeviceInfo> devices(1);
  devices[0].uuid = "GPU-0";
  Settings settings;
  settings.link_watch_interval = 1000ms;
  LinkWatcher watch(reader, devices, settings, clock, {});
  watch.SetPath(devices[0], OneLink("0000:01:00.0"));
  // 10 GB/s of traffic, the link at Gen2: below capability while data moves.
  for (int i = 0; i < 70; ++i) {
    reader.links[0] = {2, 16};
    reader.bytes[0] += 10e9;
    reader.seconds += 1;
    clock.Advance(1s);
    watch.Poll();
  }
  const LinkWatchState s = watch.State("GPU-0");
  EXPECT_GE(s.reduced_s, 60.0);
  EXPECT_TRUE(s.flapping);
  EXPECT_TRUE(s.low_only);

  // Now it flips every other poll, data moving all along: the full-speed readings between
  // the slow ones are judged too, so each flip is a transition.
  const std::uint64_t before = watch.State("GPU-0").transitions;
  for (int i = 0; i < 20; ++i) {
    reader.links[0] = i % 2 ? kFull : LinkState{2, 16};
    reader.bytes[0] += 10e9;
    reader.seconds += 1;
    clock.Advance(1s);
    watch.Poll();
  }
  EXPECT_GE(watch.State("GPU-0").transitions - before, 18u);
}

}  // namespace
}  // namespace xferd::core
