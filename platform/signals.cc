#include "platform/signals.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

namespace xferd::platform {
namespace {

sigset_t ProcessSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// The kernel's sigset is _NSIG / 8 bytes, the first bytes of glibc's sigset_t.
constexpr long kKernelSigsetBytes = _NSIG / 8;

class ProcessSignals final : public SignalSource {
 public:
  ProcessSignals() : set_(ProcessSignalSet()) {
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

void BlockProcessSignals() {
  // The system call itself, not pthread_sigmask: this runs before the C library and any
  // sanitizer runtime have initialised, where their wrappers may not be usable yet.
  const sigset_t set = ProcessSignalSet();
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, nullptr, kKernelSigsetBytes);
}

void UnblockProcessSignals() {
  const sigset_t set = ProcessSignalSet();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace xferd::platform
