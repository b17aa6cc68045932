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

}  // namespace xferd::core
