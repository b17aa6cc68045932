// The daemon's Service in-process, with the shared fakes for the backend, systemd and the
// signals: what systemd is told and when (READY, RELOADING, watchdog pings), what a reload
// keeps, and how fast a stop ends it.
#include "cmd/service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "exporter/exposition.h"
#include "testing/fakes.h"

namespace xferd::cmd {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Kind = platform::Signal::Kind;
using Messages = std::vector<std::string>;

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "xferd-service-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

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
  TempDir dir;
  fakes::FakeBackend backend{nullptr, 1};
  fakes::FakeNotifier notifier;
  fakes::FakeSignals signals;
  core::SteadyClock clock;
  std::function<config::Config()> reload;
  std::unique_ptr<Service> service;
  std::future<int> exit_code;

  explicit Harness(std::optional<std::chrono::microseconds> watchdog = std::nullopt)
      : notifier(watchdog) {}

  void Start(const config::Config& config) {
    ServiceSeams seams;
    seams.clock = &clock;
    seams.notifier = &notifier;
    seams.signals = &signals;
    seams.reload = [this] { return reload(); };
    seams.make_busy = [](const config::Config&) {
      return core::MakeDisabledBusyDetector("off (test)");
    };
    service = std::make_unique<Service>(config, backend, backend.Devices(), std::move(seams));
    exit_code = std::async(std::launch::async, [this] { return service->Run(); });
  }

  bool WaitFor(const std::function<bool(const Messages&)>& done, std::chrono::milliseconds t = 5s) {
    return notifier.WaitFor(done, t);
  }

  // Sends a reload once READY, and waits for RELOADING and the READY after it.
  void Reload() {
    ASSERT_TRUE(WaitFor([](const Messages& m) { return Find(m, "READY") >= 0; }));
    signals.Send(Kind::kReload);
    ASSERT_TRUE(WaitFor([](const Messages& m) {
      const int reloading = Find(m, "RELOADING");
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

TEST(Service, BadReloadKeepsTheRunningConfigAndSetsTheMetricToZero) {
  Harness h;
  h.reload = []() -> config::Config {
    throw config::ConfigError("xferd.toml", 3, "probe.intervl", "unknown key", "remove it");
  };
  h.Start(FastConfig(h.dir.path()));
  h.Reload();
  EXPECT_THAT(h.Scrape(), HasSubstr("xferd_config_last_reload_successful 0"));
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

}  // namespace
}  // namespace xferd::cmd
