// The daemon's Service in-process on simulated time: the simulated device with the
// documented defaults, its timeline on a clock the test moves (PacedClock), so hours of
// cycles pass in seconds and the test looks at every surface at any simulated moment. For
// the SimulatedTime tests (service_test.cc, verdict_test.cc).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cmd/backend.h"
#include "cmd/service.h"
#include "exporter/exposition.h"
#include "testing/fakes.h"

namespace xferd::cmd::simulated {

using namespace std::chrono_literals;

// Time that runs only as far as the test lets it: the probe loop sleeps until then, so the
// test looks at the service at any simulated moment, and hours pass in seconds.
class PacedClock final : public core::Clock {
 public:
  core::SteadyTime Now() const override {
    std::lock_guard lock(mutex_);
    return now_;
  }
  bool SleepUntil(core::SteadyTime until, std::stop_token stop) override {
    std::unique_lock lock(mutex_);
    sleeping_until_ = until;
    changed_.notify_all();
    const bool woke = changed_.wait(lock, stop, [&] { return allowed_ >= until; });
    sleeping_until_.reset();
    changed_.notify_all();
    if (!woke) return false;
    now_ = std::max(now_, until);
    return true;
  }
  // A probe taking its (simulated) time.
  void Advance(std::chrono::nanoseconds d) {
    std::lock_guard lock(mutex_);
    now_ += std::chrono::duration_cast<core::SteadyTime::duration>(d);
  }
  // Lets time run to `t` and waits until the loop sleeps past it: all that was due by `t`
  // has run. False when the loop did not get there in `timeout` of real time.
  bool RunUntil(core::SteadyTime t, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    allowed_ = t;
    changed_.notify_all();
    if (!changed_.wait_for(lock, timeout,
                           [&] { return sleeping_until_ && *sleeping_until_ > allowed_; })) {
      return false;
    }
    now_ = std::max(now_, t);  // the loop slept through it
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  core::SteadyTime now_{std::chrono::hours(1)};
  core::SteadyTime allowed_{std::chrono::hours(1)};
  std::optional<core::SteadyTime> sleeping_until_;
};

// The value of the series of `name` with all of `labels` in the exposition; nullopt if none.
inline std::optional<double> Value(const std::string& text, const std::string& name,
                                   const std::vector<std::string>& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const std::string head = line.substr(0, line.rfind(' '));
    if (std::all_of(labels.begin(), labels.end(),
                    [&](const std::string& l) { return head.find(l) != std::string::npos; })) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return std::nullopt;
}

inline double Sum(const std::string& text, const std::string& name, const std::string& label) {
  double total = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) == 0 && line.find(label) != std::string::npos) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

// `xferd run --simulate` in-process with the documented defaults (interval 60 s, jitter
// 0.1, every mode at 64 MiB, max_duty_cycle 0.0025, consecutive_bad 3, burst_reserve 0.5 s):
// the simulated device (Gen4 x16) with no sleeping and its timeline on the paced clock.
struct SimulatedService {
  fakes::TempDir dir{"service"};
  PacedClock clock;
  fakes::FakeNotifier notifier;
  fakes::FakeSignals signals;
  config::Config config;
  std::unique_ptr<probes::SimBackend> sim;
  std::unique_ptr<Service> service;
  std::future<int> exit_code;
  core::SteadyTime t0;

  explicit SimulatedService(const std::function<void(config::Config&)>& adjust = {}) {
    config.listen_address = "127.0.0.1:0";
    config.state_dir = dir.path();
    config.simulate = true;
    config.sim.time_scale = 0;
    config.sim.clock = [this] { return clock.Now(); };
    config.sim.advance = [this](std::chrono::nanoseconds d) { clock.Advance(d); };
    if (adjust) adjust(config);
    sim = std::make_unique<probes::SimBackend>(config.sim);
    ServiceSeams seams;
    seams.clock = &clock;
    seams.notifier = &notifier;
    seams.signals = &signals;
    seams.reload = [this] { return config; };
    seams.make_busy = [this](const config::Config& c) { return MakeBusyDetector(c, sim.get()); };
    seams.on_reload = [this](const config::Config& c) { sim->SetFaults(c.sim.faults); };
    seams.link_errors = MakeLinkErrorReader(config, sim.get());
    service = std::make_unique<Service>(config, *sim, sim->Devices(), std::move(seams));
    t0 = clock.Now();
    exit_code = std::async(std::launch::async, [this] { return service->Run(); });
  }
  ~SimulatedService() {
    signals.Send(platform::Signal::Kind::kStop);
    exit_code.wait();
  }
  // Simulated seconds since the start.
  double Elapsed() const { return std::chrono::duration<double>(clock.Now() - t0).count(); }
  bool Advance(std::chrono::seconds by) { return clock.RunUntil(clock.Now() + by); }
  std::string Scrape() { return exporter::RenderExposition({service->registry()}); }
  bool PinnedDegraded() {
    return Value(Scrape(), "xferd_bandwidth_degraded",
                 {"mode=\"pinned\"", "direction=\"h2d\"", "gpu=\"0\""})
               .value_or(0) == 1;
  }
};

}  // namespace xferd::cmd::simulated
