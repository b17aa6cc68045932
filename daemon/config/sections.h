// One reader per section of the config file, each filling its part of Config from the
// parsed TOML (config/load.cc calls them in order). Each throws ConfigError.
#pragma once

#include <toml++/toml.h>

#include <filesystem>
#include <string>

#include "config/config.h"

namespace xferd::config {

void ReadWeb(const std::string& file, const std::filesystem::path& source, const toml::table& root,
             Config& config);
void ReadDaemon(const std::string& file, const std::filesystem::path& source,
                const toml::table& root, Config& config);
// `simulate`: the device is simulated, which allows much shorter intervals.
void ReadProbe(const std::string& file, const toml::table& root, bool simulate, Config& config);
void ReadBusy(const std::string& file, const toml::table& root, Config& config);
void ReadHealth(const std::string& file, const toml::table& root, Config& config);
void ReadMetrics(const std::string& file, const toml::table& root, Config& config);
void ReadSimulate(const std::string& file, const toml::table& root, Config& config);

}  // namespace xferd::config
