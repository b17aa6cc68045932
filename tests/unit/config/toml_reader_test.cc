// The schema-driven reader every section reads its keys with (config/toml_reader.cc): the
// message of every error (file, line, key, problem, fix), unknown keys with the closest
// known one, wrong types, ranges, NUL inside strings.
#include <string>
#include <utility>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(ConfigValidation, MessageNamesFileLineKeyProblemAndFix) {
  const ConfigError e = ErrorOf("# comment\n[probe]\ninterval = \"10ms\"\n");
  EXPECT_EQ(e.file(), "test.toml");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.key(), "probe.interval");
  EXPECT_THAT(e.what(),
              StartsWith("test.toml:3: probe.interval: must be at least 1s, got \"10ms\""));
  EXPECT_THAT(e.what(), HasSubstr("; fix: set interval = \"60s\" or longer"));
}

TEST(ConfigValidation, UnknownKeySuggestsClosest) {
  EXPECT_THAT(ErrorOf("[probe]\niteration = 5\n").what(), HasSubstr("did you mean iterations?"));
  EXPECT_THAT(ErrorOf("[daemon]\nlisten_address = \":1\"\n").what(),
              HasSubstr("listen_address belongs in [web]"));
  EXPECT_THAT(ErrorOf("[helth]\n").what(), HasSubstr("did you mean [health]?"));
  const ConfigError e = ErrorOf("[simulate]\n[[simulate.fault]]\nkind = \"lost\"\ndevise = 0\n");
  EXPECT_EQ(e.key(), "simulate.fault[0].devise");
  EXPECT_EQ(e.line(), 4);
  EXPECT_THAT(e.what(), HasSubstr("did you mean device?"));
}

TEST(ConfigValidation, WrongTypesSayWhatWasFound) {
  EXPECT_THAT(ErrorOf("[probe]\niterations = \"20\"\n").what(),
              HasSubstr("must be an integer, got a string (\"20\")"));
  EXPECT_THAT(ErrorOf("[busy]\nenabled = 1\n").what(),
              HasSubstr("must be true or false, got an integer (1)"));
  EXPECT_THAT(ErrorOf("[probe]\ninterval = 1979-05-27\n").what(), HasSubstr("got a date"));
  EXPECT_THAT(ErrorOf("[probe]\nmodes = [1]\n").what(), HasSubstr("each mode must be a string"));
}

TEST(ConfigValidation, Ranges) {
  const std::pair<const char*, const char*> cases[] = {
      {"[probe]\njitter = -0.1\n", "probe.jitter"},
      {"[probe]\nmax_duty_cycle = 1.5\n", "probe.max_duty_cycle"},
      {"[probe]\niterations = 10001\n", "probe.iterations"},
      {"[probe]\nchunk = \"255KiB\"\n", "probe.chunk"},
      {"[probe]\nsizes = [\"1023B\"]\n", "probe.sizes"},
      {"[probe]\nsizes = [\"1025MiB\"]\n", "probe.sizes"},
      {"[probe]\nstreams = 65\n", "probe.streams"},
      {"[probe]\ndrift = 1\n", "probe.drift"},
      {"[busy]\ngpu_utilization_percent = 0\n", "busy.gpu_utilization_percent"},
      {"[busy]\npcie_bytes_per_second = 0\n", "busy.pcie_bytes_per_second"},
      {"[health]\nbaseline_window = 0\n", "health.baseline_window"},
      {"[health]\nband_upper_fraction = nan\n", "health.band_upper_fraction"},
      {"[simulate]\ndevices = 0\n", "simulate.devices"},
      {"[simulate]\nlink_width = 3\n", "simulate.link_width"},
      {"[simulate]\ntime_scale = -1\n", "simulate.time_scale"},
      {"[simulate]\nseed = -1\n", "simulate.seed"},
  };
  for (const auto& [text, key] : cases) {
    const ConfigError e = ErrorOf(text);
    EXPECT_EQ(e.key(), key) << text;
    EXPECT_EQ(e.line(), 2) << text;
  }
}

TEST(ConfigValidation, NulInAnyStringIsRefusedWithItsLine) {
  for (const std::string& text :
       {std::string("[daemon]\nstate_dir = \"/var/lib/x\\u0000y\"\n"),
        std::string("[probe]\nmodes = [\"pinned\", \"pageable\\u0000\"]\n"),
        std::string("[simulate]\nunsupported = { pinned = \"why\\u0000\" }\n"),
        std::string("[web]\nlisten_address = \"\"\"\n:9742\\u0000\"\"\"\n")}) {
    const ConfigError e = ErrorOf(text);
    EXPECT_EQ(e.line(), 2) << text;
    EXPECT_THAT(e.problem(), HasSubstr("NUL")) << text;
  }
}

}  // namespace
}  // namespace xferd::config
