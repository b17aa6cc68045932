// libFuzzer target: arbitrary bytes as a config file. A ConfigError is the expected answer
// to bad input; anything else escaping (another exception, a crash, a sanitizer report,
// a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const xferd::config::Config config = xferd::config::ParseConfig(text, "fuzz.toml");
    // What parsed must be what validation promised.
    if (config.sizes.empty() || config.modes.empty() || config.iterations < 1 ||
        config.probe_deadline > config.cycle_budget || config.cycle_budget >= config.interval) {
      __builtin_trap();
    }
  } catch (const xferd::config::ConfigError&) {
  }
  // The value syntaxes on their own, for inputs too short to reach them through TOML.
  (void)xferd::config::ParseDuration(text);
  (void)xferd::config::ParseBandwidth(text);
  return 0;
}
