// Basic auth as exporter-toolkit does it: users with bcrypt hashes. The one check of what
// a hash must look like (config and server ask the same question) and the one verifier.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace xferd::web {

inline constexpr const char* kBcryptFix =
    "generate one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'  and paste it (quoted) as the "
    "value";

// The highest bcrypt cost accepted. Each step doubles the time of a check: cost 10 takes
// ~0.1 s and 12 ~0.4 s on one core of the build machine (docs/http.md), and a login that is
// not cached waits for a few of them during a flood of guesses. exporter-toolkit accepts
// up to 31 (about a day per check).
inline constexpr int kMaxBcryptCost = 12;

// nullopt when `hash` is bcrypt as exporter-toolkit accepts it ($2a$, $2b$ or $2y$, 53 more
// characters) with a cost of 4..kMaxBcryptCost; else what is wrong, to follow "<user> ".
std::optional<std::string> BcryptHashProblem(const std::string& hash);

// The user and password of an Authorization header's value ("Basic " and the base64 of
// "user:password", RFC 7617), byte for byte as sent: a NUL or any other byte stays in the
// string where it was (libmicrohttpd's own decoder hands them out as C strings, which cut
// "bob:bobpw\0zzz" to the password "bobpw"). nullopt for another scheme, base64 that is not
// valid, or no ':'.
struct BasicCredentials {
  std::string user, password;
};
std::optional<BasicCredentials> ParseBasicAuthorization(std::string_view header);
// What a client sends: "Basic " and the base64 of "user:password", byte for byte.
std::string BasicAuthorization(std::string_view user, std::string_view password);
// Standard base64 with padding (RFC 4648).
std::string EncodeBase64(std::string_view bytes);

// True when `password` matches the crypt(3) `hash` ($2b$/$2y$/$2a$ bcrypt, and any other
// scheme libxcrypt knows). Compares in constant time. A malformed hash never matches.
bool VerifyPasswordHash(const std::string& password, const std::string& hash);

}  // namespace xferd::web
