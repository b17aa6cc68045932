// The one listen-address parser (the config file, --web.listen-address, the server):
// node_exporter's forms, and a message naming the fix for anything else.
#include "web/listen_address.h"

#include <gtest/gtest.h>

#include <string>

#include "web/http_error.h"

namespace xferd::web {
namespace {

TEST(ListenAddress, AcceptsNodeExporterForms) {
  EXPECT_EQ(ParseListenAddress(":9742").host, "");
  EXPECT_EQ(ParseListenAddress(":9742").port, 9742);
  EXPECT_EQ(ParseListenAddress("127.0.0.1:0").host, "127.0.0.1");
  EXPECT_EQ(ParseListenAddress("[::1]:9742").host, "::1");
  EXPECT_EQ(ParseListenAddress("localhost:80").port, 80);
}

TEST(ListenAddress, RejectsBadFormsNamingTheFix) {
  for (const std::string bad : {"9742", "host", ":", ":70000", ":-1", ":12ab", "::1:9742", "[::1]",
                                "[nothost]:1", "[::1]9742", "1.2.3.4:"}) {
    try {
      ParseListenAddress(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const HttpError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("fix:"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace xferd::web
