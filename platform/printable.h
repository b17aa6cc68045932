// The one escaping of text that came from outside (a config key, a path, a request line, a
// state file) before it goes into a message or a log line: every error path uses it, so a
// megabyte-long key or raw bytes from a file never reach the terminal or the journal as
// they are.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xferd::platform {

// How many bytes of outside text a message quotes by default.
inline constexpr std::size_t kPrintableBytes = 120;

// `text` safe to print: valid UTF-8 letters are kept; control characters (newlines, ESC,
// NUL, C1), bytes that are not UTF-8 and Unicode direction overrides become \xHH or \uHHHH;
// with `escape_quotes`, '"' and '\' are escaped too (for text shown inside quotes). Longer
// than `max_bytes` after escaping: cut on a character boundary and "...(N bytes)" appended,
// N the size of the original.
std::string Printable(std::string_view text, std::size_t max_bytes = kPrintableBytes,
                      bool escape_quotes = false);

}  // namespace xferd::platform
