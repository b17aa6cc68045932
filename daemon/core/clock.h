// Time as the scheduler and the service see it; tests inject a fake (testing/fakes.h).
#pragma once

#include <chrono>
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

// A duration in a message: "40 ms" below a second, where "0.0 s" would say nothing, else
// seconds with `decimals` places ("1.5 s").
std::string FormatSeconds(double seconds, int decimals = 1);

}  // namespace xferd::core
