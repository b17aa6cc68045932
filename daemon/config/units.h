// The value syntaxes of the config file, one parser each, for flags and summaries that
// speak the same way. Sizes ("64MiB") are probes::ParseSize/FormatSize.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace xferd::config {

// "500ms", "5s", "1.5m", "1h" (units ms, s, m, h); nullopt on anything else.
std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatDuration(std::chrono::milliseconds duration);  // "60s", "1500ms"
// "20GB/s", "2.5 GiB/s", "20e9" (bytes/s); nullopt on anything else.
std::optional<double> ParseBandwidth(std::string_view text);
std::string FormatBandwidth(double bytes_per_s);  // "20GB/s"

}  // namespace xferd::config
