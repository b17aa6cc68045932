#include "platform/abandonable_call.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace xferd::platform {
namespace {

struct Outcome {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
};

}  // namespace

std::optional<Signal> CallUnlessStopped(std::function<void()> work, SignalSource& signals,
                                        bool* reload_asked) {
  // Shared with the thread, which may outlive this call.
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, work = std::move(work)] {
    std::exception_ptr error;
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    // The error moves into the outcome and the caller moves it out again: no reference to
    // it stays on this thread, so the exception is released by the thread that caught it
    // (shared references across threads are invisible to ThreadSanitizer's view of
    // libstdc++'s reference count, and reported as a race).
    std::lock_guard lock(outcome->mutex);
    outcome->error = std::move(error);
    outcome->done = true;
    outcome->finished.notify_all();
  }).detach();

  // Short waits on each: the work usually takes well under a millisecond.
  constexpr auto kPoll = std::chrono::milliseconds(20);
  for (;;) {
    {
      std::unique_lock lock(outcome->mutex);
      if (outcome->finished.wait_for(lock, kPoll, [&] { return outcome->done; })) {
        if (std::exception_ptr error = std::exchange(outcome->error, nullptr)) {
          lock.unlock();
          std::rethrow_exception(error);
        }
        return std::nullopt;
      }
    }
    const Signal signal = signals.Wait(std::chrono::milliseconds(0));
    if (signal.kind == Signal::Kind::kStop) return signal;
    if (signal.kind == Signal::Kind::kReload && reload_asked != nullptr) *reload_asked = true;
  }
}

}  // namespace xferd::platform
