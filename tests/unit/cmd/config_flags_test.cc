// The one merge of command-line flags over the config file, for `xferd probe` and `xferd
// run` (cmd::ConfigWithFlags): a flag given wins, one not given leaves the file's value,
// and a bad flag is a usage error that names it, checked as the file's key would be.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmd/commands.h"
#include "testing/fakes.h"

namespace xferd::cmd {
namespace {

using probes::TransferMode;
using ::testing::HasSubstr;

// The UsageError `flags` get; fails the test when there is none.
std::string UsageErrorOf(const ConfigFlags& flags) {
  try {
    ConfigWithFlags(flags);
  } catch (const UsageError& e) {
    EXPECT_EQ(e.failure(), platform::Failure::kUsage);
    return e.what();
  }
  ADD_FAILURE() << "no usage error";
  return "";
}

TEST(ConfigWithFlags, WithoutAFileAndFlagsTheDefaults) {
  const config::Config c = ConfigWithFlags({});
  const config::Config d;
  EXPECT_EQ(c.modes, d.modes);
  EXPECT_EQ(c.iterations, d.iterations);
  EXPECT_EQ(c.sim.seed, d.sim.seed);
  EXPECT_EQ(c.listen_address, d.listen_address);
  EXPECT_FALSE(c.simulate);
}

TEST(ConfigWithFlags, AFlagGivenWinsOneNotGivenLeavesTheFilesValue) {
  fakes::TempDir dir("flags");
  ConfigFlags flags;
  flags.config_file = dir.Write("xferd.toml",
                                "[probe]\nmodes = [\"pageable\"]\niterations = 5\nwarmup = 3\n"
                                "[simulate]\nseed = 7\n[daemon]\nstate_dir = \"/var/lib/a\"\n")
                          .string();
  const config::Config file = ConfigWithFlags(flags);
  EXPECT_EQ(file.modes, (std::vector{TransferMode::kPageable}));
  EXPECT_EQ(file.iterations, 5);
  EXPECT_EQ(file.warmup, 3);
  EXPECT_EQ(file.sim.seed, 7u);
  EXPECT_EQ(file.state_dir, "/var/lib/a");

  // Given, even at the default's value, a flag wins.
  flags.iterations = 20;
  flags.seed = 1;
  flags.modes = {"PINNED", "pinned", "zero_copy"};  // any case, each once
  flags.sizes = {"4KiB", "1MiB"};
  flags.state_dir = "/var/lib/b";
  flags.simulate = true;
  flags.sysfs_root = "/tmp/tree";
  const config::Config c = ConfigWithFlags(flags);
  EXPECT_EQ(c.iterations, 20);
  EXPECT_EQ(c.warmup, 3) << "not given: the file's";
  EXPECT_EQ(c.sim.seed, 1u);
  EXPECT_EQ(c.modes, (std::vector{TransferMode::kPinned, TransferMode::kZeroCopy}));
  EXPECT_EQ(c.sizes, (std::vector<std::uint64_t>{4096, 1 << 20}));
  EXPECT_EQ(c.state_dir, "/var/lib/b");
  EXPECT_TRUE(c.simulate);
  EXPECT_EQ(c.sim.sysfs_root, "/tmp/tree");
}

TEST(ConfigWithFlags, RunsFlagsAreCheckedAsTheFilesKeysAre) {
  ConfigFlags flags;
  flags.listen_address = "127.0.0.1:19742";
  flags.telemetry_path = "/probe/metrics";
  flags.log_level = "debug";
  const config::Config c = ConfigWithFlags(flags);
  EXPECT_EQ(c.listen_address, "127.0.0.1:19742");
  EXPECT_EQ(c.telemetry_path, "/probe/metrics");
  EXPECT_EQ(c.log_level, "debug");

  ConfigFlags bad;
  bad.listen_address = "9742";
  EXPECT_THAT(UsageErrorOf(bad), HasSubstr("--web.listen-address: "));
  bad = {};
  bad.telemetry_path = "/healthz";
  EXPECT_THAT(UsageErrorOf(bad), HasSubstr("--web.telemetry-path: "));
  bad = {};
  bad.log_level = "loud";
  EXPECT_THAT(UsageErrorOf(bad), HasSubstr("--log.level \"loud\": unknown level; use one of"));
}

TEST(ConfigWithFlags, ProbesFlagsNameTheBadValueAndTheChoices) {
  ConfigFlags flags;
  flags.modes = {"warp_drive"};
  const std::string mode = UsageErrorOf(flags);
  EXPECT_THAT(mode, HasSubstr("unknown mode \"warp_drive\" in --mode"));
  EXPECT_THAT(mode, HasSubstr("pinned_async"));
  flags = {};
  for (const char* bad : {"12parsecs", "0"}) {
    flags.sizes = {bad};
    EXPECT_THAT(UsageErrorOf(flags), HasSubstr(std::string("bad transfer size \"") + bad));
  }
}

TEST(ConfigWithFlags, AFileThatDoesNotLoadIsAConfigError) {
  fakes::TempDir dir("flags");
  ConfigFlags flags;
  flags.config_file = dir.Write("bad.toml", "[probe]\ninterval = \"10ms\"\n").string();
  flags.iterations = 3;
  EXPECT_THROW(ConfigWithFlags(flags), config::ConfigError);
}

}  // namespace
}  // namespace xferd::cmd
