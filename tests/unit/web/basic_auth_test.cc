// The one bcrypt check of a login's password (basic auth, the login verifier).
#include "web/basic_auth.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/http_client.h"

namespace xferd::web {
namespace {

using fakes::kTestHash;
using fakes::kTestPassword;

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

// The header as sent, byte for byte: a NUL in the password stays in it (libmicrohttpd's
// decoder handed credentials out as C strings, which cut it there).
TEST(BasicAuthorization, DecodesTheHeaderByteForByte) {
  const auto decoded =
      ParseBasicAuthorization("Basic " + EncodeBase64(std::string("bob:pw\0z", 8)));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->user, "bob");
  EXPECT_EQ(decoded->password, std::string("pw\0z", 4));
  EXPECT_EQ(ParseBasicAuthorization("basic   Ym9iOg==  ")->password, "");  // "bob:"
  EXPECT_EQ(ParseBasicAuthorization("Basic Ym9iOnB3")->password, "pw");    // padding left out
  for (const char* bad :
       {"", "Basic", "Basic ", "Bearer Ym9iOnB3", "Basic Ym9i", "Basic !!!",
        "Basic Ym9iOnB3=", "Basic Ym9i OnB3", "Basic Y", "BasicYm9iOnB3", "Basic ===="}) {
    EXPECT_FALSE(ParseBasicAuthorization(bad)) << bad;
  }
}

}  // namespace
}  // namespace xferd::web
