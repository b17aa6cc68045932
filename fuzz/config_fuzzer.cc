// libFuzzer target: arbitrary bytes as a config file. A ConfigError is the expected answer
// to bad input; anything else escaping (another exception, a crash, a sanitizer report,
// a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const xferd::daemon::Config config = xferd::daemon::ParseConfig(text, "fuzz.toml");
    // What parsed must be what validation promised.
    if (config.sizes.empty() || config.modes.empty() || config.iterations < 1 ||
        config.probe_deadline > config.cycle_budget || config.cycle_budget >= config.interval) {
      __builtin_trap();
    }
  } catch (const xferd::daemon::ConfigError&) {
  }
  // The value syntaxes on their own, for inputs too short to reach them through TOML.
  (void)xferd::daemon::ParseDuration(text);
  (void)xferd::daemon::ParseBandwidth(text);
  return 0;
}
