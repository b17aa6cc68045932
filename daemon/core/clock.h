// Time as the scheduler and the service see it; tests inject a fake (testing/fakes.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

namespace xferd::core {

using SteadyTime = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime Now() const = 0;
  // Wait until `until` or until `stop` is requested; false when stopped.
  virtual bool SleepUntil(SteadyTime until, std::stop_token stop) = 0;
};

class SteadyClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  bool SleepUntil(SteadyTime until, std::stop_token stop) override;
};

// Simulated time for the simulated device ([simulate] speedup): the clock runs `speedup`
// times faster than real time while the daemon waits, and a probe moves it by exactly the
// simulated time it took (Advance, from the simulated device), however long the host took
// to compute it. So the real binary runs its default 60 s cycles, allowance and
// confirmation delays in a fraction of the time, and a loaded test machine does not make
// a probe late. Now() starts at the steady clock's now. Thread-safe.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(double speedup);
  SteadyTime Now() const override;
  bool SleepUntil(SteadyTime until, std::stop_token stop) override;
  void Advance(std::chrono::nanoseconds by);

 private:
  const double speedup_;
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;  // only a stop request wakes a sleeper early
  SteadyTime now_;
  std::optional<SteadyTime> sleeping_until_;           // while SleepUntil waits
  std::chrono::steady_clock::time_point sleep_began_;  // real time it began
};

// A duration in a message: "40 ms" below a second, where "0.0 s" would say nothing, else
// seconds with `decimals` places ("1.5 s").
std::string FormatSeconds(double seconds, int decimals = 1);

}  // namespace xferd::core
