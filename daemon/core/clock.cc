#include "core/clock.h"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>

namespace xferd::core {

bool SteadyClock::SleepUntil(SteadyTime until, std::stop_token stop) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  // Nothing notifies cv: only the deadline or a stop request (which wakes it) end the wait.
  cv.wait_until(lock, stop, until, [] { return false; });
  return !stop.stop_requested();
}

std::string FormatSeconds(double seconds, int decimals) {
  if (seconds > 0 && seconds < 1) return fmt::format("{:.3g} ms", seconds * 1e3);
  return fmt::format("{:.{}f} s", seconds, decimals);
}

SimulatedClock::SimulatedClock(double speedup)
    : speedup_(speedup > 0 ? speedup : 1.0), now_(std::chrono::steady_clock::now()) {}

SteadyTime SimulatedClock::Now() const {
  std::lock_guard lock(mutex_);
  if (!sleeping_until_) return now_;
  // Asleep: simulated time runs at `speedup` x real time up to the wake-up.
  const auto real = std::chrono::steady_clock::now() - sleep_began_;
  const auto simulated = std::chrono::duration_cast<SteadyTime::duration>(real * speedup_);
  return std::min(*sleeping_until_, now_ + simulated);
}

bool SimulatedClock::SleepUntil(SteadyTime until, std::stop_token stop) {
  std::unique_lock lock(mutex_);
  if (until > now_) {
    const auto real = std::chrono::duration<double>(until - now_) / speedup_;
    sleeping_until_ = until;
    sleep_began_ = std::chrono::steady_clock::now();
    wake_.wait_for(lock, stop, real, [] { return false; });
    const auto slept = std::chrono::duration_cast<SteadyTime::duration>(
        (std::chrono::steady_clock::now() - sleep_began_) * speedup_);
    sleeping_until_.reset();
    if (stop.stop_requested()) {
      now_ = std::min(until, now_ + slept);
      return false;
    }
    now_ = std::max(now_, until);
  }
  return !stop.stop_requested();
}

void SimulatedClock::Advance(std::chrono::nanoseconds by) {
  std::lock_guard lock(mutex_);
  if (by.count() > 0) now_ += std::chrono::duration_cast<SteadyTime::duration>(by);
}

}  // namespace xferd::core
