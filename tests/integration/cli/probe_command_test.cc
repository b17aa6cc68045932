// `xferd probe`, run as a user runs it: the real binary, its stdout, stderr and exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "integration/cli/run_xferd.h"

namespace {

namespace fs = std::filesystem;

using xferd::cli_testing::Result;

class ProbeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "xferd-probe-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  Result Xferd(const std::string& args) { return xferd::cli_testing::Xferd(dir_, args); }

  fs::path WriteFile(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

  // A config for the simulated device (instant transfers) with one injected fault, given
  // as its keys after `kind`; `before` goes ahead of [simulate].
  fs::path FaultConfig(const std::string& name, const std::string& fault,
                       const std::string& before = "") {
    return WriteFile(name, before + "[simulate]\ntime_scale = 0\n[[simulate.fault]]\n" + fault);
  }

  // The fake sysfs tree tests/data/sysfs/<name>.
  static std::string SysfsTree(const std::string& name) {
    return std::string(XFERD_TEST_DATA_DIR) + "/sysfs/" + name;
  }

  // `xferd probe --simulate --json FLAGS` on the fake 8-GPU node (sysfs tree hgx-8gpu): its
  // document in `doc`; it must exit 0 and show all 8 GPUs. Call it in
  // ASSERT_NO_FATAL_FAILURE.
  void ProbeEightGpuNode(const std::string& flags, nlohmann::json& doc) {
    const Result r =
        Xferd("probe --simulate --json " + flags + " --sysfs-root '" + SysfsTree("hgx-8gpu") + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    doc = nlohmann::json::parse(r.out);
    ASSERT_EQ(doc.at("devices").size(), 8u);
  }

  fs::path dir_;
};

TEST_F(ProbeCommand, SimulatedJsonHasAllThirteenSaneResults) {
  const Result r = Xferd("probe --simulate --json --iterations 10");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc.at("backend"), "sim");
  EXPECT_TRUE(doc.at("simulated").get<bool>());
  ASSERT_EQ(doc.at("devices").size(), 1u);
  const auto& device = doc.at("devices")[0];
  EXPECT_TRUE(device.at("simulated").get<bool>());
  EXPECT_EQ(device.at("name"), "Simulated GPU (xferd sim)");
  const double link = device.at("link_path").at("narrowest").at("current_bytes_per_s");
  EXPECT_NEAR(link, 31.5e9, 0.01e9);  // the default simulated link: Gen4 x16
  EXPECT_NEAR(device.at("expected_band").at("lower_bytes_per_s").get<double>(), 0.63 * link, 1e6);
  EXPECT_NEAR(device.at("expected_band").at("upper_bytes_per_s").get<double>(), 0.83 * link, 1e6);

  std::map<std::string, double> bandwidth;  // "mode/direction" -> median
  for (const auto& result : doc.at("results")) {
    const std::string mode = result.at("mode"), direction = result.at("direction");
    const std::string key = mode + "/" + direction;
    SCOPED_TRACE(key);
    EXPECT_EQ(result.at("status"), "ok");
    EXPECT_EQ(result.at("size_bytes"), 64u << 20);
    EXPECT_EQ(result.at("samples"), 10);
    const double median = result.at("median_bytes_per_s");
    EXPECT_GT(median, 0);
    const double p50 = result.at("p50_s"), p99 = result.at("p99_s"), p999 = result.at("p999_s");
    EXPECT_GT(p50, 0);
    EXPECT_LE(p50, p99);
    EXPECT_LE(p99, p999);
    // managed_prefetch d2h is bound by the host populating pages, not by the link.
    const bool link_bound = mode != "pageable" && mode != "managed" &&
                            !(mode == "managed_prefetch" && direction == "d2h");
    if (link_bound) {
      const double per_direction = median / (direction == "bidir" ? 2 : 1);
      EXPECT_GT(per_direction, 0.50 * link);
      EXPECT_LT(per_direction, 1.05 * link);
      EXPECT_EQ(result.at("verdict"), "ok");
    } else {
      EXPECT_EQ(result.at("verdict"), "n/a (not link-bound)");
    }
    EXPECT_EQ(result.at("overlap_ratio").is_null(), mode != "pinned_async");
    bandwidth[key] = median;
  }
  EXPECT_EQ(bandwidth.size(), 13u);
  for (const char* mode :
       {"pageable", "pinned", "pinned_async", "zero_copy", "managed", "managed_prefetch"}) {
    EXPECT_TRUE(bandwidth.contains(std::string(mode) + "/h2d")) << mode;
    EXPECT_TRUE(bandwidth.contains(std::string(mode) + "/d2h")) << mode;
  }
  EXPECT_TRUE(bandwidth.contains("pinned/bidir"));
  EXPECT_GT(bandwidth["pinned/h2d"], bandwidth["pageable/h2d"]);
  EXPECT_GT(bandwidth["pinned/d2h"], bandwidth["pageable/d2h"]);
  EXPECT_GT(bandwidth["pinned/bidir"], bandwidth["pinned/h2d"]);
}

TEST_F(ProbeCommand, TableShowsTheDeviceBandAndVerdicts) {
  const Result r = Xferd("probe --simulate --iterations 3 --mode pinned,managed");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"SIMULATED", "Gen4 x16", "expected band: 19.85-26.15 GB/s", "pinned",
                           "bidir", "p99.9", "n/a (not link-bound)", " ok"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("pageable"), std::string::npos) << "--mode must limit the rows";
}

