// The subcommands of the xferd executable; main.cc parses flags and calls one of these.
// A command returns its exit code when it ran (0, or 1 for `probe` when a result was bad)
// and throws a platform::Error when it could not: main() turns that into the message and
// the exit code (platform/exit_codes.h), the one place that does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "platform/exit_codes.h"

namespace xferd::cmd {

// A mistake in the flags: the message names it and the fix; exit 64.
class UsageError : public platform::Error {
 public:
  explicit UsageError(const std::string& message)
      : platform::Error(platform::Failure::kUsage, message) {}
};

// The flags `xferd run` and `xferd probe` lay over the configuration file (each command
// offers those that concern it). A flag that was given wins over the file; one that was not
// leaves the file's value, or the default.
struct ConfigFlags {
  std::string config_file;                // -c, --config; empty = the defaults
  bool simulate = false;                  // --simulate
  std::optional<std::string> sysfs_root;  // --sysfs-root
  // run
  std::optional<std::string> listen_address;   // --web.listen-address
  std::optional<std::string> web_config_file;  // --web.config.file
  std::optional<std::string> telemetry_path;   // --web.telemetry-path
  std::optional<std::string> state_dir;        // --state-dir
  std::optional<std::string> log_level;        // --log.level
  // probe
  std::vector<std::string> modes;     // --mode; empty = the file's
  std::vector<std::string> sizes;     // --size; empty = the file's
  std::optional<int> iterations;      // --iterations
  std::optional<int> warmup;          // --warmup
  std::optional<std::uint64_t> seed;  // --seed, of the simulated device
};

// The one merge of flags over the file: the file (or the defaults), then each flag given,
// checked by the same functions as the file's keys. Throws ConfigError (exit 78) for what
// the file or the web config says, UsageError (exit 64) for a bad flag.
config::Config ConfigWithFlags(const ConfigFlags& flags);

// `xferd probe`: one-shot run of the selected modes, a table or JSON on stdout.
struct ProbeCommandOptions {
  ConfigFlags flags;  // the daemon's config (bands, plan, sim options) and what overrides it
  bool json = false;
  // The GPUs alone and then together per concurrent group (pinned, each way), instead of
  // every mode: cmd/probe_concurrent.h.
  bool concurrent = false;
  std::vector<std::string> gpus;  // indices or UUIDs; empty = every GPU
};
int RunProbeCommand(const ProbeCommandOptions& options);

// `xferd run`: the daemon. Flags override the config file.
struct RunCommandOptions {
  ConfigFlags flags;
};
int RunDaemonCommand(const RunCommandOptions& options);

// `xferd check-config FILE`: 0 and a summary when valid (a ConfigError otherwise). With
// `json`, the resolved plan as JSON instead: the GPUs named, the probes and which of them
// the band judges, the bands; with the devices, their bands too, when the config is for the
// simulated device or `simulate` is set (as `xferd run --simulate` would see them).
struct CheckConfigOptions {
  std::string file;
  bool json = false;
  bool simulate = false;
};
int CheckConfigCommand(const CheckConfigOptions& options);

// Where the daemon is and how to ask it, for `xferd health` and `xferd status` alike
// (cmd/daemon_client.h): its config file, and the flags that override what it says.
struct DaemonClientOptions {
  std::optional<std::string> config_file;      // -c/--config; default /etc/xferd/xferd.toml
  std::optional<std::string> listen_address;   // --web.listen-address
  std::optional<std::string> web_config_file;  // --web.config.file ("" = none)
  std::optional<std::string> url;              // --url: scheme, host and port
  std::optional<std::string> socket;           // --socket: the health socket ("" = none)
  std::optional<std::string> ca_file;          // --tls.ca-file
  std::optional<std::string> server_name;      // --tls.server-name
  std::optional<std::string> username;         // --basic-auth.username
  std::optional<std::string> password_file;    // --basic-auth.password-file
  std::string timeout = "5s";                  // --timeout
};

// `xferd health`: asks the daemon for its verdict (/api/v1/status), prints one line and
// exits 0 (ok), 1 (a GPU degraded) or 2 (unknown: unreachable, no verdict yet, stale); with
// `nagios`, 0, 2 and 3. Never throws for a daemon's answer or a bad setting: those are
// unknown, said on the line.
struct HealthCommandOptions {
  DaemonClientOptions daemon;
  std::optional<std::string> stale_after;  // --stale-after
  std::optional<std::string> cause;        // --cause
  bool nagios = false;                     // --nagios
};
int HealthCommand(const HealthCommandOptions& options);

// `xferd status`: the daemon's status document as a table (GPU x series: reading, band,
// baseline, age, next run; each GPU's verdict and leading cause; the incident log), after
// the line and with the exit status of `xferd health` (0 ok, 1 a GPU degraded, 2 unknown).
// With `json`, the document as the daemon served it. Never throws for a daemon's answer or
// a bad setting: those are unknown.
struct StatusCommandOptions {
  DaemonClientOptions daemon;
  bool json = false;  // --json
};
int StatusCommand(const StatusCommandOptions& options);
// `xferd evidence [GPU]`: the evidence records kept when GPUs turned DEGRADED
// (core/evidence.h), read from <state_dir>/evidence directly (the daemon may be stopped).
// No GPU: the list, newest first. A GPU (index or UUID): its newest record, or the one
// `record` names. Exit 0 when it printed, 1 when no record was found (or it cannot be read).
struct EvidenceCommandOptions {
  std::optional<std::string> config_file;  // -c/--config; default /etc/xferd/xferd.toml
  std::optional<std::string> state_dir;    // --state-dir, instead of the config's
  std::optional<std::string> gpu;          // positional
  std::optional<std::string> record;       // --record NAME
  bool list = false;                       // --list: the list, even with a GPU
  bool json = false;                       // --json
};
int EvidenceCommand(const EvidenceCommandOptions& options);

// `xferd faults`: the fault codes and recommended actions (core/fault_codes.h).
int FaultsCommand(bool json);

// `xferd version`.
int VersionCommand(bool json);

}  // namespace xferd::cmd
