// The subcommands of the xferd executable; main.cc parses flags and calls one of these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xferd::cmd {

// `xferd probe`: one-shot run of the selected modes, a table or JSON on stdout.
struct ProbeCommandOptions {
  bool simulate = false;
  bool json = false;
  std::vector<std::string> modes;  // empty = every mode
  std::vector<std::string> sizes;  // empty = the default size
  int iterations = 20;
  int warmup = 2;
  std::vector<std::string> gpus;   // indices or UUIDs; empty = every GPU
  std::string config_file;         // optional: expected bands, sim options
  std::string sysfs_root = "/sys";
  std::uint64_t seed = 1;
};
int RunProbeCommand(const ProbeCommandOptions& options);

// `xferd run`: the daemon. Flags override the config file.
struct RunCommandOptions {
  std::string config_file;  // empty = defaults
  std::optional<std::string> listen_address;  // --web.listen-address
  std::optional<std::string> web_config_file; // --web.config.file
  std::optional<std::string> telemetry_path;  // --web.telemetry-path
  std::optional<std::string> state_dir;       // --state-dir
  std::optional<std::string> log_level;       // --log.level
  bool simulate = false;                      // --simulate
};
int RunDaemonCommand(const RunCommandOptions& options);

// `xferd check-config FILE`: 0 and a summary when valid, 78 and the error otherwise.
int CheckConfigCommand(const std::string& file);

// `xferd version`.
int VersionCommand(bool json);

}  // namespace xferd::cmd
