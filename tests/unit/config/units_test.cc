// Durations and bandwidths (config/units.cc): what the file and the flags may write.
#include "config/units.h"

#include <chrono>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

using std::chrono::milliseconds;

TEST(Config, ValueSyntaxes) {
  EXPECT_EQ(ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(ParseDuration("5s"), milliseconds(5000));
  EXPECT_EQ(ParseDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(ParseDuration("2m"), milliseconds(120000));
  EXPECT_EQ(ParseDuration("1h"), milliseconds(3600000));
  for (const char* bad : {"", "5", "s", "5 s", "-5s", "5sec", "1e3s", "5S", "99999999999h"}) {
    EXPECT_FALSE(ParseDuration(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatDuration(milliseconds(60000)), "1m");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(ParseBandwidth("20GB/s"), 20e9);
  EXPECT_EQ(ParseBandwidth("20e9"), 20e9);
  EXPECT_EQ(ParseBandwidth("2.5 GiB/s"), 2.5 * 1073741824.0);
  EXPECT_EQ(ParseBandwidth("512 MB/s"), 512e6);
  for (const char* bad : {"", "GB/s", "20Gb/s", "20 gbps", "20GB", "fast", "20GB/s/s"}) {
    EXPECT_FALSE(ParseBandwidth(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace xferd::config
