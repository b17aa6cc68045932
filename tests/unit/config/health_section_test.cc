// [health] (config/health_section.cc): the [[health.band]] overrides.
#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(ConfigValidation, Bands) {
  EXPECT_EQ(ErrorOf("[[health.band]]\nlower = \"1GB/s\"\nupper = \"2GB/s\"\n").key(),
            "health.band[0].gpu");
  EXPECT_EQ(ErrorOf("[[health.band]]\ngpu = \"0\"\nupper = \"2GB/s\"\n").key(),
            "health.band[0].lower");
  EXPECT_EQ(ErrorOf("[[health.band]]\ngpu = \"0\"\nlower = \"1GB/s\"\nupper = \"2GB/s\"\nmid = 1\n")
                .key(),
            "health.band[0].mid");
  EXPECT_EQ(ErrorOf("[[health.band]]\ngpu = \"0\"\nlower = true\nupper = \"2GB/s\"\n").key(),
            "health.band[0].lower");
}

}  // namespace
}  // namespace xferd::config
