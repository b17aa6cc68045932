// The one error of a bad file (config/config_error.cc): whatever it quotes is escaped and
// capped.
#include "config/config_error.h"

#include <string>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(ConfigErrors, EchoedInputIsEscapedAndCapped) {
  const ConfigError e("f.toml", 3, std::string("bad\x1b[2Jkey\n") + std::string(100000, 'k'),
                      std::string("problem with \xff\xfe raw bytes and a bell \a"), "fix it");
  const std::string what = e.what();
  EXPECT_LT(what.size(), 1500u);
  EXPECT_EQ(what.find('\x1b'), std::string::npos);
  EXPECT_EQ(what.find('\n'), std::string::npos);
  EXPECT_THAT(what, HasSubstr("bad\\x1b[2Jkey\\x0a"));
  EXPECT_THAT(what, HasSubstr("\\xff\\xfe raw bytes and a bell \\x07"));
  EXPECT_THAT(what, HasSubstr("...(100011 bytes)"));
}

}  // namespace
}  // namespace xferd::config
