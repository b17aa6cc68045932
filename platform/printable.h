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

// A program's text (lspci's) as Printable makes each of its lines, the line breaks and tabs
// kept: a page for a person, never a terminal escape. Longer than `max_bytes`: cut after
// the last whole line that fits, and "...(N bytes)" appended.
std::string PrintableText(std::string_view text, std::size_t max_bytes);

// How many bytes of a path a message quotes by default.
inline constexpr std::size_t kPrintablePathBytes = 256;

// A path as Printable makes it, but when it must be shortened it keeps its end, where the
// file's name is, and its start, and says how much of the middle went:
// "/tmp/xxxx...(412 bytes)...devices/0000:01:00.0/aer_dev_correctable". A long temporary
// directory used to push the file's name out of the line.
std::string PrintablePath(std::string_view path, std::size_t max_bytes = kPrintablePathBytes,
                          bool escape_quotes = false);

}  // namespace xferd::platform
