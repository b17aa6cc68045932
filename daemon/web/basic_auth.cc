#include "web/basic_auth.h"

#include <crypt.h>

#include <algorithm>
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

}  // namespace

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

}  // namespace xferd::web
