// What toml++ 3.3 does not do for us, kept apart so it can go when toml++ does: it reports
// parse errors by position only (we name the key on that line), places some invalid UTF-8
// on the wrong line, crashes on some non-ASCII characters outside strings, and recurses
// once per level of nesting, so a file nested deep enough overflows the stack.
#pragma once

#include <optional>
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
// How deep a file may nest before toml++ sees it. xferd's deepest key has 3 parts
// (simulate.fault.kind) and its deepest value 2 levels ([[health.band]] in an array of
// tables, { mode = "reason" }); toml++ recurses per level, and ~35,000 levels overflow an
// 8 MiB stack. With these limits a file nests at most 16 + 16 x 16 levels.
inline constexpr int kMaxKeyParts = 16;      // a.b.c... in a key or a [table] name
inline constexpr int kMaxBracketDepth = 16;  // arrays and inline tables within each other

struct NestingProblem {
  int line = 0;
  std::string problem;
};
// The first place `text` nests deeper than the limits above, outside strings and comments;
// nullopt when it does not. A cheap pass over the bytes: no recursion, no allocation.
std::optional<NestingProblem> FindTooDeepNesting(std::string_view text);

// The 1-based line of the first raw control character (other than tab, line feed and
// carriage return), or 0; the byte in *byte. TOML allows none anywhere, and toml++ 3.3,
// reading on past one, reaches __builtin_unreachable() (found by fuzz/config_fuzzer).
int FirstControlCharacterLine(std::string_view text, unsigned* byte);
// The 1-based line of the first non-ASCII character outside a string or comment, or 0.
// toml++ 3.3 reaches __builtin_unreachable() on some of them (found by fuzz/config_fuzzer).
int FirstNonAsciiOutsideStrings(std::string_view text);

}  // namespace xferd::config
