// The process signals the daemon obeys, taken synchronously by the thread that waits for
// them (no handler runs on another thread). An interface, so tests can stop and reload a
// service without signalling the test process.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace xferd::platform {

struct Signal {
  enum class Kind { kNone, kStop, kReload };
  Kind kind = Kind::kNone;
  std::string name;  // "SIGTERM", "SIGINT", "SIGHUP": for the log
};

class SignalSource {
 public:
  virtual ~SignalSource() = default;
  // The next signal, or kNone after `timeout`.
  virtual Signal Wait(std::chrono::milliseconds timeout) = 0;
};

// SIGTERM and SIGINT (stop) and SIGHUP (reload), blocked in the calling thread and so in
// every thread it starts afterwards; SIGPIPE ignored (a scraper that hangs up mid-response
// must not kill the daemon). Call it before starting any thread. Signals that came while
// they were blocked (BlockProcessSignals) are waiting for the first Wait.
std::unique_ptr<SignalSource> TakeProcessSignals();

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, with nothing but a system call:
// safe before anything else of the process has run (the executable calls it from its
// .preinit_array, before any library's initialiser: a SIGHUP 1 ms after the start used to
// end the daemon, its default action). A signal sent meanwhile waits, blocked, for
// TakeProcessSignals' Wait, or for UnblockProcessSignals.
void BlockProcessSignals();
// Undoes it, for a command that does not take signals itself (probe, health, ...): what came
// while they were blocked is delivered now, with its default action.
void UnblockProcessSignals();

}  // namespace xferd::platform
