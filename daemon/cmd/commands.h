// The subcommands of the xferd executable; main.cc parses flags and calls one of these.
// A command returns its exit code when it ran (0, or 1 for `probe` when a result was bad)
// and throws a platform::Error when it could not: main() turns that into the message and
// the exit code (platform/exit_codes.h), the one place that does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "platform/exit_codes.h"

namespace xferd::cmd {

// A mistake in the flags: the message names it and the fix; exit 64.
class UsageError : public platform::Error {
 public:
  explicit UsageError(const std::string& message)
      : platform::Error(platform::Failure::kUsage, message) {}
};

// `xferd probe`: one-shot run of the selected modes, a table or JSON on stdout.
struct ProbeCommandOptions {
  bool simulate = false;
  bool json = false;
  // The GPUs alone and then together per concurrent group (pinned, each way), instead of
  // every mode: cmd/probe_concurrent.h.
  bool concurrent = false;
  std::vector<std::string> modes;  // empty = every mode
  std::vector<std::string> sizes;  // empty = the default size
  int iterations = 20;
  int warmup = 2;
  std::vector<std::string> gpus;  // indices or UUIDs; empty = every GPU
  std::string config_file;        // optional: the daemon's config (bands, plan, sim options)
  // Root of sysfs (/sys when unset); for the simulated device, the tree its GPUs come from.
  std::optional<std::string> sysfs_root;
  std::uint64_t seed = 1;
};
int RunProbeCommand(const ProbeCommandOptions& options);

// `xferd run`: the daemon. Flags override the config file.
struct RunCommandOptions {
  std::string config_file;                     // empty = defaults
  std::optional<std::string> listen_address;   // --web.listen-address
  std::optional<std::string> web_config_file;  // --web.config.file
  std::optional<std::string> telemetry_path;   // --web.telemetry-path
  std::optional<std::string> state_dir;        // --state-dir
  std::optional<std::string> log_level;        // --log.level
  bool simulate = false;                       // --simulate
  std::optional<std::string> sysfs_root;       // --sysfs-root
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

// `xferd health`: asks the daemon for its verdict (/api/v1/status), prints one line and
// exits 0 (ok), 1 (a GPU degraded) or 2 (unknown: unreachable, no verdict yet, stale); with
// `nagios`, 0, 2 and 3. Never throws for a daemon's answer or a bad setting: those are
// unknown, said on the line.
struct HealthCommandOptions {
  std::optional<std::string> config_file;      // -c/--config; default /etc/xferd/xferd.toml
  std::optional<std::string> listen_address;   // --web.listen-address
  std::optional<std::string> web_config_file;  // --web.config.file ("" = none)
  std::optional<std::string> url;              // --url: scheme, host and port
  std::optional<std::string> ca_file;          // --tls.ca-file
  std::optional<std::string> server_name;      // --tls.server-name
  std::optional<std::string> username;         // --basic-auth.username
  std::optional<std::string> password_file;    // --basic-auth.password-file
  std::string timeout = "5s";                  // --timeout
  std::optional<std::string> stale_after;      // --stale-after
  std::optional<std::string> cause;            // --cause
  bool nagios = false;                         // --nagios
};
int HealthCommand(const HealthCommandOptions& options);

// `xferd version`.
int VersionCommand(bool json);

}  // namespace xferd::cmd
