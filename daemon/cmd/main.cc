// xferd run | probe | check-config | health | status | evidence | faults | version
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include "cmd/commands.h"
#include "cmd/health_report.h"
#include "core/diagnosis.h"
#include "platform/exit_codes.h"
#include "platform/logging.h"
#include "platform/printable.h"
#include "platform/signals.h"

namespace {

// The first code of xferd's own that runs: blocks SIGHUP, SIGTERM and SIGINT before any
// library's initialiser and before main (a SIGHUP within the first milliseconds used to
// end the daemon, 129). `run` takes them (TakeProcessSignals: one that came meanwhile is
// the first it handles); other commands unblock them once parsed. The dynamic loader's
// own work before this cannot be covered by any program (docs/service.md).
void BlockSignalsFirst(int, char**, char**) {
  xferd::platform::BlockProcessSignals();
}
__attribute__((section(".preinit_array"),
               used)) void (*const kBlockSignalsFirst)(int, char**, char**) = &BlockSignalsFirst;
// An error line longer than this is echoing input, not explaining it.
constexpr std::size_t kMessageBytes = 2000;

using namespace xferd::cmd;

// A flag that takes one of a fixed set of names says them all in --help, from the list the
// command checks the value against.
std::string WithChoices(const std::string& text, const std::string& names) {
  return text + ": " + names;
}

// The exit codes of a command, for the end of its --help (the numbers from exit_codes.h).
std::string ExitCodes(std::initializer_list<std::pair<int, const char*>> codes) {
  std::string text = "Exit codes:";
  for (const auto& [code, meaning] : codes) {
    text += "\n  " + std::to_string(code) + (code < 10 ? "   " : "  ") + meaning;
  }
  return text;
}

std::string CauseNames() {
  std::string names;
  for (xferd::core::DiagnosisCause c : xferd::core::kAllDiagnosisCauses) {
    names += (names.empty() ? "" : ", ") + std::string(xferd::core::ToString(c));
  }
  return names;
}

// Each subcommand with its flags, bound to the options its command takes.
CLI::App* AddRunCommand(CLI::App& app, RunCommandOptions& run) {
  auto* run_cmd = app.add_subcommand("run", "Run the daemon: probe periodically, serve /metrics");
  run_cmd->add_option("-c,--config", run.flags.config_file, "TOML configuration file");
  run_cmd->add_option("--web.listen-address", run.flags.listen_address,
                      "Address to listen on, e.g. :9742 or 127.0.0.1:9742");
  run_cmd->add_option("--web.config.file", run.flags.web_config_file,
                      "exporter-toolkit web config (YAML) for TLS and basic auth");
  run_cmd->add_option("--web.telemetry-path", run.flags.telemetry_path, "Metrics path (/metrics)");
  run_cmd->add_option("--state-dir", run.flags.state_dir, "Directory for the persisted baselines");
  run_cmd->add_option("--log.level", run.flags.log_level,
                      WithChoices("Log level (default: the config's log_level, info)",
                                  xferd::platform::kLogLevelNames));
  run_cmd->add_flag("--simulate", run.flags.simulate, "Use the simulated device instead of GPUs");
  run_cmd->add_option("--sysfs-root", run.flags.sysfs_root,
                      "Root of sysfs (default /sys); with --simulate, the tree the simulated "
                      "GPUs come from");
  run_cmd->footer(
      "Signals:\n"
      "  SIGHUP          reload the configuration and the web config; a bad one is refused "
      "and the running one kept\n"
      "  SIGTERM SIGINT  stop within 2 s, also in the middle of a probe\n" +
      ExitCodes({{xferd::kExitOk, "stopped by SIGTERM or SIGINT"},
                 {xferd::kExitUsage, "a bad flag"},
                 {xferd::kExitNoDevice, "no NVIDIA driver or GPU (try --simulate)"},
                 {xferd::kExitSoftware, "an internal error (the probe thread failed)"},
                 {xferd::kExitOsError, "cannot serve: the address is in use or cannot be bound"},
                 {xferd::kExitConfig,
                  "the configuration is invalid (file, web config, or a probe.gpus entry "
                  "naming no GPU)"}}));
  return run_cmd;
}

CLI::App* AddProbeCommand(CLI::App& app, ProbeCommandOptions& probe) {
  auto* probe_cmd = app.add_subcommand("probe", "Run every probe once and print the results");
  probe_cmd->add_flag("--simulate", probe.flags.simulate, "Use the simulated device, not GPUs");
  probe_cmd->add_flag("--json", probe.json, "Print JSON instead of a table");
  probe_cmd->add_flag("--concurrent", probe.concurrent,
                      "Probe the GPUs alone, then every concurrent group at once (pinned, each "
                      "way): per-GPU alone vs together, aggregate vs its expected band");
  probe_cmd
      ->add_option("--mode", probe.flags.modes,
                   WithChoices("Modes to run (repeatable or comma-separated; default all)",
                               xferd::probes::AllModeNames()))
      ->delimiter(',');
  probe_cmd->add_option("--size", probe.flags.sizes, "Transfer sizes, e.g. 64MiB (repeatable)")
      ->delimiter(',');
  probe_cmd->add_option("--iterations", probe.flags.iterations, "Timed transfers per probe")
      ->check(CLI::Range(1, 100000));
  probe_cmd->add_option("--warmup", probe.flags.warmup, "Untimed transfers before them")
      ->check(CLI::Range(0, 1000));
  probe_cmd->add_option("--gpu", probe.gpus, "GPU index or UUID (repeatable; default all)")
      ->delimiter(',');
  probe_cmd->add_option("-c,--config", probe.flags.config_file, "TOML config (bands, sim options)");
  probe_cmd->add_option("--sysfs-root", probe.flags.sysfs_root,
                        "Root of sysfs (default /sys); with --simulate, the tree the simulated "
                        "GPUs come from");
  probe_cmd->add_option("--seed", probe.flags.seed, "Seed of the simulated device");
  probe_cmd->footer(ExitCodes(
      {{xferd::kExitOk, "every probe ran and no link-bound result is below its band"},
       {xferd::kExitFailure, "a link-bound result is below its band, or a probe failed"},
       {xferd::kExitUsage, "a bad flag (unknown mode, bad size, a --gpu that names no GPU)"},
       {xferd::kExitNoDevice, "no NVIDIA driver or GPU (try --simulate)"},
       {xferd::kExitSoftware, "an internal error"},
       {xferd::kExitConfig, "the -c file is invalid, or its probe.gpus names no GPU here"}}));
  return probe_cmd;
}

CLI::App* AddCheckConfigCommand(CLI::App& app, CheckConfigOptions& check) {
  auto* check_cmd = app.add_subcommand("check-config", "Validate a configuration file");
  check_cmd->add_option("file", check.file, "TOML configuration file")->required();
  check_cmd->add_flag("--json", check.json,
                      "Print the resolved plan (GPUs, probes, bands, verdict rules) as JSON");
  check_cmd->add_flag("--simulate", check.simulate,
                      "With --json: resolve the GPUs and bands on the simulated device");
  check_cmd->footer(
      ExitCodes({{xferd::kExitOk, "the file is valid"},
                 {xferd::kExitUsage, "a bad flag"},
                 {xferd::kExitSoftware, "an internal error"},
                 {xferd::kExitConfig, "the file is invalid (file:line: key: why; fix)"}}));
  return check_cmd;
}

// Where the daemon is and how to reach it: the flags `health` and `status` share
// (cmd/daemon_client.h reads them).
void AddDaemonFlags(CLI::App* cmd, DaemonClientOptions& daemon) {
  cmd->add_option("-c,--config", daemon.config_file,
                  "The daemon's TOML config (default /etc/xferd/xferd.toml when present)");
  cmd->add_option("--web.listen-address", daemon.listen_address,
                  "The daemon's listen address, instead of the config's");
  cmd->add_option("--web.config.file", daemon.web_config_file,
                  "The daemon's web config (TLS, basic auth), instead of the config's");
  cmd->add_option("--url", daemon.url,
                  "Where the daemon serves, e.g. https://127.0.0.1:9742 (overrides the "
                  "address and TLS the config says)");
  cmd->add_option("--socket", daemon.socket,
                  "The daemon's health socket, asked first (default: the config's "
                  "[web] health_socket, <state_dir>/health.sock, when no --url or "
                  "--web.listen-address is given); --url or the config's address "
                  "when it cannot be connected to; \"\" for none");
  cmd->add_option("--tls.ca-file", daemon.ca_file,
                  "CA certificate(s) to verify the daemon's certificate with (default: "
                  "the daemon's own cert_file)");
  cmd->add_option("--tls.server-name", daemon.server_name,
                  "The name the daemon's certificate must carry (default: the host)");
  cmd->add_option("--basic-auth.username", daemon.username,
                  "Basic-auth user (default: the only user of the web config)");
  cmd->add_option("--basic-auth.password-file", daemon.password_file,
                  "File holding that user's password (one line)");
  cmd->add_option("--timeout", daemon.timeout, "Give up after this long (default 5s)");
}

// The exit codes of the commands that report the daemon's verdict (health, status).
std::string VerdictExitCodes(const char* ok, const char* problem) {
  return ExitCodes({{HealthExitCode(HealthOutcome::kOk, false), ok},
                    {HealthExitCode(HealthOutcome::kProblem, false), problem},
                    {HealthExitCode(HealthOutcome::kUnknown, false),
                     "unknown: no answer, no verdict yet, or a stale one"},
                    {xferd::kExitUsage, "a flag the command line cannot parse"}});
}

CLI::App* AddHealthCommand(CLI::App& app, HealthCommandOptions& health) {
  auto* health_cmd = app.add_subcommand(
      "health",
      "Ask the running daemon for its verdict: one line; exit 0 ok, 1 a GPU degraded, "
      "2 unknown (node-problem-detector's plugin protocol)");
  AddDaemonFlags(health_cmd, health.daemon);
  health_cmd->add_option("--stale-after", health.stale_after,
                         "A verdict older than this is unknown (default: the daemon's limit, 3 "
                         "intervals + the cycle budget)");
  health_cmd->add_option(
      "--cause", health.cause,
      WithChoices("Only a GPU degraded with this cause is a problem", CauseNames()));
  health_cmd->add_flag("--nagios", health.nagios,
                       "Nagios plugin form: XFERD OK/CRITICAL/UNKNOWN, exit 0, 2, 3");
  health_cmd->footer(
      VerdictExitCodes("every GPU's verdict is ok", "a GPU is DEGRADED") +
      "\nWith --nagios: " + std::to_string(HealthExitCode(HealthOutcome::kOk, true)) + " OK, " +
      std::to_string(HealthExitCode(HealthOutcome::kProblem, true)) + " CRITICAL, " +
      std::to_string(HealthExitCode(HealthOutcome::kUnknown, true)) + " UNKNOWN");
  return health_cmd;
}

CLI::App* AddStatusCommand(CLI::App& app, StatusCommandOptions& status) {
  auto* status_cmd = app.add_subcommand(
      "status",
      "Show the running daemon's status as tables: per GPU its verdict and cause, each series "
      "against band and baseline with its age and next run; exit status as health's");
  AddDaemonFlags(status_cmd, status.daemon);
  status_cmd->add_flag("--json", status.json,
                       "Print the status document (/api/v1/status) as the daemon served it");
  status_cmd->footer(VerdictExitCodes("every GPU's verdict is ok", "a GPU is DEGRADED"));
  return status_cmd;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xferd: watches host<->GPU transfer bandwidth and exports it to Prometheus"};
  app.require_subcommand(1);

  RunCommandOptions run;
  auto* run_cmd = AddRunCommand(app, run);
  ProbeCommandOptions probe;
  auto* probe_cmd = AddProbeCommand(app, probe);
  CheckConfigOptions check;
  auto* check_cmd = AddCheckConfigCommand(app, check);
  HealthCommandOptions health;
  auto* health_cmd = AddHealthCommand(app, health);
  StatusCommandOptions status;
  auto* status_cmd = AddStatusCommand(app, status);
  EvidenceCommandOptions evidence;
  auto* evidence_cmd = app.add_subcommand(
      "evidence",
      "Print the evidence records kept when GPUs turned DEGRADED (the state directory's "
      "evidence/): the list, or a GPU's newest");
  evidence_cmd->add_option("gpu", evidence.gpu, "A GPU, by index or UUID: its newest record");
  evidence_cmd->add_option("-c,--config", evidence.config_file,
                           "The daemon's TOML config, for its state_dir (default "
                           "/etc/xferd/xferd.toml when present)");
  evidence_cmd->add_option("--state-dir", evidence.state_dir,
                           "The daemon's state directory, instead of the config's");
  evidence_cmd->add_option("--record", evidence.record, "One record, by its file name");
  evidence_cmd->add_flag("--list", evidence.list, "The list of records (of the GPU, if given)");
  evidence_cmd->add_flag("--json", evidence.json, "Print JSON: the record, or the list");
  evidence_cmd->footer(ExitCodes({{xferd::kExitOk, "printed"},
                                  {1, "no such record, or it cannot be read"},
                                  {xferd::kExitUsage, "a bad flag"},
                                  {xferd::kExitConfig, "the -c file is invalid"}}));
  bool faults_json = false;
  auto* faults_cmd = app.add_subcommand(
      "faults", "Print the fault codes and recommended actions the daemon's verdicts carry");
  faults_cmd->add_flag("--json", faults_json, "Print JSON");
  faults_cmd->footer(ExitCodes({{xferd::kExitOk, "always"}}));
  bool version_json = false;
  auto* version_cmd = app.add_subcommand("version", "Print the version and build");
  version_cmd->add_flag("--json", version_json, "Print JSON");
  version_cmd->footer(ExitCodes({{xferd::kExitOk, "always"}}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? xferd::kExitOk : xferd::kExitUsage;
  }

  // Log lines go to stderr from the start, whatever the command: spdlog's own default
  // writes to stdout, where `xferd probe --json` and `check-config --json` print documents
  // that a log line (NVML's "said once" notes, say) would break. `run` sets up its own
  // target (the journal under systemd) from its config.
  xferd::platform::SetUpLogging("info", xferd::platform::LogTarget::kStderr);

  // Only the daemon takes the signals blocked at start; every other command is stopped by
  // them as any program is.
  if (!*run_cmd) xferd::platform::UnblockProcessSignals();

  // Each command's messages start as they always have: "xferd: ", "xferd probe: ", and
  // check-config's "<file>:<line>: ..." as it is.
  const char* prefix = *probe_cmd ? "xferd probe: " : *check_cmd ? "" : "xferd: ";
  try {
    if (*run_cmd) return RunDaemonCommand(run);
    if (*probe_cmd) return RunProbeCommand(probe);
    if (*check_cmd) return CheckConfigCommand(check);
    if (*health_cmd) return HealthCommand(health);
    if (*status_cmd) return StatusCommand(status);
    if (*evidence_cmd) return EvidenceCommand(evidence);
    if (*faults_cmd) return FaultsCommand(faults_json);
    if (*version_cmd) return VersionCommand(version_json);
  } catch (const xferd::platform::Error& e) {
    // Escaped and capped however the message was made: it may quote a flag, a file or a
    // request as they came (ConfigError's parts are escaped already; this is idempotent).
    std::fprintf(stderr, "%s%s\n", prefix,
                 xferd::platform::Printable(e.what(), kMessageBytes).c_str());
    return xferd::platform::ExitCode(e.failure());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xferd: internal error: %s\n",
                 xferd::platform::Printable(e.what(), kMessageBytes).c_str());
    return xferd::kExitSoftware;
  }
  return xferd::kExitUsage;
}
