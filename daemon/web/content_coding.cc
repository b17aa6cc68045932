#include "web/content_coding.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

namespace xferd::web {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// "q=0.5" as RFC 9110's qvalue: 0 to 1 with up to three decimals; nullopt when malformed.
std::optional<double> Quality(std::string_view parameter) {
  parameter = Trim(parameter);
  if (parameter.size() < 3 || (parameter[0] != 'q' && parameter[0] != 'Q') || parameter[1] != '=') {
    return std::nullopt;
  }
  const std::string_view v = parameter.substr(2);
  if (v.empty() || (v[0] != '0' && v[0] != '1')) return std::nullopt;
  if (v.size() > 1 && (v[1] != '.' || v.size() > 5)) return std::nullopt;
  double value = v[0] - '0';
  double scale = 0.1;
  for (std::size_t i = 2; i < v.size(); ++i, scale /= 10) {
    if (!std::isdigit(static_cast<unsigned char>(v[i]))) return std::nullopt;
    value += (v[i] - '0') * scale;
  }
  if (value > 1) return std::nullopt;
  return value;
}

}  // namespace

bool AcceptsGzip(std::string_view accept_encoding) {
  std::optional<double> gzip, any;
  while (!accept_encoding.empty()) {
    const std::size_t comma = accept_encoding.find(',');
    std::string_view entry = accept_encoding.substr(0, comma);
    accept_encoding.remove_prefix(comma == std::string_view::npos ? accept_encoding.size()
                                                                  : comma + 1);
    const std::size_t semicolon = entry.find(';');
    const std::string_view coding = Trim(entry.substr(0, semicolon));
    std::optional<double> quality = 1.0;
    if (semicolon != std::string_view::npos) quality = Quality(entry.substr(semicolon + 1));
    if (!quality) continue;
    if (EqualsIgnoringCase(coding, "gzip") || EqualsIgnoringCase(coding, "x-gzip")) {
      gzip = gzip ? std::max(*gzip, *quality) : *quality;
    } else if (coding == "*") {
      any = *quality;
    }
  }
  if (gzip) return *gzip > 0;
  return any && *any > 0;
}

}  // namespace xferd::web
