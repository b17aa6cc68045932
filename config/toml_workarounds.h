// What toml++ 3.3 does not do for us, kept apart so it can go when toml++ does: it reports
// parse errors by position only (we name the key on that line), places some invalid UTF-8
// on the wrong line, and crashes on some non-ASCII characters outside strings.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace xferd::config {

// The key defined on `line` ("probe.interval", or the table of a [header]), or "".
std::string KeyAtLine(std::string_view text, int line);
// The last line at or above `line` that defines a key, and the key; {0, ""} if none.
std::pair<int, std::string> LastKeyAtOrAbove(std::string_view text, int line);
// The line that defines `key` ("web.config_file"), or 0.
int LineOfKey(std::string_view text, std::string_view key);
// 0 when `text` is valid UTF-8, else the 1-based line of the first bad byte (in *byte).
int FirstInvalidUtf8Line(std::string_view text, unsigned* byte);
// The 1-based line of the first non-ASCII character outside a string or comment, or 0.
// toml++ 3.3 reaches __builtin_unreachable() on some of them (found by fuzz/config_fuzzer).
int FirstNonAsciiOutsideStrings(std::string_view text);

}  // namespace xferd::config
