#include "platform/systemd_notifier.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include <cstdint>
#include <string>

namespace xferd::platform {
namespace {

class SystemdNotifier final : public Notifier {
 public:
  SystemdNotifier() {
    std::uint64_t usec = 0;
    // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID (if set) is this process.
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
      watchdog_ = std::chrono::microseconds(usec);
    }
  }

  void Ready() override { Send("READY=1"); }
  void Status(std::string_view text) override {
    std::string line = "STATUS=";
    // STATUS is one line; a newline would start a new assignment.
    for (char c : text) line.push_back(c == '\n' ? ' ' : c);
    Send(line);
  }
  void Watchdog() override { Send("WATCHDOG=1"); }
  void Reloading() override {
    // systemd (253+, and documented for notify-reload) wants the monotonic time of the
    // reload start with RELOADING=1; older systemd ignores the extra field.
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const auto usec = static_cast<unsigned long long>(ts.tv_sec) * 1000000ull +
                      static_cast<unsigned long long>(ts.tv_nsec) / 1000ull;
    Send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
  }
  void Stopping() override { Send("STOPPING=1"); }
  std::optional<std::chrono::microseconds> WatchdogInterval() const override { return watchdog_; }

 private:
  void Send(const std::string& message) {
    const int rc = sd_notify(0, message.c_str());
    if (rc < 0 && !warned_) {
      // Said once: a broken socket would otherwise flood the log every watchdog tick.
      warned_ = true;
      spdlog::warn("sd_notify failed ({}); systemd will not hear from xferd", -rc);
    }
  }

  std::optional<std::chrono::microseconds> watchdog_;
  bool warned_ = false;
};

}  // namespace

std::unique_ptr<Notifier> MakeSystemdNotifier() {
  return std::make_unique<SystemdNotifier>();
}

}  // namespace xferd::platform
