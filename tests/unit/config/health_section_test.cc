// [health] (config/health_section.cc): the [[health.band]] overrides and the link watch.
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

TEST(ConfigValidation, LinkWatch) {
  const Config defaults = Parse("[health]\n");
  EXPECT_EQ(defaults.link_watch_interval, std::chrono::milliseconds(2000));
  EXPECT_EQ(defaults.link_flap_window, std::chrono::minutes(10));
  EXPECT_EQ(defaults.link_flap_transitions, 4);
  const Config off = Parse("[health]\nlink_watch_interval = \"0s\"\n");
  EXPECT_EQ(off.link_watch_interval.count(), 0);
  const Config set = Parse(
      "[health]\nlink_watch_interval = \"500ms\"\nlink_flap_window = \"5m\"\n"
      "link_flap_transitions = 6\n");
  EXPECT_EQ(set.link_watch_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(set.link_flap_window, std::chrono::minutes(5));
  EXPECT_EQ(set.link_flap_transitions, 6);
  // Faster than 100 ms would cost more than the watch is worth: refused, with the fix.
  const ConfigError fast = ErrorOf("[health]\nlink_watch_interval = \"50ms\"\n");
  EXPECT_EQ(fast.key(), "health.link_watch_interval");
  EXPECT_NE(std::string(fast.what()).find("0 (the link watch off) or at least 100ms"),
            std::string::npos)
      << fast.what();
  EXPECT_EQ(ErrorOf("[health]\nlink_watch_interval = 2\n").key(), "health.link_watch_interval");
  // A window of fewer than 10 polls could not tell a flap from one retrain.
  const ConfigError narrow =
      ErrorOf("[health]\nlink_watch_interval = \"10s\"\nlink_flap_window = \"30s\"\n");
  EXPECT_EQ(narrow.key(), "health.link_flap_window");
  EXPECT_NE(std::string(narrow.what()).find("at least 10 polls"), std::string::npos);
  EXPECT_EQ(ErrorOf("[health]\nlink_flap_transitions = 0\n").key(), "health.link_flap_transitions");
}

}  // namespace
}  // namespace xferd::config
