#include "platform/abandonable_call.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace xferd::platform {
namespace {

struct Outcome {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
};

}  // namespace

bool CallUnlessStopped(std::function<void()> work, const sigset_t& stop_signals, int* signal) {
  // Shared with the thread, which may outlive this call.
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, work = std::move(work)] {
    std::exception_ptr error;
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(outcome->mutex);
    outcome->error = error;
    outcome->done = true;
    outcome->finished.notify_all();
  }).detach();

  constexpr auto kSignalPoll = std::chrono::milliseconds(20);
  for (;;) {
    {
      std::unique_lock lock(outcome->mutex);
      if (outcome->finished.wait_for(lock, kSignalPoll, [&] { return outcome->done; })) {
        if (outcome->error) std::rethrow_exception(outcome->error);
        return true;
      }
    }
    const timespec now{0, 0};
    siginfo_t info{};
    const int sig = sigtimedwait(&stop_signals, &info, &now);
    if (sig > 0) {
      if (signal != nullptr) *signal = sig;
      return false;
    }
  }
}

}  // namespace xferd::platform
