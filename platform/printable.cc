#include "platform/printable.h"

#include <cstdio>

namespace xferd::platform {
namespace {

// Length of the valid UTF-8 sequence at the start of `s` and its code point; 0 when the
// bytes there are not valid UTF-8 (overlong forms, surrogates and values past U+10FFFF too).
std::size_t Utf8Sequence(std::string_view s, char32_t* code_point) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  char32_t cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, cp = lead & 0x07;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3f);
  }
  if ((length == 3 && cp < 0x800) || (length == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  *code_point = cp;
  return length;
}

// Code points that are valid but must not be printed as they are: C1 controls, and the
// bidirectional overrides that make a log line read differently from what it holds.
bool Hidden(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f || cp == 0xfeff;
}

}  // namespace

std::string Printable(std::string_view text, std::size_t max_bytes, bool escape_quotes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto c = static_cast<unsigned char>(text[pos]);
    std::string piece;
    std::size_t consumed = 1;
    if (c >= 0x20 && c < 0x7f) {
      if (escape_quotes && (c == '"' || c == '\\')) piece += '\\';
      piece += static_cast<char>(c);
    } else if (c >= 0x80) {
      char32_t cp = 0;
      const std::size_t length = Utf8Sequence(text.substr(pos), &cp);
      if (length > 0 && !Hidden(cp)) {
        piece.assign(text.substr(pos, length));
        consumed = length;
      } else if (length > 0) {
        char buf[12];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
        piece = buf;
        consumed = length;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        piece = buf;
      }
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      piece = buf;
    }
    if (out.size() + piece.size() > max_bytes) {
      out += "...(" + std::to_string(text.size()) + " bytes)";
      return out;
    }
    out += piece;
    pos += consumed;
  }
  return out;
}

std::string PrintableText(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find_first_of("\n\t", pos), text.size());
    std::string piece = Printable(text.substr(pos, end - pos), text.size());
    if (end < text.size()) piece += text[end];
    if (out.size() + piece.size() > max_bytes) {
      // Back to whole lines, leaving room for the mark.
      const std::string mark = "...(" + std::to_string(text.size()) + " bytes)";
      const std::size_t last = out.rfind('\n');
      out.resize(last == std::string::npos ? 0 : last + 1);
      while (!out.empty() && out.size() + mark.size() > max_bytes) {
        const std::size_t previous =
            out.size() >= 2 ? out.rfind('\n', out.size() - 2) : std::string::npos;
        out.resize(previous == std::string::npos ? 0 : previous + 1);
      }
      return mark.size() <= max_bytes ? out + mark : out;
    }
    out += piece;
    pos = end + 1;
  }
  return out;
}

std::string PrintablePath(std::string_view path, std::size_t max_bytes, bool escape_quotes) {
  const std::string whole = Printable(path, std::string_view::npos, escape_quotes);
  if (whole.size() <= max_bytes) return whole;
  // Where a cut may fall in the escaped text: not inside a UTF-8 sequence (every other byte
  // is ASCII), and not inside an escape ("\xHH", "\uHHHH", "\\", "\\\"").
  const auto boundary = [&](std::size_t at) {
    if (at == 0 || at >= whole.size()) return true;
    if ((static_cast<unsigned char>(whole[at]) & 0xc0) == 0x80) return false;
    for (std::size_t back = 1; back <= 5 && back <= at; ++back) {
      if (whole[at - back] == '\\') {
        const std::size_t length = whole[at - back + 1] == 'u'   ? 6
                                   : whole[at - back + 1] == 'x' ? 4
                                                                 : 2;
        if (back < length) return false;
        break;
      }
    }
    return true;
  };
  const std::string marker_sample = "...(" + std::to_string(path.size()) + " bytes)...";
  const std::size_t room =
      max_bytes > marker_sample.size() + 8 ? max_bytes - marker_sample.size() : 8;
  // Two thirds of the room for the end, starting at a '/' when one is in reach.
  std::size_t tail = whole.size() - room * 2 / 3;
  const std::size_t slash = whole.find('/', tail);
  if (slash != std::string::npos && slash + 1 < whole.size()) tail = slash;
  while (!boundary(tail)) ++tail;
  std::size_t head = room - (whole.size() - tail);
  while (head > 0 && !boundary(head)) --head;
  return whole.substr(0, head) + "...(" + std::to_string(path.size()) + " bytes)..." +
         whole.substr(tail);
}

}  // namespace xferd::platform
