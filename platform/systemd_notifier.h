// The one place that talks to systemd's notification socket (sd_notify): READY, STATUS,
// WATCHDOG, RELOADING, STOPPING. An interface, so tests can record what the daemon says.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string_view>

namespace xferd::platform {

class Notifier {
 public:
  virtual ~Notifier() = default;
  virtual void Ready() = 0;                        // READY=1
  virtual void Status(std::string_view text) = 0;  // STATUS=text (one line)
  virtual void Watchdog() = 0;                     // WATCHDOG=1
  virtual void Reloading() = 0;                    // RELOADING=1 + MONOTONIC_USEC
  virtual void Stopping() = 0;                     // STOPPING=1
  // WATCHDOG_USEC when systemd expects pings from this process; nullopt otherwise.
  virtual std::optional<std::chrono::microseconds> WatchdogInterval() const = 0;
};

// sd_notify through $NOTIFY_SOCKET; every call is a no-op when the variable is unset
// (not started by systemd), so the daemon needs no other switch.
std::unique_ptr<Notifier> MakeSystemdNotifier();

}  // namespace xferd::platform
