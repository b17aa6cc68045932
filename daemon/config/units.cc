#include "config/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace xferd::config {

using std::chrono::milliseconds;

std::optional<milliseconds> ParseDuration(std::string_view text) {
  // <number><unit>, unit one of ms, s, m, h; fractions allowed ("1.5s").
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0 || i == text.size()) return std::nullopt;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || ptr != text.data() + i || !std::isfinite(value)) return std::nullopt;
  const std::string_view unit = text.substr(i);
  double scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1e3;
  else if (unit == "m")
    scale = 60e3;
  else if (unit == "h")
    scale = 3600e3;
  else
    return std::nullopt;
  const double ms = value * scale;
  if (ms > 365.0 * 24 * 3600e3) return std::nullopt;  // also keeps the cast below defined
  return milliseconds(static_cast<std::int64_t>(std::llround(ms)));
}

std::string FormatDuration(milliseconds duration) {
  const std::int64_t ms = duration.count();
  if (ms != 0 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms != 0 && ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::optional<double> ParseBandwidth(std::string_view text) {
  // A number (decimal or exponent) then an optional unit: bytes per second, SI or binary.
  std::size_t start = 0;
  while (start < text.size() && text[start] == ' ') ++start;
  text.remove_prefix(start);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data() || !std::isfinite(value) || value < 0)
    return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  while (!unit.empty() && unit.back() == ' ') unit.remove_suffix(1);
  static const std::pair<std::string_view, double> kUnits[] = {{"", 1},
                                                               {"B/s", 1},
                                                               {"KB/s", 1e3},
                                                               {"MB/s", 1e6},
                                                               {"GB/s", 1e9},
                                                               {"TB/s", 1e12},
                                                               {"KiB/s", 1024.0},
                                                               {"MiB/s", 1048576.0},
                                                               {"GiB/s", 1073741824.0},
                                                               {"TiB/s", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) return value * scale;
  }
  return std::nullopt;
}

std::string FormatBandwidth(double bytes_per_s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4gGB/s", bytes_per_s / 1e9);
  return buf;
}

}  // namespace xferd::config
