#include "platform/signals.h"

#include <signal.h>

#include <ctime>

namespace xferd::platform {
namespace {

class ProcessSignals final : public SignalSource {
 public:
  ProcessSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGHUP);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }

  Signal Wait(std::chrono::milliseconds timeout) override {
    timespec wait{static_cast<time_t>(timeout.count() / 1000),
                  static_cast<long>(timeout.count() % 1000 * 1000000)};
    siginfo_t info{};
    switch (sigtimedwait(&set_, &info, &wait)) {
      case SIGTERM: return {Signal::Kind::kStop, "SIGTERM"};
      case SIGINT: return {Signal::Kind::kStop, "SIGINT"};
      case SIGHUP: return {Signal::Kind::kReload, "SIGHUP"};
      default: return {};
    }
  }

 private:
  sigset_t set_;
};

}  // namespace

std::unique_ptr<SignalSource> TakeProcessSignals() {
  return std::make_unique<ProcessSignals>();
}

}  // namespace xferd::platform
