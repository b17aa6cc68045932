// Basic auth as exporter-toolkit does it: users with bcrypt hashes. The one check of what
// a hash must look like (config and server ask the same question) and the one verifier.
#pragma once

#include <optional>
#include <string>

namespace xferd::web {

inline constexpr const char* kBcryptFix =
    "generate one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'  and paste it (quoted) as the "
    "value";

// nullopt when `hash` is bcrypt as exporter-toolkit accepts it ($2a$, $2b$ or $2y$, a cost
// of 4..31, 53 more characters); else what is wrong, to follow "<user> ".
std::optional<std::string> BcryptHashProblem(const std::string& hash);

// True when `password` matches the crypt(3) `hash` ($2b$/$2y$/$2a$ bcrypt, and any other
// scheme libxcrypt knows). Compares in constant time. A malformed hash never matches.
bool VerifyPasswordHash(const std::string& password, const std::string& hash);

}  // namespace xferd::web
