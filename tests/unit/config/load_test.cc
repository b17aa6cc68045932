// A file to a Config (config/load.cc): the defaults, the shipped example, every key, and
// what is refused before and while TOML is parsed: empty, oversized and unreadable files,
// syntax errors, invalid UTF-8, non-ASCII outside strings, raw control characters.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/toml_reader.h"
#include "config/toml_workarounds.h"
#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

using std::chrono::milliseconds;
using ::testing::Not;

TEST(Config, CommentOnlyFileGivesDefaults) {
  const Config c = Parse("# all defaults\n");
  const Config d;
  EXPECT_EQ(c.listen_address, ":9742");
  EXPECT_EQ(c.telemetry_path, "/metrics");
  EXPECT_EQ(c.interval, milliseconds(60000));
  EXPECT_EQ(c.probe_deadline, milliseconds(5000));
  EXPECT_EQ(c.cycle_budget, milliseconds(30000));
  EXPECT_EQ(c.modes, d.modes);
  EXPECT_EQ(c.modes.size(), 6u);
  EXPECT_EQ(c.sizes, std::vector<std::uint64_t>{64ull << 20});
  EXPECT_FALSE(c.simulate);
  EXPECT_EQ(c.source, "test.toml");
}

TEST(Config, ShippedExampleSpellsOutEveryDefault) {
  const Config c = LoadConfig(kExample);
  const Config d;
  EXPECT_EQ(c.listen_address, d.listen_address);
  EXPECT_EQ(c.telemetry_path, d.telemetry_path);
  EXPECT_EQ(c.web_config_file, d.web_config_file);
  EXPECT_EQ(c.reload_may_remove_protection, d.reload_may_remove_protection);
  EXPECT_FALSE(c.reload_may_remove_protection);
  EXPECT_EQ(c.state_dir, d.state_dir);
  EXPECT_EQ(c.textfile_path, d.textfile_path);
  EXPECT_EQ(c.log_level, d.log_level);
  EXPECT_EQ(c.interval, d.interval);
  EXPECT_EQ(c.jitter, d.jitter);
  EXPECT_EQ(c.modes, d.modes);
  EXPECT_EQ(c.bidirectional, d.bidirectional);
  EXPECT_EQ(c.sizes, d.sizes);
  EXPECT_EQ(c.iterations, d.iterations);
  EXPECT_EQ(c.warmup, d.warmup);
  EXPECT_EQ(c.sizes_follow_link, d.sizes_follow_link);
  EXPECT_EQ(c.probe_time, d.probe_time);
  EXPECT_EQ(c.min_iterations, d.min_iterations);
  EXPECT_EQ(c.probe_deadline, d.probe_deadline);
  EXPECT_EQ(c.cycle_budget, d.cycle_budget);
  EXPECT_EQ(c.max_duty_cycle, d.max_duty_cycle);
  EXPECT_EQ(c.burst_reserve_s, d.burst_reserve_s);
  EXPECT_EQ(c.streams, d.streams);
  EXPECT_EQ(c.chunk_bytes, d.chunk_bytes);
  EXPECT_EQ(c.pinned_cap_bytes, d.pinned_cap_bytes);
  EXPECT_EQ(c.gpus, d.gpus);
  EXPECT_EQ(c.busy_detection, d.busy_detection);
  EXPECT_EQ(c.busy_gpu_utilization_percent, d.busy_gpu_utilization_percent);
  EXPECT_EQ(c.busy_pcie_bytes_per_s, d.busy_pcie_bytes_per_s);
  EXPECT_EQ(c.consecutive_bad, d.consecutive_bad);
  EXPECT_EQ(c.baseline_window, d.baseline_window);
  EXPECT_EQ(c.drift_fraction, d.drift_fraction);
  EXPECT_EQ(c.band_lower_fraction, d.band_lower_fraction);
  EXPECT_EQ(c.band_upper_fraction, d.band_upper_fraction);
  EXPECT_TRUE(c.bands.empty());
  EXPECT_EQ(c.metrics_profile, d.metrics_profile);
  EXPECT_EQ(c.simulate, d.simulate);
  EXPECT_EQ(c.sim.devices, d.sim.devices);
  EXPECT_EQ(c.sim.seed, d.sim.seed);
  EXPECT_EQ(c.sim.link_gen, d.sim.link_gen);
  EXPECT_EQ(c.sim.link_width, d.sim.link_width);
  EXPECT_EQ(c.sim.integrated, d.sim.integrated);
  EXPECT_EQ(c.sim.time_scale, d.sim.time_scale);
  EXPECT_EQ(c.sim_speedup, d.sim_speedup);
  EXPECT_TRUE(c.sim.faults.empty());
  EXPECT_TRUE(c.sim.unsupported.empty());
  EXPECT_EQ(c.sim_gpu_utilization_percent, d.sim_gpu_utilization_percent);
  EXPECT_EQ(c.sim_pcie_bytes_per_s, d.sim_pcie_bytes_per_s);
  EXPECT_EQ(c.sim.foreign_traffic.bytes_per_s, d.sim.foreign_traffic.bytes_per_s);
  EXPECT_EQ(c.sim.foreign_traffic.duty, d.sim.foreign_traffic.duty);
  EXPECT_EQ(c.sim.foreign_traffic.direction, d.sim.foreign_traffic.direction);
}

