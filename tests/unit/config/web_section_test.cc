// [web] (config/web_section.cc): the listen address and the telemetry path, checked by
// the same functions as the flags and the server.
#include <string>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(Config, ListenAddressForms) {
  for (const char* good : {":9742", ":0", "127.0.0.1:9742", "localhost:65535", "[::1]:9742",
                           "[::]:0", "node-1.example.com:80"}) {
    EXPECT_EQ(Parse(std::string("[web]\nlisten_address = \"") + good + "\"\n").listen_address,
              good);
  }
  for (const char* bad : {"9742", ":", ":65536", ":-1", "[::1]9742", "[::1:9742", "::1:9742",
                          "a b:80", "[fe80::zz]:80", ":123456"}) {
    const ConfigError e = ErrorOf(std::string("[web]\nlisten_address = \"") + bad + "\"\n");
    EXPECT_EQ(e.key(), "web.listen_address") << bad;
    EXPECT_EQ(e.line(), 2) << bad;
  }
}

TEST(ConfigValidation, TelemetryPath) {
  for (const char* bad :
       {"\"\"", "\"/\"", "\"/healthz\"", "\"metrics\"", "\"/a b\"", "\"/m?x=1\""}) {
    EXPECT_EQ(ErrorOf(std::string("[web]\ntelemetry_path = ") + bad + "\n").key(),
              "web.telemetry_path")
        << bad;
  }
}

}  // namespace
}  // namespace xferd::config
