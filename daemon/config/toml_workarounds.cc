#include "config/toml_workarounds.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <string>

namespace xferd::config {
namespace {

// Keys and table names longer than this are not xferd's: they are kept cut to it, so that
// a file of one huge [table] and many keys under it costs one pass, not one copy of the
// name per line.
constexpr std::size_t kMaxNameBytes = 256;

std::string Cut(std::string_view name) {
  return std::string(name.substr(0, kMaxNameBytes));
}

// The keys defined in the text, by line, for parse errors (which toml++ reports by
// position only): `visit(line, key)` for each line up to `last_line` that starts a
// [table] (key = the table) or a bare key (key = table.key); visit returns false to stop.
// One pass: a file may be 1 MiB.
template <typename Visit>
void ForEachKeyLine(std::string_view text, int last_line, Visit visit) {
  std::string table;
  int line = 1;
  std::size_t pos = 0;
  while (pos <= text.size() && line <= last_line) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view row = text.substr(pos, end - pos);
    while (!row.empty() && (row.front() == ' ' || row.front() == '\t')) row.remove_prefix(1);
    if (!row.empty() && row.front() == '[') {
      const std::size_t close = row.find(']');
      std::string_view name = row.substr(0, close == std::string_view::npos ? row.size() : close);
      while (!name.empty() && (name.front() == '[' || name.front() == ' ')) name.remove_prefix(1);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      table = Cut(name);
      if (!visit(line, table)) return;
    } else {
      std::size_t n = 0;
      while (n < row.size() && (std::isalnum(static_cast<unsigned char>(row[n])) || row[n] == '_' ||
                                row[n] == '-' || row[n] == '.')) {
        ++n;
      }
      // A bare key followed by '=' or a blank ("interval "60s"" lacks its '=').
      if (n > 0 && (n == row.size() || row[n] == '=' || row[n] == ' ' || row[n] == '\t')) {
        const std::string key = Cut(row.substr(0, n));
        if (!visit(line, table.empty() ? key : table + "." + key)) return;
      }
    }
    if (end == text.size()) break;
    pos = end + 1;
    ++line;
  }
}

}  // namespace

// The key defined on `line`, or "".
std::string KeyAtLine(std::string_view text, int line) {
  std::string found;
  ForEachKeyLine(text, line, [&](int at, const std::string& key) {
    if (at == line) found = key;
    return true;
  });
  return found;
}

// The last line at or above `line` that defines a key, and the key; {0, ""} if none.
std::pair<int, std::string> LastKeyAtOrAbove(std::string_view text, int line) {
  std::pair<int, std::string> last{0, ""};
  ForEachKeyLine(text, line, [&](int at, const std::string& key) {
    last = {at, key};
    return true;
  });
  return last;
}

// The line that defines `key` ("web.config_file"), or 0.
int LineOfKey(std::string_view text, std::string_view key) {
  int found = 0;
  ForEachKeyLine(text, INT_MAX, [&](int at, const std::string& k) {
    if (k == key) found = at;
    return found == 0;
  });
  return found;
}