TEST_F(ProbeCommand, SameSeedSameNumbers) {
  const std::string args = "probe --simulate --json --iterations 3 --mode pinned --size 1MiB";
  const Result a = Xferd(args + " --seed 42"), b = Xferd(args + " --seed 42");
  const Result c = Xferd(args + " --seed 43");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out),
       jc = nlohmann::json::parse(c.out);
  // The link-traffic windows last as long as the run's wall clock says: not the seed's.
  for (auto* doc : {&ja, &jb, &jc}) {
    for (auto& result : doc->at("results")) {
      result["contention"]["link_traffic"].erase("window_s");
      result["contention"]["link_traffic"].erase("after_s");
    }
  }
  EXPECT_EQ(ja.at("results"), jb.at("results"));
  EXPECT_NE(ja.at("results"), jc.at("results"));
}

TEST_F(ProbeCommand, SizesAndModesMultiply) {
  const Result r = Xferd("probe --simulate --json --iterations 2 --mode pinned --size 4KiB,1MiB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto results = nlohmann::json::parse(r.out).at("results");
  ASSERT_EQ(results.size(), 6u);  // pinned h2d, d2h, bidir at two sizes
  std::set<std::uint64_t> sizes;
  for (const auto& result : results) {
    sizes.insert(result.at("size_bytes").get<std::uint64_t>());
    // 4 KiB copies measure latency, not the link: never held against the band.
    if (result.at("size_bytes") == 4096) {
      EXPECT_EQ(result.at("verdict").get<std::string>(), "n/a (under the band's size)");
    }
  }
  EXPECT_EQ(sizes, (std::set<std::uint64_t>{4096, 1 << 20}));
}

TEST_F(ProbeCommand, WithoutAGpuSaysSoAndExits69) {
  if (fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA driver";
  const Result r = Xferd("probe");
  EXPECT_EQ(r.exit_code, 69) << r.out << r.err;
  EXPECT_NE(r.err.find("no NVIDIA"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--simulate"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(ProbeCommand, UnknownGpuModeOrSizeIsAUsageError) {
  Result r = Xferd("probe --simulate --gpu 3");
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("no GPU \"3\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIM-"), std::string::npos) << "should list the GPUs there are: " << r.err;

  r = Xferd("probe --simulate --mode warp_drive");
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("warp_drive"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pinned_async"), std::string::npos) << "should list valid modes: " << r.err;

  r = Xferd("probe --simulate --size 12parsecs");
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("12parsecs"), std::string::npos) << r.err;
}

TEST_F(ProbeCommand, GpuSelectedByUuid) {
  const fs::path config = WriteFile("sim.toml", "[simulate]\ndevices = 3\ntime_scale = 0\n");
  const Result all =
      Xferd("probe --simulate --json --iterations 2 --mode pinned -c '" + config.string() + "'");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const auto devices = nlohmann::json::parse(all.out).at("devices");
  ASSERT_EQ(devices.size(), 3u);
  const std::string uuid = devices[2].at("uuid");
  const Result one = Xferd("probe --simulate --json --iterations 2 --mode pinned -c '" +
                           config.string() + "' --gpu " + uuid);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto doc = nlohmann::json::parse(one.out);
  ASSERT_EQ(doc.at("devices").size(), 1u);
  EXPECT_EQ(doc.at("devices")[0].at("index"), 2);
  for (const auto& result : doc.at("results")) EXPECT_EQ(result.at("gpu"), 2);
}

TEST_F(ProbeCommand, DegradedDeviceIsBelowBandAndExits1) {
  const fs::path config = FaultConfig("degraded.toml", "kind = \"degrade\"\nfactor = 0.4\n");
  const Result r = Xferd("probe --simulate --json --iterations 3 -c '" + config.string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  int below = 0;
  const auto doc = nlohmann::json::parse(r.out);
  for (const auto& result : doc.at("results")) {
    if (result.at("verdict").get<std::string>() == "below band") ++below;
  }
  EXPECT_EQ(below, 8) << r.out;  // every link-bound mode/direction
}

TEST_F(ProbeCommand, DowntrainedLinkIsShownAndHeldToWhatItCanCarry) {
  const fs::path config = FaultConfig("downtrain.toml", "kind = \"downtrain\"\nwidth = 8\n");
  const Result r =
      Xferd("probe --simulate --iterations 3 --mode pinned -c '" + config.string() + "'");
  // The band stays Gen4 x16's, which the x8 link does not reach: below band, exit 1.
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (const char* text : {"Gen4 x8 DOWNTRAINED from Gen4 x16", "WARNING",
                           "expected band: 19.85-26.15 GB/s", ", trained Gen4 x8)", "below band"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST_F(ProbeCommand, DowntrainedLinkIsNamedAsTheLikelyCause) {
  const fs::path config = FaultConfig("downtrain.toml", "kind = \"downtrain\"\ngen = 3\n");
  const std::string args =
      "probe --simulate --iterations 3 --mode pinned -c '" + config.string() + "'";
  const Result table = Xferd(args);
  EXPECT_EQ(table.exit_code, 1) << table.err;
  for (const char* text :
       {"likely causes:", "XFERD-101/reboot link_downtrained: ", "Gen3 x16, max Gen4 x16",
        "XFERD-301/diagnose below_band: ", "lspci -vv -s "}) {
    EXPECT_NE(table.out.find(text), std::string::npos) << text << "\n" << table.out;
  }

  // Named first, before what it explains: the copies below the band it should carry.
  const Result json = Xferd(args + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.err;
  const auto diagnoses = nlohmann::json::parse(json.out).at("devices")[0].at("diagnoses");
  ASSERT_EQ(diagnoses.size(), 2u) << diagnoses.dump(2);
  EXPECT_EQ(diagnoses[0].at("cause"), "link_downtrained");
  EXPECT_EQ(diagnoses[1].at("cause"), "below_band");
  // Each with its fault code and recommended action (docs/health.md, "Fault codes").
  EXPECT_EQ(diagnoses[0].at("code"), "XFERD-101");
  EXPECT_EQ(diagnoses[0].at("action"), "reboot");
  EXPECT_EQ(diagnoses[1].at("code"), "XFERD-301");
  EXPECT_EQ(diagnoses[1].at("action"), "diagnose");
  EXPECT_NE(diagnoses[0].at("detail").get<std::string>().find("Gen3 x16, max Gen4 x16"),
            std::string::npos)
      << diagnoses.dump(2);
  EXPECT_NE(diagnoses[0].at("advice").get<std::string>().find("reseat"), std::string::npos)
      << diagnoses.dump(2);
}

TEST_F(ProbeCommand, HealthyDeviceNamesNoCause) {
  const Result table = Xferd("probe --simulate --iterations 3");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.find("likely causes"), std::string::npos) << table.out;
  const Result json = Xferd("probe --simulate --json --iterations 3");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto device = nlohmann::json::parse(json.out).at("devices")[0];
  ASSERT_TRUE(device.contains("diagnoses")) << device.dump(2);
  EXPECT_TRUE(device.at("diagnoses").empty()) << device.dump(2);
}

TEST_F(ProbeCommand, HungProbeIsCancelledAndReportedAsTimeout) {
  const fs::path config =
      FaultConfig("hang.toml", "kind = \"hang\"\n", "[probe]\ndeadline = \"100ms\"\n");
  const Result r = Xferd("probe --simulate --json --iterations 2 --mode managed --size 4KiB -c '" +
                         config.string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto results = nlohmann::json::parse(r.out).at("results");
  ASSERT_EQ(results.size(), 2u);
  for (const auto& result : results) {
    EXPECT_EQ(result.at("status"), "timeout");
    EXPECT_EQ(result.at("verdict"), "timeout");
    EXPECT_NE(result.at("message").get<std::string>().find("deadline"), std::string::npos);
  }
}

TEST_F(ProbeCommand, FailingProbesAreReportedNotFatal) {
  const fs::path config = WriteFile("faults.toml", R"(
[simulate]
devices = 2
time_scale = 0
[[simulate.fault]]
kind = "lost"
device = 1
)");
  const Result r =
      Xferd("probe --simulate --iterations 2 --mode pinned -c '" + config.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("error: device lost"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU 0:"), std::string::npos) << r.out;
}

TEST_F(ProbeCommand, BadConfigExits78NamingTheLine) {
  const fs::path config = WriteFile("bad.toml", "[simulate]\nlink = \"gen9x16\"\n");
  const Result r = Xferd("probe --simulate -c '" + config.string() + "'");
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.err.find("bad.toml:2"), std::string::npos) << r.err;
}

// The simulated GPUs of a fake sysfs tree, from the flag or from the config file.
TEST_F(ProbeCommand, SimulatedHostFromASysfsTree) {
  nlohmann::json doc;
  ASSERT_NO_FATAL_FAILURE(ProbeEightGpuNode("--mode pinned --iterations 5", doc));
  EXPECT_EQ(doc.at("devices")[7].at("pci_bus_id"), "0000:bb:00.0");
  EXPECT_EQ(doc.at("devices")[7].at("link_path").at("numa_node"), 1);
  EXPECT_NEAR(
      doc.at("devices")[0].at("link_path").at("narrowest").at("current_bytes_per_s").get<double>(),
      63.0e9, 0.1e9);

  const fs::path config =
      WriteFile("xferd.toml", "[simulate]\nenabled = true\ntime_scale = 0\nsysfs_root = \"" +
                                  std::string(XFERD_TEST_DATA_DIR) + "/sysfs/igx-dgpu\"\n");
  const Result igx =
      Xferd("probe --json --mode pinned --iterations 5 -c '" + config.string() + "'");
  ASSERT_EQ(igx.exit_code, 0) << igx.err;
  const auto igx_doc = nlohmann::json::parse(igx.out);
  ASSERT_EQ(igx_doc.at("devices").size(), 1u);
  EXPECT_NE(igx_doc.at("devices")[0]
                .at("expected_band")
                .at("source")
                .get<std::string>()
                .find("Gen4 x8 at 0005:01:00.0"),
            std::string::npos);

  const Result none = Xferd("probe --simulate --sysfs-root '" + dir_.string() + "'");
  EXPECT_EQ(none.exit_code, 69);
  EXPECT_NE(none.err.find("no NVIDIA GPU"), std::string::npos) << none.err;
}

// `xferd probe --concurrent` on the fake 8-GPU node: every GPU alone, then each group at
// once; GPUs behind one switch share its uplink and each gets half, which is diagnosed.
TEST_F(ProbeCommand, ConcurrentOnAnEightGpuNode) {
  nlohmann::json doc;
  ASSERT_NO_FATAL_FAILURE(ProbeEightGpuNode("--concurrent --iterations 5", doc));
  EXPECT_EQ(doc.at("devices")[4].at("numa_node"), 1);
  const auto& groups = doc.at("groups");
  ASSERT_EQ(groups.size(), 5u);
  EXPECT_EQ(groups[0].at("name"), "host");
  EXPECT_EQ(groups[1].at("name"), "uplink_0000:16:00.0");
  EXPECT_EQ(groups[1].at("shared_link"), "0000:16:00.0 Gen5 x16");
  for (const auto& group : groups) {
    ASSERT_EQ(group.at("runs").size(), 3u);  // h2d, d2h, bidir
    for (const auto& run : group.at("runs")) {
      for (const auto& gpu : run.at("per_gpu")) {
        EXPECT_EQ(gpu.at("status"), "ok");
        EXPECT_NEAR(gpu.at("ratio").get<double>(), 0.5, 0.03) << group.at("name");
      }
      if (run.at("direction") != "bidir") {
        EXPECT_EQ(run.at("verdict"), "ok");
        const double aggregate = run.at("aggregate_bytes_per_s");
        EXPECT_GE(aggregate, group.at("expected_band").at("lower_bytes_per_s").get<double>());
        EXPECT_LE(aggregate, group.at("expected_band").at("upper_bytes_per_s").get<double>());
      }
    }
  }
  std::set<int> diagnosed;
  for (const auto& d : doc.at("diagnoses")) {
    EXPECT_EQ(d.at("cause"), "shared_uplink");
    diagnosed.insert(d.at("gpu").get<int>());
  }
  EXPECT_EQ(diagnosed.size(), 8u);

  // The table says the same.
  const Result table =
      Xferd("probe --simulate --concurrent --iterations 5 --gpu 2,3 --sysfs-root '" +
            SysfsTree("hgx-8gpu") + "'");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(
      table.out.find("group uplink_0000:38:00.0: GPUs 2,3, shared link 0000:38:00.0 Gen5 x16"),
      std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("shared_uplink: 0000:38:00.0 Gen5 x16 shared by GPUs 2,3"),
            std::string::npos)
      << table.out;
}

// One GPU: its group of one gives what it gives alone.
TEST_F(ProbeCommand, ConcurrentGroupOfOneIsTheSoloFigure) {
  const std::string tree = std::string(XFERD_TEST_DATA_DIR) + "/sysfs/igx-dgpu";
  const Result r = Xferd("probe --simulate --concurrent --json --sysfs-root '" + tree + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc.at("groups").size(), 1u);
  const auto& group = doc.at("groups")[0];
  EXPECT_EQ(group.at("gpus"), nlohmann::json::array({0}));
  EXPECT_EQ(group.at("shared_link"), "0005:01:00.0 Gen4 x8");
  for (const auto& run : group.at("runs")) {
    EXPECT_NEAR(run.at("per_gpu")[0].at("ratio").get<double>(), 1.0, 0.03);
  }
  EXPECT_TRUE(doc.at("diagnoses").empty());
}

}  // namespace
