// The daemon's Service in-process, with the shared fakes for the backend, systemd and the
// signals: what systemd is told and when (READY, RELOADING, watchdog pings), what a reload
// keeps, and how fast a stop ends it.
#include "cmd/service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "cmd/backend.h"
#include "exporter/exposition.h"
#include "testing/fakes.h"
#include "unit/cmd/simulated_service.h"

namespace xferd::cmd {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Kind = platform::Signal::Kind;
using Messages = std::vector<std::string>;
using simulated::SimulatedService;
using simulated::Sum;
using simulated::Value;

// Fast cycles of one small pinned probe pair on one fake GPU.
config::Config FastConfig(const std::filesystem::path& state_dir) {
  config::Config c;
  c.listen_address = "127.0.0.1:0";
  c.state_dir = state_dir;
  c.interval = 50ms;
  c.jitter = 0;
  c.modes = {probes::TransferMode::kPinned};
  c.bidirectional = false;
  c.sizes = {1 << 20};
  c.iterations = 2;
  c.warmup = 0;
  c.probe_deadline = 100ms;
  c.cycle_budget = 40ms;
  c.max_duty_cycle = 1.0;
  c.busy_detection = false;
  return c;
}

// Index of the first message equal to `what` at or after `from`; -1 when none.
int Find(const Messages& m, const std::string& what, int from = 0) {
  for (int i = from; i < static_cast<int>(m.size()); ++i) {
    if (m[i] == what) return i;
  }
  return -1;
}

struct Harness {
  fakes::TempDir dir{"service"};
  fakes::FakeBackend backend{nullptr, 1};
  fakes::FakeNotifier notifier;
  fakes::FakeSignals signals;
  core::SteadyClock clock;
  std::function<config::Config()> reload;
  std::vector<config::Config> reloaded;  // what the reload hook was handed, in order
  std::unique_ptr<Service> service;
  std::future<int> exit_code;

  explicit Harness(std::optional<std::chrono::microseconds> watchdog = std::nullopt)
      : notifier(watchdog) {}

  bool reload_at_start = false;

  void Start(const config::Config& config) {
    ServiceSeams seams;
    seams.reload_at_start = reload_at_start;
    seams.clock = &clock;
    seams.notifier = &notifier;
    seams.signals = &signals;
    seams.reload = [this] { return reload(); };
    seams.on_reload = [this](const config::Config& c) { reloaded.push_back(c); };
    seams.make_busy = [](const config::Config&) {
      return core::MakeDisabledBusyDetector("off (test)");
    };
    service = std::make_unique<Service>(config, backend, backend.Devices(), std::move(seams));
    exit_code = std::async(std::launch::async, [this] { return service->Run(); });
  }

  bool WaitFor(const std::function<bool(const Messages&)>& done, std::chrono::milliseconds t = 5s) {
    return notifier.WaitFor(done, t);
  }

  // Sends a reload once READY, and waits for this reload's RELOADING and the READY after
  // it (not an earlier reload's: the test may change what `reload` returns right after).
  void Reload() {
    ASSERT_TRUE(WaitFor([](const Messages& m) { return Find(m, "READY") >= 0; }));
    const int seen = static_cast<int>(notifier.Messages().size());
    signals.Send(Kind::kReload);
    ASSERT_TRUE(WaitFor([seen](const Messages& m) {
      const int reloading = Find(m, "RELOADING", seen);
      return reloading >= 0 && Find(m, "READY", reloading) > reloading;
    }));
  }

  std::string Scrape() { return exporter::RenderExposition({service->registry()}); }

