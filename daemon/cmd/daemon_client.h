// How a command on this host or another asks the running daemon for its status document
// (/api/v1/status): the health socket first, on the daemon's host, then HTTP where the
// daemon's config or the flags say, with its TLS and basic auth (docs/operations.md, "Where
// the daemon is"). `xferd health` and `xferd status` ask through this one client.
//
// Use:
//   DaemonClient client(options);          // throws platform::Error: a mistake in the flags
//   ArmWatchdog(client.timeout(), ...);
//   const StatusAnswer answer = client.FetchStatus();   // never throws
//   if (answer.document) ... else answer.problem.line
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "cmd/commands.h"
#include "cmd/health_report.h"
#include "config/config.h"

namespace xferd::cmd {

// The daemon's answer: its document, or why there is none (unknown, with the line to print:
// "UNKNOWN: xferd unreachable: ...", "UNKNOWN: ... refused the login (401): ...").
struct StatusAnswer {
  std::optional<std::string> document;
  HealthReport problem;
};

class DaemonClient {
 public:
  // Reads --timeout, the daemon's config file (as `xferd run` reads it) and where its
  // health socket is. Throws platform::Error naming the mistake and the fix.
  explicit DaemonClient(const DaemonClientOptions& options);

  std::chrono::milliseconds timeout() const { return timeout_; }

  // The health socket, then HTTP: each step shares the one deadline. Never throws: a
  // setting it cannot use (a password file others may read) is unknown, said in `problem`.
  StatusAnswer FetchStatus();

 private:
  DaemonClientOptions options_;
  std::chrono::milliseconds timeout_{};
  config::Config config_;
  std::optional<std::filesystem::path> socket_;
};

// The last resort against a hang the deadlines cannot reach (a name lookup stuck in the
// resolver): `timeout` + 2 s after this, SIGALRM writes `line` and a newline to `fd` and
// ends the process with `exit_code`.
void ArmWatchdog(std::chrono::milliseconds timeout, const std::string& line, int fd, int exit_code);

}  // namespace xferd::cmd
