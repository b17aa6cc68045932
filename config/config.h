// The daemon's configuration: TOML -> validated Config. The one place that parses config.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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
  WebConfig web;                           // loaded from web_config_file

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
};

// A config error a user can fix: where it is and what to do.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, int line, std::string key, std::string problem, std::string fix);
  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 0 when not tied to a line
  const std::string& key() const { return key_; }
  const std::string& problem() const { return problem_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string file_;
  int line_;
  std::string key_;
  std::string problem_;
  std::string fix_;
};

// Parse and validate TOML text; `source` names it in errors. Throws ConfigError.
Config ParseConfig(std::string_view text, const std::filesystem::path& source);

// Read and parse a file (and the web config file it names). Throws ConfigError, also for
// a file that cannot be read.
Config LoadConfig(const std::filesystem::path& path);

// exporter-toolkit web-config YAML. Throws ConfigError.
WebConfig LoadWebConfig(const std::filesystem::path& path);

// The value syntaxes of the config file, for flags and summaries that speak the same way.
// "500ms", "5s", "1.5m", "1h" (units ms, s, m, h); nullopt on anything else.
std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatDuration(std::chrono::milliseconds duration);  // "60s", "1500ms"
// "20GB/s", "2.5 GiB/s", "20e9" (bytes/s); nullopt on anything else.
std::optional<double> ParseBandwidth(std::string_view text);
std::string FormatBandwidth(double bytes_per_s);  // "20GB/s"

}  // namespace xferd::config
