// The daemon's configuration: TOML -> validated Config, the model every command reads. The
// file format and its checks: docs/configuration.md; how the layers use it:
// docs/architecture.md.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_error.h"
#include "config/units.h"
#include "core/settings.h"
#include "web/web_config.h"
#include "xferd/probes/sim_backend.h"
#include "xferd/probes/types.h"

namespace xferd::config {

using core::BandOverride;
using web::WebConfig;

// The whole configuration file: what core is told ([probe], [busy], [health]) plus what
// only the executable uses ([web], [daemon], [simulate]).
struct Config : core::Settings {
  std::filesystem::path source;  // the file it came from ("" for defaults)

  // [web]
  std::string listen_address = ":9742";
  std::string telemetry_path = "/metrics";
  std::filesystem::path web_config_file;  // exporter-toolkit YAML; empty = plain HTTP
  WebConfig web;                          // loaded from web_config_file
  // A reload (SIGHUP) that would turn off TLS or basic auth the running daemon has is
  // refused unless this is set (CheckReloadKeepsProtection).
  bool reload_may_remove_protection = false;
  // The health socket (docs/http.md): the status document and /healthz over a unix-domain
  // socket of mode 0660, for `xferd health` on this host. nullopt: <state_dir>/health.sock;
  // empty: none. HealthSocket() resolves it.
  std::optional<std::filesystem::path> health_socket;
  std::filesystem::path HealthSocket() const {
    return health_socket.value_or(state_dir / "health.sock");
  }

  // [daemon]
  std::filesystem::path state_dir = "/var/lib/xferd";
  std::filesystem::path textfile_path;  // node_exporter textfile (.prom); empty = off
  std::string log_level = "info";       // trace|debug|info|warn|error|critical|off

  // [simulate]
  bool simulate = false;
  probes::SimOptions sim;
  // [simulate] gpu_utilization_percent, pcie_bytes_per_second: the load the simulated GPUs
  // report to busy detection in place of NVML (0 = idle), so skipping a busy GPU can be
  // tried without one.
  double sim_gpu_utilization_percent = 0;
  double sim_pcie_bytes_per_s = 0;
  // [simulate] speedup: the daemon runs on simulated time, this many times faster than real
  // time (core::SimulatedClock); 0 = real time.
  double sim_speedup = 0;
};

// What a configuration costs, per GPU: the series it exports in its metrics profile
// (docs/metrics.md's arithmetic) and the baseline values the state file keeps for it.
struct SeriesEstimate {
  std::size_t probes = 0;    // per cycle and GPU: sizes x mode-directions
  std::size_t per_gpu = 0;   // series of a GPU alone
  std::size_t per_size = 0;  // series one more size adds
  // On a multi-GPU host, at most this many more per GPU for the concurrent groups it is in.
  std::size_t concurrent_per_gpu = 0;
  // Of per_gpu: xferd_band_exempt, one per link-bound probe under its band's size.
  std::size_t exempt_per_gpu = 0;
  // Of per_gpu: the link's error counters of the path (PathShape).
  std::size_t link_errors_per_gpu = 0;
  // The fleet profile: what each (mode, direction) adds while its verdict is degraded, at
  // most (per_gpu counts the healthy GPU). 0 for the full profile, which has them all.
  std::size_t per_degraded_pair = 0;
  std::size_t baseline_values_per_gpu = 0;
};
// The PCIe path a GPU's link-error series are counted for: how many devices (the GPU, each
// switch port, the root port) and whether the top is a root port. The budget counts a
// typical one, a GPU behind one switch: the GPU, the switch's two ports, the root port.
struct PathShape {
  std::size_t devices = 4;
  bool root_port = true;
};
SeriesEstimate EstimateSeries(const core::Settings& settings, const PathShape& path = {});

// The limits ParseConfig holds a file to (docs/configuration.md, "Limits"). Per GPU, so
// that check-config on any machine says what run will; 292 series with the defaults on a
// typical path (298 with the concurrent groups' allowance).
inline constexpr std::size_t kMaxSeriesPerGpu = 2000;
// For all GPUs together, where the file fixes their number (probe.gpus, simulate.devices):
// about 2 MB of /metrics.
inline constexpr std::size_t kMaxSeries = 20000;
// probes x health.baseline_window: ~3 MB of state file per GPU (13 probes x 10,000 cycles,
// the longest window, fit), so the state file cap holds 20 GPUs at the most.
inline constexpr std::size_t kMaxBaselineValuesPerGpu = 131072;
// Throws ConfigError, naming the key and how far over the limit the file is.
void CheckBudget(const Config& config, std::string_view text);

// Parse and validate TOML text; `source` names it in errors. Throws ConfigError.
Config ParseConfig(std::string_view text, const std::filesystem::path& source);

// What the web config is read for. kServe (run, check-config, and LoadConfig): the TLS
// certificate and key are read and checked (web::LoadTlsMaterial), as the server will serve
// them. kAsk (`xferd health`, a client of the daemon): only where they are is noted
// (WebConfig::tls holds the paths, no PEM): the key is the daemon's secret, which a client
// neither needs nor may read.
enum class WebConfigUse { kServe, kAsk };

// Read and parse a file (and the web config file it names). Throws ConfigError, also for
// a file that cannot be read.
Config LoadConfig(const std::filesystem::path& path);

// exporter-toolkit web-config YAML. Throws ConfigError.
WebConfig LoadWebConfig(const std::filesystem::path& path, WebConfigUse use = WebConfigUse::kServe);

// Throws ConfigError when a reload from `running` to `next` would turn off TLS or basic
// auth that `running` has (a web config emptied, cut short or no longer named) and `next`
// does not say reload_may_remove_protection: the error names what would be removed and
// the file behind it. A start has nothing to compare with and applies what the files say.
void CheckReloadKeepsProtection(const Config& running, const Config& next);

// Config files are a few KiB; anything this large is the wrong file.
inline constexpr std::size_t kMaxConfigBytes = 1u << 20;

// The whole of a config file (platform::ReadFileBounded: a regular file of at most
// `max_bytes`); ConfigError naming why it cannot be read.
std::string ReadConfigFile(const std::filesystem::path& path,
                           std::size_t max_bytes = kMaxConfigBytes,
                           std::string_view what = "config file");

// A path written in the config file at `base_file`: relative ones are relative to that
// file's directory; absolute and empty ones stay as they are.
std::filesystem::path ResolveAgainst(const std::filesystem::path& base_file,
                                     const std::filesystem::path& path);

}  // namespace xferd::config