std::optional<NestingProblem> FindTooDeepNesting(std::string_view text) {
  int line = 1;
  int depth = 0;  // open '[' and '{'
  int dots = 0;   // '.' since the last separator: the parts of a dotted key, less one
  std::size_t i = 0;
  const std::size_t n = text.size();
  const auto starts = [&](std::string_view token) { return text.substr(i, token.size()) == token; };
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
      ++i;
    } else if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      // A string is one key part or one value, whatever it holds. Its end is found as toml++
      // finds it: a multi-line string closes at the last quote of a run of three or more
      // ("""a"""" is `a"`), a single-line one at its quote or (an error) the line's end.
      const bool escapes = c == '"';
      const std::string triple(3, c);
      if (starts(triple)) {
        i += 3;
        while (i < n) {
          if (escapes && text[i] == '\\') {
            if (i + 1 < n && text[i + 1] == '\n') ++line;
            i += 2;
          } else if (starts(triple)) {
            while (i < n && text[i] == c) ++i;
            break;
          } else {
            if (text[i] == '\n') ++line;
            ++i;
          }
        }
      } else {
        ++i;
        while (i < n && text[i] != c && text[i] != '\n') {
          i += escapes && text[i] == '\\' && i + 1 < n && text[i + 1] != '\n' ? 2 : 1;
        }
        if (i < n && text[i] == c) ++i;
      }
    } else {
      if (c == '[' || c == '{') {
        if (++depth > kMaxBracketDepth) {
          return NestingProblem{line, "arrays or inline tables nested more than " +
                                          std::to_string(kMaxBracketDepth) + " deep"};
        }
        dots = 0;
      } else if (c == ']' || c == '}') {
        if (depth > 0) --depth;
        dots = 0;
      } else if (c == '=' || c == ',') {
        dots = 0;
      } else if (c == '.' && ++dots >= kMaxKeyParts) {
        return NestingProblem{line, "a key or table name of more than " +
                                        std::to_string(kMaxKeyParts) + " dotted parts"};
      }
      ++i;
    }
  }
  return std::nullopt;
}

// toml++ places some invalid UTF-8 on the line before; find the first bad byte ourselves.
// Returns 0 when the text is valid UTF-8, else the 1-based line of the first bad byte.
int FirstInvalidUtf8Line(std::string_view text, unsigned* byte) {
  int line = 1;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t min = 0;
    if (c < 0x80) {
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    if ((c & 0xe0) == 0xc0)
      length = 2, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
      length = 3, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
      length = 4, min = 0x10000;
    std::uint32_t code = length == 2 ? c & 0x1f : length == 3 ? c & 0x0f : c & 0x07;
    bool ok = length != 0 && i + length <= text.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      ok = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    if (!ok || code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      *byte = c;
      return line;
    }
    i += length;
  }
  return 0;
}

namespace {

// FirstNonAsciiOutsideStrings's walk through the text: where it is (i, line), which
// arrays and inline tables are open around it, and which TOML place comes next.
class NonAsciiScan {
 public:
  explicit NonAsciiScan(std::string_view text) : text_(text) {}