// Every key commented out in the example (band, fault, web config) is valid when enabled.
TEST(Config, ShippedExampleWithCommentedBlocksEnabled) {
  std::string text = ReadAll(kExample);
  for (const char* line : {"# [[health.band]]", "# gpu = \"0\"", "# lower = \"20GB/s\"",
                           "# upper = \"26GB/s\"", "# [[simulate.fault]]", "# kind = \"degrade\"",
                           "# device = 0", "# factor = 0.5", "# unsupported = {"}) {
    const auto at = text.find(line);
    ASSERT_NE(at, std::string::npos) << line;
    text.erase(at, 2);
  }
  const Config c = Parse(text);
  ASSERT_EQ(c.bands.size(), 1u);
  EXPECT_EQ(c.bands[0].lower_bytes_per_s, 20e9);
  ASSERT_EQ(c.sim.faults.size(), 1u);
  EXPECT_EQ(c.sim.faults[0].kind, probes::SimFault::Kind::kDegrade);
  EXPECT_EQ(c.sim.unsupported.at(probes::TransferMode::kManaged),
            "no concurrentManagedAccess (simulated)");
}

TEST(Config, EveryKeyOverrides) {
  TempDir dir;
  const auto file = dir.Write("xferd.toml", R"toml(
[web]
listen_address = "[::1]:0"
telemetry_path = "/probe-metrics"

[daemon]
state_dir = "state"
textfile_path = "/var/lib/node_exporter/xferd.prom"
log_level = "debug"

[probe]
interval = "2m"
jitter = 0
modes = ["pinned", "zero_copy"]
bidirectional = false
sizes = ["4KiB", 16777216]
iterations = 50
warmup = 0
deadline = "1500ms"
cycle_budget = "10s"
max_duty_cycle = 1
burst_reserve = "2s"
streams = 8
chunk = "256KiB"
pinned_cap = "1GiB"
gpus = ["0", 1, "GPU-5c3b6a2e-1f0d-4c4e-9a7b-0123456789ab"]

[busy]
enabled = false
gpu_utilization_percent = 90.5
pcie_bytes_per_second = "2.5 GiB/s"

[health]
consecutive_bad = 5
baseline_window = 100
drift_fraction = 0.7
band_lower_fraction = 0.5
band_upper_fraction = 0.9

[[health.band]]
gpu = "0"
lower = "20GB/s"
upper = 26e9

[[health.band]]
gpu = "GPU-5c3b6a2e-1f0d-4c4e-9a7b-0123456789ab"
lower = 40000000000
upper = "52 GB/s"

[simulate]
enabled = true
devices = 3
seed = 42
link_gen = 5
link_width = 8
integrated = true
time_scale = 0
gpu_utilization_percent = 95
pcie_bytes_per_second = "12GB/s"
unsupported = { zero_copy = "no mapped memory (simulated)" }
foreign_traffic_bytes_per_second = "20GB/s"
foreign_traffic_duty = 0.25
foreign_traffic_direction = "bidir"

[[simulate.fault]]
kind = "downtrain"
device = 1
width = 4

[[simulate.fault]]
kind = "error_every"
every = 7

[[simulate.fault]]
kind = "slow"
factor = 20

[[simulate.fault]]
kind = "hang"
device = 2
)toml");
  const Config c = LoadConfig(file);
  EXPECT_EQ(c.listen_address, "[::1]:0");
  EXPECT_EQ(c.telemetry_path, "/probe-metrics");
  EXPECT_EQ(c.state_dir, dir.path() / "state");  // relative to the config file
  EXPECT_EQ(c.textfile_path, "/var/lib/node_exporter/xferd.prom");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.interval, milliseconds(120000));
  EXPECT_EQ(c.jitter, 0.0);
  EXPECT_EQ(c.modes, (std::vector{probes::TransferMode::kPinned, probes::TransferMode::kZeroCopy}));
  EXPECT_FALSE(c.bidirectional);
  EXPECT_EQ(c.sizes, (std::vector<std::uint64_t>{4096, 16u << 20}));
  EXPECT_EQ(c.iterations, 50);
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.probe_deadline, milliseconds(1500));
  EXPECT_EQ(c.cycle_budget, milliseconds(10000));
  EXPECT_EQ(c.max_duty_cycle, 1.0);
  EXPECT_EQ(c.burst_reserve_s, 2.0);
  EXPECT_EQ(c.streams, 8);
  EXPECT_EQ(c.chunk_bytes, 256u << 10);
  EXPECT_EQ(c.pinned_cap_bytes, 1ull << 30);
  EXPECT_EQ(c.gpus,
            (std::vector<std::string>{"0", "1", "GPU-5c3b6a2e-1f0d-4c4e-9a7b-0123456789ab"}));
  EXPECT_FALSE(c.busy_detection);
  EXPECT_EQ(c.busy_gpu_utilization_percent, 90.5);
  EXPECT_EQ(c.busy_pcie_bytes_per_s, 2.5 * (1ull << 30));
  EXPECT_EQ(c.consecutive_bad, 5);
  EXPECT_EQ(c.baseline_window, 100);
  EXPECT_EQ(c.drift_fraction, 0.7);
  EXPECT_EQ(c.band_lower_fraction, 0.5);
  EXPECT_EQ(c.band_upper_fraction, 0.9);
  ASSERT_EQ(c.bands.size(), 2u);
  EXPECT_EQ(c.bands[0].gpu, "0");
  EXPECT_EQ(c.bands[0].lower_bytes_per_s, 20e9);
  EXPECT_EQ(c.bands[0].upper_bytes_per_s, 26e9);
  EXPECT_EQ(c.bands[1].lower_bytes_per_s, 40e9);
  EXPECT_EQ(c.bands[1].upper_bytes_per_s, 52e9);
  EXPECT_TRUE(c.simulate);
  EXPECT_EQ(c.sim.devices, 3);
  EXPECT_EQ(c.sim.seed, 42u);
  EXPECT_EQ(c.sim.link_gen, 5);
  EXPECT_EQ(c.sim.link_width, 8);
  EXPECT_TRUE(c.sim.integrated);
  EXPECT_EQ(c.sim.time_scale, 0.0);
  EXPECT_EQ(c.sim_gpu_utilization_percent, 95.0);
  EXPECT_EQ(c.sim_pcie_bytes_per_s, 12e9);
  EXPECT_EQ(c.sim.foreign_traffic.bytes_per_s, 20e9);
  EXPECT_EQ(c.sim.foreign_traffic.duty, 0.25);
  EXPECT_EQ(c.sim.foreign_traffic.direction, probes::Direction::kBidirectional);
  ASSERT_EQ(c.sim.unsupported.size(), 1u);
  EXPECT_EQ(c.sim.unsupported.at(probes::TransferMode::kZeroCopy), "no mapped memory (simulated)");
  ASSERT_EQ(c.sim.faults.size(), 4u);
  EXPECT_EQ(c.sim.faults[0].kind, probes::SimFault::Kind::kDownTrain);
  EXPECT_EQ(c.sim.faults[0].device, 1);
  EXPECT_EQ(c.sim.faults[0].gen, 5);  // unset: stays at the simulated link's generation
  EXPECT_EQ(c.sim.faults[0].width, 4);
  EXPECT_EQ(c.sim.faults[1].kind, probes::SimFault::Kind::kErrorEvery);
  EXPECT_EQ(c.sim.faults[1].every, 7);
  EXPECT_EQ(c.sim.faults[1].device, -1);
  EXPECT_EQ(c.sim.faults[2].factor, 20.0);
  EXPECT_EQ(c.sim.faults[3].kind, probes::SimFault::Kind::kHang);
}

