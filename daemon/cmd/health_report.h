// What `xferd health` makes of the daemon's status document (/api/v1/status): ok, a
// problem or unknown, and the one line that says which GPU, which series and which cause.
// Separate from the command (cmd/health_command.cc) so that every kind of answer, good or
// bad, is tested without a daemon (tests/unit/cmd/health_report_test.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/fault_codes.h"

namespace xferd::cmd {

// node-problem-detector's custom-plugin protocol: 0 OK, 1 NonOK, anything else Unknown.
enum class HealthOutcome { kOk = 0, kProblem = 1, kUnknown = 2 };

// The exit status: node-problem-detector's by default; with `nagios`, Nagios's plugin
// convention (0 OK, 2 CRITICAL, 3 UNKNOWN).
int HealthExitCode(HealthOutcome state, bool nagios);

struct HealthReport {
  HealthOutcome state = HealthOutcome::kUnknown;
  // One line, the most telling words first (node-problem-detector keeps the first 80
  // bytes): the verdict, the fault code and its recommended action (core/fault_codes.h),
  // then the GPU, the series, the cause and the figures:
  //   "DEGRADED XFERD-101/reboot gpu0 pinned h2d: link_downtrained, 5.10 GB/s < 19.85 band"
  //   "UNKNOWN XFERD-901/none: gpu1 stale: its probes have no current reading (...)"
  //   "OK: 2 GPUs within band"
  std::string line;
};

// The report for a state that is no verdict: "UNKNOWN XFERD-9xx/none: " and why.
HealthReport UnknownReport(core::NoVerdict state, const std::string& why);

struct HealthJudgeOptions {
  // A verdict whose last cycle ended longer ago than this is unknown; nullopt: the
  // daemon's own limit (3 intervals + the cycle budget, as /healthz).
  std::optional<double> stale_after_s;
  // Only this cause counts as a problem (a DiagnosisCause label); nullopt: any degraded GPU.
  std::optional<std::string> cause;
};

// Never throws: an answer it cannot read is unknown, with what was wrong.
HealthReport JudgeStatus(std::string_view body, const HealthJudgeOptions& options);

// "" when `body` is a status document this xferd reads (its version, the documented shape
// of the fields JudgeStatus reads); else what it is not, as JudgeStatus's line says it.
// `xferd status` shows a table of a document only where this is "".
std::string StatusDocumentProblem(std::string_view body);

// "XFERD OK - ", "XFERD CRITICAL - ", "XFERD UNKNOWN - " and the line: Nagios's form.
std::string NagiosLine(const HealthReport& report);

}  // namespace xferd::cmd
