// The one merge of command-line flags over the configuration file (cmd/commands.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "cmd/commands.h"
#include "platform/logging.h"
#include "web/listen_address.h"
#include "web/paths.h"

namespace xferd::cmd {
namespace {

// `value` of `flag` after `check` (a web:: check that throws HttpError) passed it.
template <typename Check>
std::string CheckedFlag(const char* flag, const std::string& value, Check check) {
  try {
    check(value);
  } catch (const web::HttpError& e) {
    throw UsageError(std::string(flag) + ": " + e.what());
  }
  return value;
}

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// In the order `xferd run` has always checked them: the first bad flag is the one named.
void ApplyRunFlags(const ConfigFlags& flags, config::Config& config) {
  if (flags.listen_address) {
    config.listen_address = CheckedFlag("--web.listen-address", *flags.listen_address,
                                        [](const std::string& a) { web::ParseListenAddress(a); });
  }
  if (flags.telemetry_path) {
    config.telemetry_path = CheckedFlag("--web.telemetry-path", *flags.telemetry_path,
                                        [](const std::string& p) { web::CheckTelemetryPath(p); });
  }
  if (flags.state_dir) config.state_dir = *flags.state_dir;
  if (flags.log_level) {
    if (!platform::ParseLogLevel(*flags.log_level)) {
      throw UsageError(fmt::format("--log.level \"{}\": unknown level; use one of {}",
                                   *flags.log_level, platform::kLogLevelNames));
    }
    config.log_level = *flags.log_level;
  }
  if (flags.web_config_file) {
    config.web_config_file = *flags.web_config_file;
    config.web = config.web_config_file.empty() ? web::WebConfig{}
                                                : config::LoadWebConfig(config.web_config_file);
  }
}

void ApplyProbeFlags(const ConfigFlags& flags, config::Config& config) {
  if (!flags.modes.empty()) {
    config.modes.clear();
    for (const std::string& text : flags.modes) {
      const auto mode = probes::ParseMode(Lower(text));
      if (!mode) {
        throw UsageError("unknown mode \"" + text +
                         "\" in --mode; valid modes: " + probes::AllModeNames());
      }
      if (std::find(config.modes.begin(), config.modes.end(), *mode) == config.modes.end()) {
        config.modes.push_back(*mode);
      }
    }
  }
  if (!flags.sizes.empty()) {
    config.sizes.clear();
    for (const std::string& text : flags.sizes) {
      const auto size = probes::ParseSize(text);
      if (!size || *size == 0) {
        throw UsageError("bad transfer size \"" + text +
                         "\" in --size; write a positive size such as 4KiB, 64MiB or 1GiB");
      }
      config.sizes.push_back(*size);
    }
    // A size asked for on the command line is the size measured, on every link.
    config.sizes_follow_link = false;
  }
  if (flags.iterations) {
    // So is a count: exactly that many timed transfers, no device-time target.
    config.iterations = *flags.iterations;
    config.probe_time = std::chrono::milliseconds(0);
    config.min_iterations = std::min(config.min_iterations, config.iterations);
  }
  if (flags.warmup) config.warmup = *flags.warmup;
  if (flags.seed) config.sim.seed = *flags.seed;
}

}  // namespace

config::Config ConfigWithFlags(const ConfigFlags& flags) {
  config::Config config =
      flags.config_file.empty() ? config::Config{} : config::LoadConfig(flags.config_file);
  if (flags.simulate) config.simulate = true;
  if (flags.sysfs_root) config.sim.sysfs_root = *flags.sysfs_root;
  ApplyRunFlags(flags, config);
  ApplyProbeFlags(flags, config);
  return config;
}

}  // namespace xferd::cmd