TEST(ConfigValidation, EmptyAndOversizedFiles) {
  for (const char* blank : {"", " ", "\n\n\t\r\n"}) {
    const ConfigError e = ErrorOf(blank);
    EXPECT_EQ(e.line(), 0);
    EXPECT_THAT(e.what(), HasSubstr("deploy/xferd.toml"));
  }
  EXPECT_THAT(ErrorOf(std::string(2 << 20, '#')).what(), HasSubstr("a config is a few KiB"));
}

TEST(ConfigValidation, SyntaxErrorsNameTheLineAndKey) {
  const ConfigError dup = ErrorOf("[web]\nlisten_address = \":1\"\nlisten_address = \":2\"\n");
  EXPECT_EQ(dup.line(), 3);
  EXPECT_EQ(dup.key(), "web.listen_address");
  EXPECT_THAT(dup.what(), HasSubstr("not valid TOML"));
  // Left open at the end of the file: named at the key that opened it, in one pass even
  // for a file of half a million lines (a quadratic search here would hang the test).
  const ConfigError open = ErrorOf("[probe]\nmodes = [\"pinned\",\n" + std::string(500000, '\n'));
  EXPECT_EQ(open.line(), 2);
  EXPECT_EQ(open.key(), "probe.modes");
  const ConfigError garbage = ErrorOf(std::string("[probe]\n\xff\xfe\x00\x01", 12));
  EXPECT_EQ(garbage.line(), 2);
  EXPECT_THAT(garbage.what(), HasSubstr("invalid UTF-8 (byte 0xff)"));
  // Overlong encodings and UTF-16 surrogates are not UTF-8 either.
  EXPECT_EQ(ErrorOf("a = 1\nb = \"\xc0\xaf\"\n").line(), 2);
  EXPECT_EQ(ErrorOf("\n\n# \xed\xa0\x80\n").line(), 3);
  EXPECT_NO_THROW(Parse("# caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n"));
}

