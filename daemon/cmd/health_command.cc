// `xferd health`: asks the local daemon for its status (/api/v1/status) and prints one line
// with an exit status a node-problem-detector plugin, a Slurm health check or a Nagios check
// acts on (cmd/health_report.h). Where the daemon listens, whether it speaks TLS and whether
// it wants a login come from the config file `xferd run` reads; flags override each
// (cmd/daemon_client.h, which `xferd status` asks through too).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cmd/commands.h"
#include "cmd/daemon_client.h"
#include "cmd/health_report.h"
#include "config/units.h"
#include "core/diagnosis.h"
#include "platform/printable.h"

namespace xferd::cmd {
namespace {

// --stale-after and --cause, into what judges the answer.
void ReadJudgeFlags(const HealthCommandOptions& options, HealthJudgeOptions& judge) {
  if (options.stale_after) {
    const auto stale = config::ParseDuration(*options.stale_after);
    if (!stale || stale->count() <= 0) {
      throw UsageError("--stale-after \"" + platform::Printable(*options.stale_after, 40) +
                       "\": give a duration, e.g. 5m");
    }
    judge.stale_after_s = std::chrono::duration<double>(*stale).count();
  }
  if (options.cause) {
    // In the order they lead (core::CauseRank); the notes apart: they name no fault.
    std::vector<core::DiagnosisCause> ranked(core::kAllDiagnosisCauses.begin(),
                                             core::kAllDiagnosisCauses.end());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](auto a, auto b) { return core::CauseRank(a) < core::CauseRank(b); });
    std::string faults, notes;
    for (core::DiagnosisCause c : ranked) {
      std::string& list = core::IsNote(c) ? notes : faults;
      list += (list.empty() ? "" : ", ") + std::string(core::ToString(c));
    }
    if (!core::ParseDiagnosisCause(*options.cause)) {
      throw UsageError("--cause \"" + platform::Printable(*options.cause, 40) +
                       "\": not a cause xferd names; use one of " + faults +
                       "; notes (not a fault, never a problem): " + notes);
    }
    judge.cause = *options.cause;
  }
}

}  // namespace

int HealthCommand(const HealthCommandOptions& options) {
  const auto print = [&](const HealthReport& report) {
    const std::string line = options.nagios ? NagiosLine(report) : report.line;
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
    return HealthExitCode(report.state, options.nagios);
  };
  // A plugin runner sees only the line and the status: a mistake is "unknown", said on the
  // line a person will read.
  HealthJudgeOptions judge;
  std::optional<DaemonClient> client;
  try {
    ReadJudgeFlags(options, judge);
    client.emplace(options.daemon);
  } catch (const platform::Error& e) {
    return print(
        UnknownReport(core::NoVerdict::kDaemonUnreachable, platform::Printable(e.what(), 1000)));
  }
  const HealthReport late =
      UnknownReport(core::NoVerdict::kDaemonUnreachable, "no answer from xferd within the timeout");
  ArmWatchdog(client->timeout(), options.nagios ? NagiosLine(late) : late.line, STDOUT_FILENO,
              HealthExitCode(HealthOutcome::kUnknown, options.nagios));
  const StatusAnswer answer = client->FetchStatus();
  return print(answer.document ? JudgeStatus(*answer.document, judge) : answer.problem);
}

}  // namespace xferd::cmd