  // The 1-based line of the first non-ASCII character outside strings and comments, or 0.
  int Run() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (c == '\n') {
        ++line_;
        ++i_;
        if (open_.empty()) place_ = Place::kKey;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < text_.size() && text_[i_] != '\n') ++i_;
      } else if ((c == '"' || c == '\'') && place_ != Place::kAfterValue) {
        if (!SkipString(c)) return line_;
      } else if (NonAscii(i_)) {
        return line_;
      } else if (place_ == Place::kKey) {
        // Bare key parts, '.', a [table] header's brackets; '=' starts the value.
        if (c == '=') place_ = Place::kValue;
        if (c == '}' && !open_.empty()) open_.pop_back(), place_ = Place::kAfterValue;
        ++i_;
      } else if (c == ',') {
        place_ = AfterComma();
        ++i_;
      } else if (c == ']' || c == '}') {
        if (!open_.empty()) open_.pop_back();
        place_ = Place::kAfterValue;
        ++i_;
      } else if (place_ == Place::kValue && (c == '[' || c == '{')) {
        open_.push_back(c);
        place_ = c == '{' ? Place::kKey : Place::kValue;
        ++i_;
      } else if (!SkipBareValue()) {
        return line_;
      }
    }
    return 0;
  }

 private:
  enum class Place { kKey, kValue, kAfterValue };

  bool NonAscii(std::size_t at) const {
    return at < text_.size() && static_cast<unsigned char>(text_[at]) >= 0x80;
  }
  bool Starts(std::string_view token) const { return text_.substr(i_, token.size()) == token; }

  // From the quote `quote` at i: past the string it opens. False where an escape meets a
  // non-ASCII character.
  bool SkipString(char quote) {
    const std::string_view triple = quote == '"' ? "\"\"\"" : "\'\'\'";
    const bool multiline = Starts(triple);
    i_ += multiline ? 3 : 1;
    if (!SkipToClose(multiline ? triple : triple.substr(0, 1), quote == '"', multiline)) {
      return false;
    }
    if (place_ == Place::kValue) place_ = Place::kAfterValue;
    return true;
  }

  // Skips to just past `close` (not escaped when `escapes`), counting lines; a single-line
  // string also ends at a newline (toml++ reports that error itself). Returns false where an
  // escape meets a non-ASCII character.
  bool SkipToClose(std::string_view close, bool escapes, bool multiline) {
    while (i_ < text_.size()) {
      if (escapes && text_[i_] == '\\') {
        if (!SkipEscape(multiline)) return false;
        continue;
      }
      if (Starts(close)) {
        i_ += close.size();
        return true;
      }
      if (text_[i_] == '\n') {
        if (!multiline) return true;
        ++line_;
      }
      ++i_;
    }
    return true;
  }

  // From a backslash at i: past its escape. False where it meets a non-ASCII character
  // right after it or after spaces, or (a line-ending backslash in a multi-line string,
  // where toml++ skips the spaces and line breaks that follow) after those.
  bool SkipEscape(bool multiline) {
    std::size_t next = i_ + 1;
    while (next < text_.size() && (text_[next] == ' ' || text_[next] == '\t')) ++next;
    if (NonAscii(next)) return false;
    if (multiline && next < text_.size() && (text_[next] == '\n' || text_[next] == '\r')) {
      for (; next < text_.size() && std::isspace(static_cast<unsigned char>(text_[next])); ++next) {
        if (text_[next] == '\n') ++line_;
      }
      if (NonAscii(next)) return false;
      i_ = next;
      return true;
    }
    if (i_ + 1 < text_.size() && text_[i_ + 1] == '\n') ++line_;
    i_ += 2;
    return true;
  }

  // A bare value (a number, a boolean, a date, or anything toml++ reads as one), or
  // whatever stands after a value: toml++ reads it to the next terminator. False where it
  // holds a non-ASCII character.
  bool SkipBareValue() {
    for (; i_ < text_.size(); ++i_) {
      const char b = text_[i_];
      if (b == ' ' || b == '\t' || b == '\r' || b == '\n' || b == ']' || b == '}' || b == ',' ||
          b == '#')
        break;
      if (NonAscii(i_)) return false;
    }
    place_ = Place::kAfterValue;
    return true;
  }

  // What follows ',' or a newline inside brackets, and what a closing bracket leaves.
  Place AfterComma() const {
    return !open_.empty() && open_.back() == '{' ? Place::kKey : Place::kValue;
  }

  std::string_view text_;
  std::size_t i_ = 0;
  int line_ = 1;
  std::string open_;  // '[' and '{' of the arrays and inline tables around i_
  Place place_ = Place::kKey;
};

}  // namespace

// TOML allows non-ASCII text only inside strings and comments. Such a character anywhere
// else is rejected here, before toml++ 3.3 sees it: its whitespace classifier reaches
// __builtin_unreachable() for some of them (U+00A1..U+0499, U+2E6E..U+3267 and
// U+FB26..U+FEFE; found by fuzz/config_fuzzer). What counts is where toml++ itself reads a string:
// a quote opens one where a key or a value begins, never inside a bare value (`0.x["..."`: toml++
// reads that whole value up to a space, ']', '}', ',' or '#', testing each character for
// whitespace). So the scan follows TOML's places: keys (line start, after '{' or ',' in an inline
// table), values (after '=', '[' or ',' in an array) and what follows a value. A backslash escape
// in a basic string is never followed by a non-ASCII character, nor by spaces and then one, nor (a
// line-ending backslash) by spaces and line breaks and then one: toml++ tests those for whitespace
// too. Returns the 1-based line of the first one, or 0.
int FirstNonAsciiOutsideStrings(std::string_view text) {
  return NonAsciiScan(text).Run();
}

int FirstControlCharacterLine(std::string_view text, unsigned* byte) {
  int line = 1;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      ++line;
    } else if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
      *byte = c;
      return line;
    }
  }
  return 0;
}

}  // namespace xferd::config