// A value TOML cannot read at all (a bare word, 60s unquoted) is explained with the type its
// key takes, in the words of the key's own reader: for every key of every section.
TEST(ConfigValidation, UnparsableValueNamesTheTypeItsKeyTakes) {
  const ConfigError three = ErrorOf("[health]\nconsecutive_bad = three\n");
  EXPECT_EQ(three.key(), "health.consecutive_bad");
  EXPECT_EQ(three.line(), 2);
  EXPECT_THAT(three.problem(), HasSubstr("the value must be an integer"));
  EXPECT_THAT(three.problem(), HasSubstr("\"three\" is no value TOML can read"));
  EXPECT_THAT(three.problem(), Not(HasSubstr("boolean"))) << "toml++'s guess misleads";
  EXPECT_THAT(three.fix(), HasSubstr("consecutive_bad = 3"));
  std::size_t keys = 0;
  for (const Section& section : Schema()) {
    // The top level holds sections; the arrays of tables are tried below.
    if (section.name.empty() || section.name.find('.') != std::string_view::npos) continue;
    for (std::string_view key : section.keys) {
      const std::string text =
          "[" + std::string(section.name) + "]\n" + std::string(key) + " = bogus\n";
      const ConfigError e = ErrorOf(text);
      EXPECT_EQ(e.line(), 2) << text;
      EXPECT_THAT(e.problem(), HasSubstr("; the value must be ")) << text;
      ++keys;
    }
  }
  EXPECT_GT(keys, 50u);
  // In an array of tables, and with more values below that TOML cannot read either.
  const ConfigError band = ErrorOf("[[health.band]]\ngpu = 0\nlower = 20GB/s\nupper = 26GB/s\n");
  EXPECT_EQ(band.line(), 3);
  EXPECT_THAT(band.problem(), HasSubstr("the value must be a bandwidth"));
  const ConfigError factor =
      ErrorOf("[[simulate.fault]]\nkind = \"degrade\"\nfactor = half\n[probe]\ninterval = 60s\n");
  EXPECT_EQ(factor.key(), "simulate.fault.factor");
  EXPECT_THAT(factor.problem(), HasSubstr("the value must be a number"));
  // Not a value's type but the file's shape: said as before.
  const ConfigError dup = ErrorOf("[web]\nlisten_address = \":1\"\nlisten_address = \":2\"\n");
  EXPECT_THAT(dup.problem(), Not(HasSubstr("the value")));
}

