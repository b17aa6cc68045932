// Pieces of config error messages shared by the TOML and the YAML reader.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xferd::config {

// `text` in double quotes, escaped and cut at 80 bytes (platform::Printable): safe to print
// whatever it holds.
std::string Quote(std::string_view text);
// A number as a person writes it: 0.8, 20, 1e+09.
std::string FormatNumber(double value);
// Case-insensitive Levenshtein distance, for "did you mean" suggestions.
std::size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace xferd::config