  int Stop() {
    signals.Send(Kind::kStop);
    return exit_code.get();
  }
};

TEST(Service, ReadyOnlyAfterTheFirstCycle) {
  Harness h;
  h.backend.Hold();  // the first probe does not return until released
  h.Start(FastConfig(h.dir.path()));
  while (!h.backend.Entered()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(h.notifier.Count("READY"), 0) << "READY before any cycle finished";
  h.backend.Release();
  ASSERT_TRUE(h.WaitFor([](const Messages& m) { return Find(m, "READY") >= 0; }));
  const Messages m = h.notifier.Messages();
  const int ready = Find(m, "READY");
  EXPECT_EQ(h.Stop(), 0);
  const Messages all = h.notifier.Messages();
  ASSERT_GT(static_cast<int>(all.size()), ready + 1);
  // Then the STATUS of the latest cycle (a fast one may have finished meanwhile).
  EXPECT_THAT(all[ready + 1], ::testing::MatchesRegex("STATUS=cycle [0-9]+: ok: .*"));
  EXPECT_EQ(all.back(), "STOPPING");
}

TEST(Service, ReloadSaysReloadingThenReadyAndAppliesTheNewConfig) {
  Harness h;
  config::Config next = FastConfig(h.dir.path());
  next.sizes = {2 << 20};
  h.reload = [&] { return next; };
  h.Start(FastConfig(h.dir.path()));
  h.Reload();
  // What follows the file (the simulated device's faults) was handed the new config.
  ASSERT_EQ(h.reloaded.size(), 1u);
  EXPECT_EQ(h.reloaded[0].sizes, (std::vector<std::uint64_t>{2 << 20}));
  // Cycles after the reload probe the new size.
  const auto probed_2mib = [&] {
    const auto ran = h.backend.Ran();
    return std::any_of(ran.begin(), ran.end(),
                       [](const probes::ProbeSpec& s) { return s.size_bytes == 2u << 20; });
  };
  for (int i = 0; i < 500 && !probed_2mib(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(probed_2mib());
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 1"));
  EXPECT_EQ(h.Stop(), 0);
}

// The review: a SIGHUP while the configuration was first read was dropped (the file may
// have changed after it was read), and one before the signals were taken ended the daemon.
// A reload asked during the start is done once the service runs, and systemd hears READY
// only after the first cycle, with no RELOADING before it.
TEST(Service, AReloadAskedDuringTheStartIsDoneOnceItRuns) {
  Harness h;
  config::Config next = FastConfig(h.dir.path());
  next.sizes = {2 << 20};
  h.reload = [&] { return next; };
  h.reload_at_start = true;
  h.Start(FastConfig(h.dir.path()));
  ASSERT_TRUE(h.WaitFor([](const Messages& m) { return Find(m, "READY") >= 0; }));
  for (int i = 0; i < 500 && h.reloaded.empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(h.Stop(), 0);
  ASSERT_EQ(h.reloaded.size(), 1u);
  EXPECT_EQ(h.reloaded[0].sizes, (std::vector<std::uint64_t>{2 << 20}));
  const Messages m = h.notifier.Messages();
  const int ready = Find(m, "READY");
  EXPECT_EQ(Find(m, "RELOADING"), -1) << "no RELOADING before READY: the reload came first";
  EXPECT_EQ(Find(m, "READY", ready + 1), -1) << "READY once, after the first cycle";
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 1"));
}

TEST(Service, BadReloadKeepsTheRunningConfigAndSetsTheMetricToZero) {
  Harness h;
  h.reload = []() -> config::Config {
    throw config::ConfigError("xferd.toml", 3, "probe.intervl", "unknown key", "remove it");
  };
  h.Start(FastConfig(h.dir.path()));
  h.Reload();
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 0"));
  EXPECT_TRUE(h.reloaded.empty()) << "a bad file reaches nothing that follows the config";
  // Still probing, with the running config.
  const std::size_t before = h.backend.Ran().size();
  for (int i = 0; i < 500 && h.backend.Ran().size() < before + 4; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  const auto ran = h.backend.Ran();
  EXPECT_GE(ran.size(), before + 4);
  for (const auto& spec : ran) EXPECT_EQ(spec.size_bytes, 1u << 20);
  EXPECT_EQ(h.Stop(), 0);
}

// A reload that would turn basic auth off (the web config emptied, or no longer named) is
// refused: the running configuration stays and the reload metric goes to 0. Said on
// purpose (web.reload_may_remove_protection), the same reload is applied.
TEST(Service, AReloadThatWouldDropAuthIsRefusedUnlessSaidOnPurpose) {
  Harness h;
  config::Config protected_config = FastConfig(h.dir.path());
  // bcrypt of "test-password", cost 10.
  protected_config.web.basic_auth_users["prometheus"] =
      "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi";
  config::Config unprotected = FastConfig(h.dir.path());
  h.reload = [&] { return unprotected; };
  h.Start(protected_config);
  h.Reload();
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 0"));
  // Users changed but auth still on: applied.
  unprotected = protected_config;
  unprotected.web.basic_auth_users = {
      {"grafana", protected_config.web.basic_auth_users.begin()->second}};
  h.Reload();
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 1"));
  unprotected = FastConfig(h.dir.path());
  unprotected.reload_may_remove_protection = true;
  h.Reload();
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 1"));
  EXPECT_EQ(h.Stop(), 0);
}

// Temporary files an earlier run left when it was killed mid-write (kill -9, power loss)
// are removed once the textfile is written: they used to stay for good.
TEST(Service, TextfileLeftoversOfAnEarlierRunAreRemovedAtStart) {
  Harness h;
  config::Config c = FastConfig(h.dir.path() / "state");
  c.textfile_path = h.dir.path() / "xferd.prom";
  for (const char* name : {".xferd.prom.tmp.Ab12Cd", ".xferd.prom.tmp.x9y8z7"}) {
    h.dir.Write(name, "# HELP xferd_ half a file");
  }
  const auto other = h.dir.Write(".node.prom.tmp.Ab12Cd", "another exporter's");
  h.Start(c);
  ASSERT_TRUE(h.WaitFor([](const Messages& m) { return Find(m, "READY") >= 0; }));
  for (int i = 0; i < 200 && !std::filesystem::exists(c.textfile_path); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(h.Stop(), 0);
  EXPECT_TRUE(std::filesystem::exists(c.textfile_path));
  EXPECT_FALSE(std::filesystem::exists(h.dir.path() / ".xferd.prom.tmp.Ab12Cd"));
  EXPECT_FALSE(std::filesystem::exists(h.dir.path() / ".xferd.prom.tmp.x9y8z7"));
  EXPECT_TRUE(std::filesystem::exists(other));
}

// A probe stuck in a device call past its deadline and the grace: the watchdog pings
// stop, so systemd restarts the service; they resume once the call returns.
TEST(Service, StalledProbeStopsWatchdogPings) {
  Harness h(std::chrono::microseconds(200000));  // a ping every 100 ms
  h.Start(FastConfig(h.dir.path()));
  ASSERT_TRUE(
      h.WaitFor([](const Messages& m) { return std::count(m.begin(), m.end(), "WATCHDOG") >= 2; }));
  h.backend.Hold();
  ASSERT_TRUE(h.WaitFor(
      [](const Messages& m) {
        return std::any_of(m.begin(), m.end(),
                           [](const std::string& s) { return s.starts_with("STATUS=HUNG"); });
      },
      10s));
  const int pings = h.notifier.Count("WATCHDOG");
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(h.notifier.Count("WATCHDOG"), pings) << "pinged while a probe was hung";
  h.backend.Release();
  EXPECT_TRUE(h.WaitFor(
      [&](const Messages& m) { return std::count(m.begin(), m.end(), "WATCHDOG") > pings; }));
  EXPECT_EQ(h.Stop(), 0);
}

// SIGTERM in the middle of a probe: the probe is cancelled and Run returns well within the
// 2 s systemd is promised.
TEST(Service, StopMidProbeEndsWithinTheBound) {
  Harness h;
  h.backend.Hold();
  h.Start(FastConfig(h.dir.path()));
  while (!h.backend.Entered()) std::this_thread::sleep_for(1ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(h.Stop(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(h.notifier.Count("READY"), 0);
  EXPECT_EQ(h.notifier.Messages().back(), "STOPPING");
}

// ---- The simulated device on simulated time, with the default config -----------------

// How long after `fault` (applied after 30 healthy minutes) pinned h2d reads DEGRADED, in
// simulated seconds (in 1 s steps); -1 when not within `limit`.
double SecondsToDegraded(SimulatedService& s, std::vector<probes::SimFault> fault,
                         std::chrono::seconds limit = 600s) {
  EXPECT_TRUE(s.clock.RunUntil(s.t0 + 1800s, 60s));
  EXPECT_FALSE(s.PinnedDegraded());
  s.sim->SetFaults(std::move(fault));
  const double from = s.Elapsed();
  while (s.Elapsed() - from < std::chrono::duration<double>(limit).count()) {
    if (!s.Advance(1s)) return -1;
    if (s.PinnedDegraded()) return s.Elapsed() - from;
  }
  return -1;
}

// Seconds (simulated) from `faults` to DEGRADED, printed as `what`; a failure unless within
// five minutes, the bound the defaults are chosen for.
double DegradedWithinFiveMinutes(SimulatedService& s, std::vector<probes::SimFault> faults,
                                 const char* what) {
  const double after = SecondsToDegraded(s, std::move(faults));
  std::printf("%s: DEGRADED %.0f s (simulated) after the fault\n", what, after);
  EXPECT_GE(after, 0) << "not DEGRADED within 10 minutes";
  EXPECT_LE(after, 300);
  return after;
}

TEST(SimulatedTime, ADegradeFaultIsDegradedWithinFiveMinutesWithTheDefaults) {
  SimulatedService s;
  DegradedWithinFiveMinutes(s, {{probes::SimFault::Kind::kDegrade, -1, 0.5}}, "degrade x0.5");
  const std::string text = s.Scrape();
  EXPECT_EQ(Value(text, "xferd_diagnosis", {"cause=\"below_band\""}), 1.0);
  // Found by confirmation rounds, not by waiting three cycles: at most two cycles ran.
  EXPECT_LE(Sum(text, "xferd_cycles_total", "result="), 30 + 2 + 1);
}

TEST(SimulatedTime, ADowntrainedLinkIsDegradedWithinFiveMinutesAndNamed) {
  SimulatedService s;
  probes::SimFault fault{probes::SimFault::Kind::kDownTrain};
  fault.width = 8;
  fault.gen = 4;
  DegradedWithinFiveMinutes(s, {fault}, "downtrain to x8");
  EXPECT_EQ(Value(s.Scrape(), "xferd_diagnosis", {"cause=\"link_downtrained\""}), 1.0);
}

// Replays at 120 a minute (15 times DCGM's 8) that cost 40 % of the bandwidth: degraded
// as fast as any other loss, and the cause says it was the link erring.
TEST(SimulatedTime, LinkErrorsThatCostBandwidthAreNamedWithTheDefaults) {
  SimulatedService s;
  probes::SimFault fault{probes::SimFault::Kind::kLinkErrors};
  fault.counter = probes::SimFault::ErrorCounter::kReplay;
  fault.rate = 2;
  fault.factor = 0.6;
  const double after =
      DegradedWithinFiveMinutes(s, {fault}, "replays 120/min and 0.6 of the bandwidth");
  const std::string text = s.Scrape();
  EXPECT_EQ(Value(text, "xferd_diagnosis", {"cause=\"link_errors\""}), 1.0);
  EXPECT_GT(Value(text, "xferd_pcie_replays_total", {"gpu=\"0\""}).value_or(0), 2 * 0.8 * after);
  EXPECT_EQ(Value(text, "xferd_pcie_error_source_readable", {"source=\"nvml_replay\""}), 1.0);
}

// The same replays on a link whose bandwidth holds: no verdict moves and no cause is named
// (XferdPcieLinkErrorsRising speaks for it); a healthy path never shows the cause either.
TEST(SimulatedTime, LinkErrorsOnALinkThatReadsWellNameNoCause) {
  SimulatedService s;
  const auto cause = [&] {
    return Value(s.Scrape(), "xferd_diagnosis", {"cause=\"link_errors\""}).value_or(-1);
  };
  for (int minute = 0; minute < 30; ++minute) {
    ASSERT_TRUE(s.Advance(60s));
    EXPECT_EQ(cause(), 0);
  }
  probes::SimFault fault{probes::SimFault::Kind::kLinkErrors};
  fault.counter = probes::SimFault::ErrorCounter::kReplay;
  fault.rate = 2;
  s.sim->SetFaults({fault});
  for (int minute = 0; minute < 30; ++minute) {
    ASSERT_TRUE(s.Advance(60s));
    EXPECT_EQ(cause(), 0);
    EXPECT_FALSE(s.PinnedDegraded());
  }
  EXPECT_GT(Value(s.Scrape(), "xferd_pcie_replays_total", {"gpu=\"0\""}).value_or(0), 3000);
}

// Two hours beside a workload that moves 20 GB/s in bursts 30 % of the time, checked every
// 5 s (a verdict needs three readings at least 5 s apart to flip, so none is missed).
void NoFalseAlarmBesideIntermittentTraffic(bool busy_detection) {
  SimulatedService s([&](config::Config& c) {
    c.busy_detection = busy_detection;
    c.sim.foreign_traffic = {20e9, 0.3, probes::Direction::kH2D};
  });
  int degraded_seen = 0;
  std::optional<double> lowest_baseline;  // of pinned h2d, once learned
  for (int step = 0; step < 2 * 3600 / 5; ++step) {
    ASSERT_TRUE(s.Advance(5s));
    const std::string text = s.Scrape();
    degraded_seen += static_cast<int>(Sum(text, "xferd_bandwidth_degraded", "gpu=\"0\""));
    if (auto b = Value(text, "xferd_bandwidth_baseline_bytes_per_second",
                       {"mode=\"pinned\"", "direction=\"h2d\""})) {
      lowest_baseline = std::min(lowest_baseline.value_or(*b), *b);
    }
  }
  const std::string text = s.Scrape();
  const double contended = Sum(text, "xferd_probe_runs_total", "result=\"contended\"");
  const double ok = Sum(text, "xferd_probe_runs_total", "result=\"ok\"");
  std::printf(
      "busy detection %s: %.0f ok, %.0f contended probes in 2 h; lowest pinned h2d "
      "baseline %.2f GB/s; DEGRADED seen %d times\n",
      busy_detection ? "on" : "off", ok, contended, lowest_baseline.value_or(0) / 1e9,
      degraded_seen);
  EXPECT_EQ(degraded_seen, 0);
  // With busy detection off the probes meet the bursts; with it on, a cycle starts only
  // between bursts and a burst rarely begins in the ~0.1 s its probes take.
  if (!busy_detection) {
    EXPECT_GT(contended, 0);
  }
  // Alone the simulated Gen4 x16 pinned h2d reads 0.80 x 31.5 = 25.2 GB/s: a baseline was
  // learned, and never from a halved reading.
  ASSERT_TRUE(lowest_baseline.has_value()) << "no pinned h2d baseline in two hours";
  EXPECT_GT(*lowest_baseline, 0.95 * 25.2e9);
  // The link was read around the probes: the foreign traffic is published (0 or more); an
  // unreadable link would have no series.
  const auto foreign = Value(text, "xferd_foreign_traffic_bytes_per_second", {"direction=\"h2d\""});
  ASSERT_TRUE(foreign.has_value()) << "no xferd_foreign_traffic_bytes_per_second series";
  EXPECT_GE(*foreign, 0);
  EXPECT_EQ(Value(text, "xferd_gpu_load_readable", {"gpu=\"0\""}), 1.0);
}

TEST(SimulatedTime, IntermittentForeignTrafficRaisesNoAlarmWithBusyDetectionOn) {
  NoFalseAlarmBesideIntermittentTraffic(true);
}

TEST(SimulatedTime, IntermittentForeignTrafficRaisesNoAlarmWithBusyDetectionOff) {
  NoFalseAlarmBesideIntermittentTraffic(false);
}

}  // namespace
}  // namespace xferd::cmd