// toml++ 3.3 reaches __builtin_unreachable() on some non-ASCII characters outside strings
// (found by fuzz/config_fuzzer); they are rejected before it sees them.
TEST(ConfigValidation, NonAsciiOnlyInsideStringsAndComments) {
  EXPECT_NO_THROW(
      Parse("# caf\xc3\xa9 \xc2\xa4\n[daemon]\nstate_dir = \"/var/lib/caf\xc3\xa9 \\\" \xc2\xa4\"\n"
            "log_level = 'info' # \xc2\xa4\n"));
  EXPECT_NO_THROW(
      Parse("[daemon]\nstate_dir = \"\"\"\n/x\xc2\xa4\n\"\"\"\ntextfile_path = "
            "'''\n/\xc2\xa4.prom'''\n"));
  const ConfigError nbsp = ErrorOf("[probe]\niterations = 20\xc2\xa0\n");
  EXPECT_EQ(nbsp.line(), 2);
  EXPECT_EQ(nbsp.key(), "probe.iterations");
  EXPECT_THAT(nbsp.what(), HasSubstr("non-ASCII character outside a string"));
  EXPECT_EQ(ErrorOf("[daemon]\nstate_dir = '''\n'''\n\xc2\xa4 = 1\n").line(), 4);
  EXPECT_EQ(ErrorOf("[he\xc2\xa4lth.band]\n").line(), 1);
  // A quote opens a string only where TOML allows one; an escape is never non-ASCII.
  EXPECT_EQ(ErrorOf("k = 5\"\"\"\"4\"iB \xcc\xab\n").line(), 1);
  EXPECT_EQ(ErrorOf("\n[daemon]\nstate_dir = \"\"\"a\\\xc2\xa4\"\"\"\n").line(), 3);
  // Where toml++ reads a bare value, a quote inside it opens no string (the fuzzer's find:
  // `0.q["..\xc2\xa4`), nor does one after '=' that is part of the value (`1="..."`); spaces
  // after a backslash in a multi-line string are tested for whitespace up to the next one.
  EXPECT_EQ(ErrorOf("[health]\nconsecutive_bad = 0.q[\"a\xc2\xa4\"]\n").line(), 2);
  EXPECT_EQ(ErrorOf("[health]\nconsecutive_bad = 1=\"\xc2\xa4\"\n").line(), 2);
  EXPECT_EQ(ErrorOf("[probe]\nmodes = [\"pinned\", x\"\xe3\x80\x81\"]\n").line(), 2);
  EXPECT_EQ(ErrorOf("[daemon]\nstate_dir = \"\"\"a\\  \xc2\xa4\n\"\"\"\n").line(), 2);
  EXPECT_EQ(ErrorOf("[daemon]\nstate_dir = \"a\" \"\xc2\xa4\"\n").line(), 2);
  // A line-ending backslash: toml++ skips the spaces and line breaks after it and tests the
  // first other character (a fuzzer's find: U+FEF7 four lines down).
  EXPECT_EQ(ErrorOf("[daemon]\nstate_dir = \"\"\"a\\\n\n  \xc2\xa4\"\"\"\n").line(), 4);
  EXPECT_EQ(Parse("[daemon]\nstate_dir = \"\"\"/a\\\n  b \xc2\xa4\"\"\"\n").state_dir,
            "/ab \xc2\xa4");
  // Strings stay strings wherever TOML places them: no spaces around '=', in arrays and
  // inline tables, a quoted key part.
  EXPECT_NO_THROW(Parse("[daemon]\nstate_dir=\"/caf\xc3\xa9\"\n"));
  EXPECT_EQ(
      FirstNonAsciiOutsideStrings("a = [{b = \"\xc2\xa4\", c = ['\xc2\xa4']}, \"\xc2\xa4\"]\n"
                                  "\"\xc2\xa4\" = 1\n[t.\"\xc2\xa4\"]\nd = 1979-05-27 07:32:00\n"),
      0);
  EXPECT_EQ(FirstNonAsciiOutsideStrings("a = [\n 1,\n 2 \xc2\xa4]\n"), 3);
  const Config c = Parse(
      "[probe]\nmodes = [\n  \"pinned\", # \xc2\xa4\n  'pageable',\n]\n"
      "[daemon]\nstate_dir = \"\"\"/a\xc2\xa4\"\"\"\"\ntextfile_path = '/\xc2\xa4.prom'\n");
  EXPECT_EQ(c.modes.size(), 2u);
  EXPECT_EQ(c.state_dir, "/a\xc2\xa4\"");
}

TEST(ConfigText, RawControlCharactersAreRefusedBeforeTheParserSeesThem) {
  // The fuzzer's find: toml++ read on past the NUL bytes into a non-ASCII character and
  // reached __builtin_unreachable(). TOML allows no raw control character but tab.
  const std::string found("[web]\nlreess = 93\0\0\0=[\"\xcc\xbd\0\0seed42rade\"<\n", 41);
  for (const std::string& text : {found, std::string("[probe]\n# a \x01 in a comment\n"),
                                  std::string("[probe]\ninterval = \"6\x7f"
                                              "0s\"\n")}) {
    const ConfigError e = ErrorOf(text);
    EXPECT_EQ(e.line(), 2) << text;
    EXPECT_THAT(e.problem(), HasSubstr("control character")) << text;
  }
}

TEST(ConfigValidation, UnreadableFileGivesErrnoText) {
  TempDir dir;
  try {
    LoadConfig(dir.path() / "missing.toml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
  try {
    LoadConfig(dir.path());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Is a directory"));
  }
}

}  // namespace
}  // namespace xferd::config
