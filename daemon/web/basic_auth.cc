#include "web/basic_auth.h"

#include <crypt.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <regex>

namespace xferd::web {
namespace {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The value of a base64 digit (RFC 4648, the standard alphabet), or -1.
int Base64Digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict base64: the alphabet, then at most two '=' that complete the last group (clients
// that leave the padding out are accepted too); nullopt for anything else.
std::optional<std::string> DecodeBase64(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0 && text.size() - end < 2 && text[end - 1] == '=') --end;
  if (end != text.size() && text.size() % 4 != 0) return std::nullopt;
  if (end % 4 == 1) return std::nullopt;  // 6 bits cannot end a byte
  std::string out;
  out.reserve(end / 4 * 3 + 2);
  unsigned bits = 0;
  int held = 0;
  for (std::size_t i = 0; i < end; ++i) {
    const int digit = Base64Digit(text[i]);
    if (digit < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<unsigned>(digit);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out.push_back(static_cast<char>((bits >> held) & 0xff));
    }
  }
  return out;
}

}  // namespace

std::optional<BasicCredentials> ParseBasicAuthorization(std::string_view header) {
  // The scheme is case-insensitive (RFC 9110); one or more spaces follow it.
  constexpr std::string_view kScheme = "basic";
  if (header.size() <= kScheme.size() || header[kScheme.size()] != ' ') return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return std::nullopt;
  }
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  const std::optional<std::string> decoded = DecodeBase64(token);
  if (!decoded) return std::nullopt;
  const std::size_t colon = decoded->find(':');
  if (colon == std::string::npos) return std::nullopt;
  return BasicCredentials{decoded->substr(0, colon), decoded->substr(colon + 1)};
}

std::optional<std::string> BcryptHashProblem(const std::string& hash) {
  static const std::regex kBcrypt(R"(\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{53})");
  std::smatch m;
  if (!std::regex_match(hash, m, kBcrypt)) {
    return "is not a bcrypt hash (a plain-text password?); passwords are stored only as bcrypt "
           "hashes";
  }
  const int cost = std::stoi(m[1].str());
  if (cost < 4 || cost > 31) return "has bcrypt cost " + std::to_string(cost) + ", outside 4..31";
  if (cost > kMaxBcryptCost) {
    return "has bcrypt cost " + std::to_string(cost) + ", above xferd's limit of " +
           std::to_string(kMaxBcryptCost) + " (each step doubles the time of a check: cost " +
           std::to_string(cost) + " would hold a login for ~" + std::to_string(1u << (cost - 10)) +
           "x the 0.1 s of cost 10)";
  }
  return std::nullopt;
}

bool VerifyPasswordHash(const std::string& password, const std::string& hash) {
  if (hash.empty() || password.find('\0') != std::string::npos) return false;
  auto data = std::make_unique<crypt_data>();  // ~32 KiB: not for the stack
  std::memset(data.get(), 0, sizeof(crypt_data));
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  // libxcrypt signals a bad setting with a string starting with '*', or NULL.
  if (out == nullptr || out[0] == '*') return false;
  return ConstantTimeEquals(out, hash);
}

std::string EncodeBase64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string BasicAuthorization(std::string_view user, std::string_view password) {
  std::string credentials(user);
  credentials += ':';
  credentials += password;
  return "Basic " + EncodeBase64(credentials);
}

}  // namespace xferd::web
