// Config: defaults, the shipped example, overrides, every validation, the bad-config corpus
// through the real binary, and the exporter-toolkit web config.
#include "config/config.h"

#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "config/toml_workarounds.h"
#include "testing/fakes.h"

namespace xferd::config {

using namespace xferd::core;
using namespace xferd::web;
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::filesystem::path kDataDir = XFERD_TEST_DATA_DIR;
const std::filesystem::path kExample = kDataDir / ".." / ".." / "deploy" / "xferd.toml";
// A syntactically valid bcrypt hash (of "secret", cost 4).
constexpr const char* kHash = "$2b$04$aHyav/PGMFasSu1k8usBye249LsIcGIogrG34pf.Tv/ttTDmuphaK";

class TempDir : public fakes::TempDir {
 public:
  TempDir() : fakes::TempDir("config") {
    // Traversable by the unprivileged user the unreadable-file test runs as.
    std::filesystem::permissions(path(), std::filesystem::perms::owner_all |
                                             std::filesystem::perms::group_exec |
                                             std::filesystem::perms::others_exec);
  }
};

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs the real xferd binary; as_nobody drops root to uid/gid 65534 first (permission
// checks do not apply to root).
RunResult RunXferd(const std::vector<std::string>& args, bool as_nobody = false) {
  TempDir io;
  const auto out_path = io.path() / "stdout";
  const auto err_path = io.path() / "stderr";
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::fopen(out_path.c_str(), "w");
    FILE* err = std::fopen(err_path.c_str(), "w");
    if (!out || !err) _exit(120);
    dup2(fileno(out), 1);
    dup2(fileno(err), 2);
    if (as_nobody && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
      _exit(121);
    std::vector<char*> argv;
    std::string binary = XFERD_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(122);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadAll(out_path);
  result.err = ReadAll(err_path);
  return result;
}

Config Parse(const std::string& text) {
  return ParseConfig(text, "test.toml");
}

// What an error leaves on stderr is one line a terminal and the journal show as it is: no
// control characters, raw bytes or megabytes of echoed input, however bad the file.
void ExpectPrintableLine(const std::string& err, const std::string& what) {
  EXPECT_LT(err.size(), 2500u) << what;
  ASSERT_FALSE(err.empty()) << what;
  EXPECT_EQ(err.back(), '\n') << what;
  for (std::size_t i = 0; i + 1 < err.size(); ++i) {
    const auto c = static_cast<unsigned char>(err[i]);
    EXPECT_TRUE(c >= 0x20 && c != 0x7f) << what << ": byte " << int(c) << " at " << i;
  }
}

// The ConfigError ParseConfig throws for `text`; fails the test when none is thrown.
ConfigError ErrorOf(const std::string& text) {
  try {
    Parse(text);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return ConfigError("", 0, "", "", "");
}

// ---- defaults, example, overrides ---------------------------------------------------------

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
  EXPECT_EQ(c.simulate, d.simulate);
  EXPECT_EQ(c.sim.devices, d.sim.devices);
  EXPECT_EQ(c.sim.seed, d.sim.seed);
  EXPECT_EQ(c.sim.link_gen, d.sim.link_gen);
  EXPECT_EQ(c.sim.link_width, d.sim.link_width);
  EXPECT_EQ(c.sim.integrated, d.sim.integrated);
  EXPECT_EQ(c.sim.time_scale, d.sim.time_scale);
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

TEST(Config, LinkStringSetsGenerationAndWidth) {
  const Config c = Parse("[simulate]\nlink = \"Gen5x16\"\n");
  EXPECT_EQ(c.sim.link_gen, 5);
  EXPECT_EQ(c.sim.link_width, 16);
}

TEST(Config, ShortIntervalScalesUnsetBudgetAndDeadline) {
  const Config c = Parse("[probe]\ninterval = \"4s\"\n");
  EXPECT_EQ(c.cycle_budget, milliseconds(2000));
  EXPECT_EQ(c.probe_deadline, milliseconds(2000));
  const Config d = Parse("[probe]\ninterval = \"20s\"\ncycle_budget = \"15s\"\n");
  EXPECT_EQ(d.probe_deadline, milliseconds(5000));
}

TEST(Config, SimulatedDeviceMayProbeFast) {
  const Config c =
      Parse("[simulate]\nenabled = true\ntime_scale = 0\n[probe]\ninterval = \"20ms\"\n");
  EXPECT_EQ(c.interval, milliseconds(20));
  EXPECT_LT(c.cycle_budget, c.interval);
  EXPECT_LE(c.probe_deadline, c.cycle_budget);
  // The same interval on real GPUs is refused.
  EXPECT_EQ(ErrorOf("[probe]\ninterval = \"20ms\"\n").key(), "probe.interval");
}

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

// ---- validation ---------------------------------------------------------------------------

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

TEST(ConfigValidation, PinnedCapMustHoldLargestSize) {
  EXPECT_EQ(ErrorOf("[probe]\nsizes = [\"1GiB\"]\n").key(), "probe.sizes");  // default cap 512MiB
  EXPECT_NO_THROW(Parse("[probe]\nsizes = [\"256MiB\"]\n"));                 // x2 for bidirectional
  EXPECT_NO_THROW(Parse("[probe]\nsizes = [\"512MiB\"]\nbidirectional = false\n"));
  // Modes without pinned host buffers need no pinned memory.
  EXPECT_NO_THROW(Parse("[probe]\nsizes = [\"1GiB\"]\nmodes = [\"pageable\", \"managed\"]\n"));
}

TEST(ConfigValidation, TelemetryPath) {
  for (const char* bad :
       {"\"\"", "\"/\"", "\"/healthz\"", "\"metrics\"", "\"/a b\"", "\"/m?x=1\""}) {
    EXPECT_EQ(ErrorOf(std::string("[web]\ntelemetry_path = ") + bad + "\n").key(),
              "web.telemetry_path")
        << bad;
  }
}

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

TEST(ConfigValidation, SimulatedFaults) {
  // A [[simulate.fault]] body and the key its error must name.
  const std::pair<const char*, const char*> cases[] = {
      {"factor = 0.5\n", "kind"},
      {"kind = \"degrade\"\n", "factor"},
      {"kind = \"slow\"\nfactor = 0.5\n", "factor"},
      {"kind = \"downtrain\"\n", "gen"},
      {"kind = \"downtrain\"\nwidth = 5\n", "width"},
      {"kind = \"error_every\"\nevery = 0\n", "every"},
      {"kind = \"lost\"\nevery = 2\n", "every"},
  };
  for (const auto& [body, key] : cases) {
    EXPECT_EQ(ErrorOf(std::string("[[simulate.fault]]\n") + body).key(),
              std::string("simulate.fault[0].") + key)
        << body;
  }
  EXPECT_EQ(ErrorOf("[simulate]\nfault = 3\n").key(), "simulate.fault");
}

TEST(Config, SimulatedTopologyKeys) {
  const Config c =
      Parse("[simulate]\ngpus_per_switch = 2\nuplink = \"gen4x8\"\nnuma_nodes = 2\ndevices = 8\n");
  EXPECT_EQ(c.sim.gpus_per_switch, 2);
  EXPECT_EQ(c.sim.uplink_gen, 4);
  EXPECT_EQ(c.sim.uplink_width, 8);
  EXPECT_EQ(c.sim.numa_nodes, 2);
  // A tree relative to the config file's directory.
  const Config t = ParseConfig("[simulate]\nsysfs_root = \"trees/hgx\"\n", "/etc/xferd/x.toml");
  EXPECT_EQ(t.sim.sysfs_root, "/etc/xferd/trees/hgx");
  // Faults may name any device of a tree: the backend checks them against it.
  EXPECT_NO_THROW(
      Parse("[simulate]\nsysfs_root = \"/t\"\n[[simulate.fault]]\nkind = \"lost\"\n"
            "device = 7\n"));
  EXPECT_EQ(ErrorOf("[simulate]\nsysfs_root = \"\"\n").key(), "simulate.sysfs_root");
  EXPECT_EQ(ErrorOf("[simulate]\nuplink = \"pcie4\"\n").key(), "simulate.uplink");
  EXPECT_EQ(ErrorOf("[simulate]\ngpus_per_switch = 0\n").key(), "simulate.gpus_per_switch");
  EXPECT_EQ(ErrorOf("[simulate]\nnuma_nodes = 9\n").key(), "simulate.numa_nodes");
  EXPECT_EQ(ErrorOf("[[simulate.fault]]\nkind = \"lost\"\ndevice = 1\n").key(),
            "simulate.fault[0].device");
}

TEST(ConfigValidation, SimulatedUnsupportedModesAndLoad) {
  const ConfigError mode = ErrorOf("[simulate]\nunsupported = { zero_cpy = \"x\" }\n");
  EXPECT_EQ(mode.key(), "simulate.unsupported.zero_cpy");
  EXPECT_EQ(mode.line(), 2);
  EXPECT_EQ(ErrorOf("[simulate.unsupported]\nmanaged = \"\"\n").key(),
            "simulate.unsupported.managed");
  EXPECT_EQ(ErrorOf("[simulate]\nunsupported = [\"managed\"]\n").key(), "simulate.unsupported");
  EXPECT_EQ(ErrorOf("[simulate]\ngpu_utilization_percent = 101\n").key(),
            "simulate.gpu_utilization_percent");
  EXPECT_EQ(ErrorOf("[simulate]\npcie_bytes_per_second = \"1Gb/s\"\n").key(),
            "simulate.pcie_bytes_per_second");
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
  const Config c = Parse(
      "[probe]\nmodes = [\n  \"pinned\", # \xc2\xa4\n  'pageable',\n]\n"
      "[daemon]\nstate_dir = \"\"\"/a\xc2\xa4\"\"\"\"\ntextfile_path = '/\xc2\xa4.prom'\n");
  EXPECT_EQ(c.modes.size(), 2u);
  EXPECT_EQ(c.state_dir, "/a\xc2\xa4\"");
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

// ---- the bad-configuration corpus through the real binary ---------------------------------

// A file of a bad-file corpus (tests/data/<dir>), as <dir>/expected.txt lists it: the key its
// error names ("-": none) and the line (0: none).
struct BadFile {
  std::string file, key;
  int line = 0;
};

std::vector<BadFile> Corpus(const std::string& dir) {
  std::ifstream in(kDataDir / dir / "expected.txt");
  std::vector<BadFile> corpus;
  std::string row;
  while (std::getline(in, row)) {
    if (row.empty() || row[0] == '#') continue;
    std::istringstream fields(row);
    BadFile bad;
    fields >> bad.file >> bad.key >> bad.line;
    corpus.push_back(bad);
  }
  return corpus;
}

// Every file in tests/data/<dir> has its line in expected.txt, and every line its file.
void ExpectEveryFileListed(const std::string& dir) {
  SCOPED_TRACE(dir);
  const auto corpus = Corpus(dir);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDataDir / dir)) {
    if (entry.path().filename() == "expected.txt") continue;
    ++files;
    const auto name = entry.path().filename().string();
    EXPECT_TRUE(
        std::any_of(corpus.begin(), corpus.end(), [&](const BadFile& b) { return b.file == name; }))
        << name << " has no line in expected.txt";
  }
  EXPECT_EQ(files, corpus.size());
}

TEST(BadConfigCorpus, EveryFileIsListedAndThereAreAtLeastThirty) {
  EXPECT_GE(Corpus("bad-configs").size(), 30u);
  ExpectEveryFileListed("bad-configs");
}

TEST(BadConfigCorpus, CheckConfigRejectsEachWithExit78NamingKeyAndLine) {
  for (const BadFile& bad : Corpus("bad-configs")) {
    const std::string path = (kDataDir / "bad-configs" / bad.file).string();
    const RunResult r = RunXferd({"check-config", path});
    EXPECT_EQ(r.exit_code, 78) << bad.file << "\n" << r.err;
    EXPECT_EQ(r.out, "") << bad.file;
    std::string where = path;
    if (bad.line > 0) where += ":" + std::to_string(bad.line);
    where += ": ";
    if (bad.key != "-") where += bad.key + ": ";
    EXPECT_THAT(r.err, StartsWith(where)) << bad.file;
    EXPECT_THAT(r.err, HasSubstr("; fix: ")) << bad.file;
    ExpectPrintableLine(r.err, bad.file);
  }
}

TEST(BadConfigCorpus, UnreadableFileExit78WithErrnoText) {
  TempDir dir;
  const auto file = dir.Write("xferd.toml", ReadAll(kExample));
  std::filesystem::permissions(file, std::filesystem::perms::none);
  // Root reads anything: check as an unprivileged user, as the daemon runs.
  const RunResult r = RunXferd({"check-config", file.string()}, geteuid() == 0);
  EXPECT_EQ(r.exit_code, 78) << r.err;
  EXPECT_THAT(r.err,
              StartsWith(file.string() + ": cannot read the file: Permission denied; fix: "));
}

TEST(CheckConfig, ShippedExamplePassesWithSummary) {
  const RunResult r = RunXferd({"check-config", kExample.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(kExample.string() + ": OK\n"));
  EXPECT_THAT(r.out, HasSubstr("interval:   1m"));
  EXPECT_THAT(r.out, HasSubstr("64MiB"));
  EXPECT_THAT(r.out, HasSubstr("TLS off, basic auth off"));
  EXPECT_EQ(r.err, "");
}

// ---- web config (exporter-toolkit YAML) ---------------------------------------------------

class WebConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("server.crt", ReadAll(kDataDir / "tls" / "server.crt"));
    dir_.Write("server.key", ReadAll(kDataDir / "tls" / "server.key"));
  }
  ConfigError WebErrorOf(const std::string& yaml) {
    const auto file = dir_.Write("web.yml", yaml);
    try {
      LoadWebConfig(file);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.file(), file.string());
      return e;
    }
    ADD_FAILURE() << "no error for:\n" << yaml;
    return ConfigError("", 0, "", "", "");
  }
  TempDir dir_;
};

TEST_F(WebConfigTest, TlsAndUsersWithRelativePaths) {
  const auto file =
      dir_.Write("web.yml", std::string("# exporter-toolkit format\ntls_server_config:\n"
                                        "  cert_file: server.crt\n  key_file: ") +
                                (dir_.path() / "server.key").string() +
                                "\nbasic_auth_users:\n  prometheus: '" + kHash + "'\n");
  const WebConfig web = LoadWebConfig(file);
  EXPECT_TRUE(web.TlsEnabled());
  EXPECT_TRUE(web.AuthEnabled());
  EXPECT_EQ(web.tls->cert_file, dir_.path() / "server.crt");
  EXPECT_EQ(web.tls->key_file, dir_.path() / "server.key");
  EXPECT_EQ(web.basic_auth_users.at("prometheus"), kHash);
}

// A reload may not turn off TLS or basic auth by accident: the error names what would go
// and why; saying so on purpose (or keeping protection, other users) lets it through.
TEST_F(WebConfigTest, AReloadThatWouldDropProtectionIsRefusedNamingIt) {
  const auto tls = kDataDir / "tls";
  Config running;
  running.web_config_file = dir_.path() / "web.yml";
  running.web.tls = web::LoadTlsMaterial(tls / "server.crt", tls / "server.key");
  running.web.basic_auth_users["prometheus"] = kHash;
  const auto refusal = [&](const Config& next) -> std::string {
    try {
      CheckReloadKeepsProtection(running, next);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  Config next = running;
  EXPECT_EQ(refusal(next), "");
  next.web.basic_auth_users = {{"grafana", kHash}};  // other users: auth stays on
  EXPECT_EQ(refusal(next), "");
  next.web.basic_auth_users.clear();
  EXPECT_THAT(refusal(next), HasSubstr("web.yml: basic_auth_users: reload refused: it would "
                                       "turn off basic auth (1 user)"));
  next = running;
  next.web.tls.reset();
  EXPECT_THAT(refusal(next), HasSubstr("tls_server_config: reload refused: it would turn off "
                                       "TLS (" +
                                       (tls / "server.crt").string() + ")"));
  next.web = {};
  next.web_config_file.clear();
  next.source = dir_.path() / "xferd.toml";
  const std::string both = refusal(next);
  EXPECT_THAT(both, HasSubstr("xferd.toml: reload refused: it would turn off TLS"));
  EXPECT_THAT(both, HasSubstr("and basic auth (1 user)"));
  EXPECT_THAT(both, HasSubstr("no web config file is named now"));
  EXPECT_THAT(both, HasSubstr("reload_may_remove_protection = true"));
  next.reload_may_remove_protection = true;
  EXPECT_EQ(refusal(next), "");
  // What the running daemon does not have, a reload cannot take away.
  running.web = {};
  next.reload_may_remove_protection = false;
  EXPECT_EQ(refusal(next), "");
}

// exporter-toolkit takes an empty web config for plain HTTP; xferd refuses it as it refuses
// an empty TOML: an emptied or cut-short file (a failed copy) must never turn protection
// off. Serving without TLS and auth is done by naming no web config.
TEST_F(WebConfigTest, AFileThatTurnsNothingOnIsRefused) {
  for (const std::string text : {"", "\n\n", "# nothing\n", "---\n", "{}\n", "basic_auth_users:\n",
                                 "tls_server_config:\nbasic_auth_users: {}\n"}) {
    const ConfigError e = WebErrorOf(text);
    EXPECT_EQ(e.line(), 1) << text;
    EXPECT_THAT(e.what(), HasSubstr("turns on neither TLS nor basic auth")) << text;
    EXPECT_THAT(e.what(), HasSubstr("remove web.config_file")) << text;
  }
}

TEST_F(WebConfigTest, PlainTextPasswordIsRejectedWithHtpasswdFix) {
  const ConfigError e = WebErrorOf("basic_auth_users:\n  alice: hunter2\n");
  EXPECT_EQ(e.key(), "basic_auth_users.alice");
  EXPECT_EQ(e.line(), 2);
  EXPECT_THAT(e.what(), HasSubstr("not a bcrypt hash"));
  EXPECT_THAT(e.what(), HasSubstr("htpasswd -nBC 10 \"\" | tr -d ':\\n'"));
  // A truncated hash and an unsupported variant are no better.
  EXPECT_EQ(WebErrorOf(std::string("basic_auth_users:\n  bob: '") +
                       std::string(kHash).substr(0, 40) + "'\n")
                .line(),
            2);
  EXPECT_EQ(WebErrorOf("basic_auth_users:\n  bob: '$1$abc$def'\n").key(), "basic_auth_users.bob");
}

TEST_F(WebConfigTest, MissingCertFileNamesPathAndLine) {
  const ConfigError e =
      WebErrorOf("tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n");
  EXPECT_EQ(e.key(), "tls_server_config.cert_file");
  EXPECT_EQ(e.line(), 2);
  EXPECT_THAT(e.what(),
              HasSubstr((dir_.path() / "nope.crt").string() + ": No such file or directory"));
}

TEST_F(WebConfigTest, CertWithoutKeyIsRejected) {
  EXPECT_EQ(WebErrorOf("tls_server_config:\n  cert_file: server.crt\n").key(),
            "tls_server_config.key_file");
}

TEST_F(WebConfigTest, UnknownAndUnsupportedKeysAreRejected) {
  const ConfigError typo = WebErrorOf("basic_auth_user:\n  alice: x\n");
  EXPECT_EQ(typo.line(), 1);
  EXPECT_THAT(typo.what(), HasSubstr("did you mean basic_auth_users?"));
  EXPECT_EQ(WebErrorOf("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       "  client_auth_type: RequireAndVerifyClientCert\n")
                .key(),
            "tls_server_config.client_auth_type");
  const ConfigError http = WebErrorOf("http_server_config:\n  http2: false\n");
  EXPECT_EQ(http.key(), "http_server_config");
  EXPECT_THAT(http.what(), HasSubstr("not supported"));
}

TEST_F(WebConfigTest, InvalidYamlNamesTheLine) {
  const ConfigError e = WebErrorOf("basic_auth_users:\n  alice: [unclosed\n");
  EXPECT_GT(e.line(), 0);
  EXPECT_THAT(e.what(), HasSubstr("not valid YAML"));
  EXPECT_EQ(WebErrorOf("- a\n- b\n").line(), 1);
}

TEST_F(WebConfigTest, LoadConfigReadsTheWebConfigAndCheckConfigReportsIt) {
  dir_.Write("web.yml",
             std::string("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                         "basic_auth_users:\n  prometheus: '") +
                 kHash + "'\n");
  const auto file = dir_.Write("xferd.toml", "[web]\nconfig_file = \"web.yml\"\n");
  const Config c = LoadConfig(file);
  EXPECT_EQ(c.web_config_file, dir_.path() / "web.yml");
  EXPECT_TRUE(c.web.TlsEnabled());
  const RunResult r = RunXferd({"check-config", file.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("TLS on, basic auth on"));
  // An error inside the YAML names the YAML file and its line.
  dir_.Write("web.yml", "basic_auth_users:\n  prometheus: plaintext\n");
  const RunResult bad = RunXferd({"check-config", file.string()});
  EXPECT_EQ(bad.exit_code, 78);
  EXPECT_THAT(bad.err,
              StartsWith((dir_.path() / "web.yml").string() + ":2: basic_auth_users.prometheus: "));
}

// ---- the bad web-config corpus: TLS material, bcrypt costs, NUL, nesting ---------------------

TEST(BadWebConfigCorpus, EveryFileIsListed) {
  ExpectEveryFileListed("bad-web-configs");
}

// check-config and run load the web config with the same function: both exit 78 with the
// same first words (a key that does not fit its certificate used to pass check-config and
// make run exit 71).
TEST(BadWebConfigCorpus, CheckConfigAndRunBothExit78NamingTheYamlLine) {
  TempDir dir;
  for (const BadFile& bad : Corpus("bad-web-configs")) {
    const auto yaml = std::filesystem::canonical(kDataDir / "bad-web-configs" / bad.file);
    const auto toml = dir.Write("xferd.toml", "[web]\nconfig_file = \"" + yaml.string() + "\"\n");
    std::string where = yaml.string() + ":" + std::to_string(bad.line) + ": ";
    if (bad.key != "-") where += bad.key + ": ";

    const RunResult check = RunXferd({"check-config", toml.string()});
    EXPECT_EQ(check.exit_code, 78) << bad.file << "\n" << check.err;
    EXPECT_THAT(check.err, StartsWith(where)) << bad.file;
    EXPECT_THAT(check.err, HasSubstr("; fix: ")) << bad.file;
    ExpectPrintableLine(check.err, bad.file);

    const RunResult run =
        RunXferd({"run", "--config", toml.string(), "--simulate", "--web.listen-address",
                  "127.0.0.1:0", "--state-dir", (dir.path() / "state").string()});
    EXPECT_EQ(run.exit_code, 78) << bad.file << "\n" << run.err;
    EXPECT_THAT(run.err, StartsWith("xferd: " + where)) << bad.file;
  }
}

TEST_F(WebConfigTest, AChainInOrderLoads) {
  const auto tls = kDataDir / "tls";
  const WebConfig web = LoadWebConfig(
      dir_.Write("web.yml", "tls_server_config:\n  cert_file: " + (tls / "chain.crt").string() +
                                "\n  key_file: " + (tls / "leaf.key").string() + "\n"));
  ASSERT_TRUE(web.TlsEnabled());
  EXPECT_NE(web.tls->cert_pem.find("-----BEGIN CERTIFICATE-----"), std::string::npos);
}

// A FIFO (or a socket) named as a file is refused at once, never waited on: a FIFO without
// a writer used to block the daemon in open(), at start and on SIGHUP.
TEST_F(WebConfigTest, FifosAreRefusedWithoutWaiting) {
  const auto fifo = dir_.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const ConfigError as_cert =
      WebErrorOf("tls_server_config:\n  cert_file: fifo\n  key_file: server.key\n");
  EXPECT_EQ(as_cert.key(), "tls_server_config.cert_file");
  EXPECT_THAT(as_cert.what(), HasSubstr("it is a FIFO, not a regular file"));
  const auto toml = dir_.Write("xferd.toml", "[web]\nconfig_file = \"fifo\"\n");
  try {
    LoadConfig(toml);
    ADD_FAILURE() << "loaded a FIFO as the web config";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "web.config_file");
    EXPECT_THAT(e.what(), HasSubstr("FIFO"));
  }
  try {
    LoadConfig(fifo);
    ADD_FAILURE() << "loaded a FIFO as the config";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("it is a FIFO, not a regular file"));
  }
}

// ---- nesting, NUL, the series budget, message bounds -------------------------------------

TEST(ConfigNesting, LimitsCountOnlyWhatTomlNests) {
  // At the limits: accepted by the scan (toml++ then judges the keys).
  const std::string parts16 = "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a = 1\n";
  EXPECT_FALSE(FindTooDeepNesting(parts16));
  EXPECT_TRUE(FindTooDeepNesting("a." + parts16));
  EXPECT_FALSE(FindTooDeepNesting("x = " + std::string(16, '[') + std::string(16, ']') + "\n"));
  EXPECT_TRUE(FindTooDeepNesting("x = " + std::string(17, '[') + std::string(17, ']') + "\n"));
  // Dots and brackets inside strings and comments are not nesting.
  EXPECT_FALSE(FindTooDeepNesting("x = \"" + std::string(100, '.') + std::string(100, '[') +
                                  "\"\n# " + std::string(100, '{') + "\n"));
  EXPECT_FALSE(FindTooDeepNesting("x = '" + std::string(100, '.') + "'\n"));
  EXPECT_FALSE(FindTooDeepNesting("x = '''\n'" + std::string(100, '[') + "\n'''\n"));
  EXPECT_FALSE(FindTooDeepNesting("x = \"\"\"\n\"\"" + std::string(100, '[') + "\n\"\"\"\"\"\n"));
  // A multi-line string ends at its last quote: what follows is counted again.
  const auto deep = FindTooDeepNesting("x = \"\"\"a\"\"\"\"\ny = " + std::string(20, '[') + "\n");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->line, 2);
  // An escaped quote does not end a string; a newline ends a single-line one (an error).
  EXPECT_FALSE(FindTooDeepNesting("x = \"\\\"" + std::string(40, '[') + "\"\n"));
  EXPECT_TRUE(FindTooDeepNesting("x = \"open\ny = " + std::string(40, '[') + "\n"));
  // Numbers and dates have their own dots.
  EXPECT_FALSE(FindTooDeepNesting("[probe]\njitter = 0.1\nx = 1979-05-27T07:32:00.999Z\n"));
  EXPECT_FALSE(FindTooDeepNesting(ReadAll(kExample)));
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

TEST(ConfigText, RawControlCharactersAreRefusedBeforeTheParserSeesThem) {
  // The fuzzer's find: toml++ read on past the NUL bytes into a non-ASCII character and
  // reached __builtin_unreachable(). TOML allows no raw control character but tab.
  const std::string found("[web]\nlreess = 93\0\0\0=[\"\xcc\xbd\0\0seed42rade\"<\n", 41);
  for (const std::string& text :
       {found, std::string("[probe]\n# a \x01 in a comment\n"),
        std::string("[probe]\ninterval = \"6\x7f" "0s\"\n")}) {
    const ConfigError e = ErrorOf(text);
    EXPECT_EQ(e.line(), 2) << text;
    EXPECT_THAT(e.problem(), HasSubstr("control character")) << text;
  }
}

TEST(ConfigBudget, DefaultsMatchTheDocumentedSeriesAndLimitsAreReported) {
  const SeriesEstimate defaults = EstimateSeries(Settings{});
  EXPECT_EQ(defaults.probes, 13u);
  EXPECT_EQ(defaults.per_gpu, 305u);  // docs/metrics.md, "Series budget"
  EXPECT_EQ(defaults.concurrent_per_gpu, 6u);
  EXPECT_EQ(defaults.per_size, 221u);
  EXPECT_EQ(defaults.baseline_values_per_gpu, 13u * 20);
  // The shipped example is far inside every limit.
  EXPECT_LT(EstimateSeries(LoadConfig(kExample)).per_gpu, kMaxSeriesPerGpu / 4);
  // Over: says by how much.
  std::string sizes;
  for (int i = 0; i < 9; ++i) sizes += (i ? ", " : "") + std::to_string(4096 << i);
  const ConfigError e = ErrorOf("[probe]\nsizes = [" + sizes + "]\n");
  EXPECT_EQ(e.key(), "probe.sizes");
  // 9 sizes x 13 probes x 17 + 13 + 36 + 6 + 1 + 28, 6 for the concurrent groups, and every
  // size under 4 MiB: 8 link-bound probes each marked xferd_band_exempt.
  EXPECT_THAT(e.problem(), HasSubstr("exports 2151 series per GPU"));
  EXPECT_THAT(e.problem(), HasSubstr("and 72 xferd_band_exempt"));
  EXPECT_THAT(e.problem(), HasSubstr("over the limit of 2000 by 151 (7%)"));
  // One size fewer fits.
  sizes = sizes.substr(0, sizes.rfind(','));
  EXPECT_EQ(Parse("[probe]\nsizes = [" + sizes + "]\n").sizes.size(), 8u);
}

// A file of 120,000 sizes used to be checked for repeats one by one (hours); now it is
// refused for its series in a moment (a hang would fail the test by its timeout).
TEST(ConfigBudget, HugeListsAreRefusedWithoutAQuadraticScan) {
  std::string text = "[probe]\nsizes = [";
  for (int i = 0; i < 120000; ++i) text += (i ? "," : "") + std::to_string(1024 + i);
  text += "]\n";
  EXPECT_EQ(ErrorOf(text).key(), "probe.sizes");
}

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

// Whatever a message quotes (here a flag), what reaches stderr is escaped and capped.
TEST(ConfigErrors, EveryErrorLineIsPrintableFlagsToo) {
  const RunResult level =
      RunXferd({"run", "--log.level", "in\x1b[31mfo\n" + std::string(5000, 'x')});
  EXPECT_EQ(level.exit_code, 64) << level.err;
  ExpectPrintableLine(level.err, "--log.level");
  const RunResult address = RunXferd({"run", "--web.listen-address", "\x1b]0;pwned\x07:1"});
  EXPECT_EQ(address.exit_code, 64) << address.err;
  ExpectPrintableLine(address.err, "--web.listen-address");
}

}  // namespace
}  // namespace xferd::config
