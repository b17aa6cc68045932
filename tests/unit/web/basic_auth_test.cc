// The one bcrypt check of a login's password (basic auth, the login verifier).
#include "web/basic_auth.h"

#include <gtest/gtest.h>

#include <string>

namespace xferd::web {
namespace {

// bcrypt (cost 10) of "test-password", made with Python's crypt module.
constexpr const char* kTestHash = "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi";
constexpr const char* kTestPassword = "test-password";

TEST(PasswordHash, VerifiesBcrypt) {
  EXPECT_TRUE(VerifyPasswordHash(kTestPassword, kTestHash));
  EXPECT_FALSE(VerifyPasswordHash("test-passwore", kTestHash));
  EXPECT_FALSE(VerifyPasswordHash("", kTestHash));
  // htpasswd writes $2y$; libxcrypt treats it as $2b$.
  std::string y = kTestHash;
  y[2] = 'y';
  EXPECT_TRUE(VerifyPasswordHash(kTestPassword, y));
  EXPECT_FALSE(VerifyPasswordHash(kTestPassword, "not-a-hash"));
  EXPECT_FALSE(VerifyPasswordHash(kTestPassword, "$2b$10$short"));
  EXPECT_FALSE(VerifyPasswordHash(kTestPassword, ""));
}

}  // namespace
}  // namespace xferd::web
