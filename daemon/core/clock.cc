#include "core/clock.h"

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

}  // namespace xferd::core
