// The link's error counters as read: the kernel's AER files in the formats kernels write,
// odd and hostile files refused with the reason (never a zero), NVML's replay counter, and
// the simulated device's link_errors fault growing the counters at its rate, where it says.
#include "xferd/probes/link_errors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "testing/fakes.h"
#include "xferd/probes/nvml.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

// A current kernel's aer_dev_correctable: the kinds by their short names, then the total.
constexpr const char* kCorrectable =
    "RxErr 3\nBadTLP 1\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\n"
    "HeaderOF 0\nTOTAL_ERR_COR 4\n";
// An older kernel's (4.19 to 5.x): long names with spaces, and an unnamed bit with a count.
constexpr const char* kCorrectableOld =
    "Receiver Error 2\nBad TLP 0\nBad DLLP 0\nRELAY_NUM Rollover 0\nReplay Timer Timeout 0\n"
    "Advisory Non-Fatal 0\ndev_cor_errs_bit[9] 1\nTOTAL_ERR_COR 2\n";
constexpr const char* kNonFatal =
    "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n"
    "MalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
    "AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_NONFATAL 0\n";

TEST(AerFile, ParsesTheFormatsKernelsWrite) {
  const AerFile now = ParseAerFile(kCorrectable, AerClass::kCorrectable);
  ASSERT_EQ(now.problem, "");
  EXPECT_EQ(now.total, 4u);
  ASSERT_EQ(now.kinds.size(), 8u);
  EXPECT_EQ(now.kinds[0].name, "RxErr");
  EXPECT_EQ(now.kinds[0].count, 3u);
  const AerFile old = ParseAerFile(kCorrectableOld, AerClass::kCorrectable);
  ASSERT_EQ(old.problem, "");
  EXPECT_EQ(old.total, 2u);
  EXPECT_EQ(old.kinds[3].name, "RELAY_NUM Rollover");
  EXPECT_EQ(old.kinds.back().name, "dev_cor_errs_bit[9]");
  const AerFile nonfatal = ParseAerFile(kNonFatal, AerClass::kNonFatal);
  EXPECT_EQ(nonfatal.problem, "");
  EXPECT_EQ(nonfatal.total, 0u);
  // Counts that need 64 bits are counts.
  EXPECT_EQ(ParseAerFile("TOTAL_ERR_FATAL 18446744073709551615\n", AerClass::kFatal).total,
            18446744073709551615ull);
  EXPECT_EQ(ParseAerCount("17\n"), 17u);
}

TEST(AerFile, RefusesWhatTheKernelDoesNotWrite) {
  const auto problem = [](std::string_view text, AerClass c = AerClass::kCorrectable) {
    return ParseAerFile(text, c).problem;
  };
  EXPECT_NE(problem("").find("no TOTAL_ERR_COR line (the file is empty)"), std::string::npos);
  EXPECT_NE(problem("RxErr 3\n").find("no TOTAL_ERR_COR line"), std::string::npos);
  EXPECT_NE(problem("TOTAL_ERR_NONFATAL 1\n").find("is not the TOTAL_ERR_COR line"),
            std::string::npos);  // another class's file in this one's place
  EXPECT_NE(problem("RxErr -3\nTOTAL_ERR_COR 0\n").find("does not end in a count"),
            std::string::npos);
  EXPECT_NE(problem("RxErr 99999999999999999999\nTOTAL_ERR_COR 0\n").find("count"),
            std::string::npos);  // past 64 bits
  EXPECT_NE(problem("garbage\n").find("is not \"<error kind> <count>\""), std::string::npos);
  EXPECT_NE(problem("TOTAL_ERR_COR 1\nRxErr 1\n").find("follows the TOTAL_ERR_COR line"),
            std::string::npos);
  EXPECT_NE(problem("Rx\x1b[2JErr 1\nTOTAL_ERR_COR 1\n").find("names no error kind"),
            std::string::npos);
  std::string many;
  for (int i = 0; i < 50; ++i) many += "Kind" + std::to_string(i) + " 0\n";
  EXPECT_NE(problem(many + "TOTAL_ERR_COR 0\n").find("not an AER counter file"), std::string::npos);
  // Outside text is quoted escaped and short.
  const std::string p = problem(std::string(5000, 'x') + "\x01 1\nTOTAL_ERR_COR 1\n");
  EXPECT_LT(p.size(), 200u);
  EXPECT_EQ(p.find('\x01'), std::string::npos);
  EXPECT_FALSE(ParseAerCount("12 errors"));
  EXPECT_FALSE(ParseAerCount(""));
  EXPECT_FALSE(ParseAerCount("-1"));
}

// A sysfs tree of PCI functions with AER files, by address, as bus/pci/devices shows them.
class Tree {
 public:
  Tree() : dir_("aer") {}
  fs::path root() const { return dir_.path(); }
  fs::path Device(const std::string& bdf) const {
    const fs::path d = dir_.path() / "bus/pci/devices" / bdf;
    fs::create_directories(d);
    return d;
  }
  void Aer(const std::string& bdf, const std::string& correctable = kCorrectable) const {
    const fs::path d = Device(bdf);
    std::ofstream(d / "aer_dev_correctable") << correctable;
    std::ofstream(d / "aer_dev_nonfatal") << kNonFatal;
    std::ofstream(d / "aer_dev_fatal") << "Undefined 0\nDLP 1\nTOTAL_ERR_FATAL 1\n";
  }
  void RootPort(const std::string& bdf) const {
    Aer(bdf);
    const fs::path d = Device(bdf);
    std::ofstream(d / "class") << "0x060400\n";
    std::ofstream(d / "aer_rootport_total_err_cor") << "7\n";
    std::ofstream(d / "aer_rootport_total_err_nonfatal") << "0\n";
    std::ofstream(d / "aer_rootport_total_err_fatal") << "1\n";
  }

 private:
  fakes::TempDir dir_;
};

LinkPath PathOf(std::initializer_list<const char*> bdfs) {
  LinkPath path;
  for (const char* bdf : bdfs) path.links.push_back({bdf});
  return path;
}

TEST(ReadAer, EveryDeviceOfThePathAndTheRootPortsTotals) {
  Tree t;
  t.Aer("0000:03:00.0");
  t.Aer("0000:02:00.0", kCorrectableOld);
  t.RootPort("0000:00:01.0");
  const auto aer = ReadAer(t.root(), PathOf({"0000:03:00.0", "0000:02:00.0", "0000:00:01.0"}));
  ASSERT_EQ(aer.size(), 3u);
  EXPECT_TRUE(aer[0].Readable()) << aer[0].problem;
  EXPECT_EQ(aer[0].device[0], 4u);
  EXPECT_EQ(aer[0].device[1], 0u);
  EXPECT_EQ(aer[0].device[2], 1u);
  EXPECT_FALSE(aer[0].root_port);
  EXPECT_FALSE(aer[0].rootport[0]);
  EXPECT_EQ(aer[1].device[0], 2u);
  ASSERT_TRUE(aer[2].root_port);
  EXPECT_TRUE(aer[2].Readable()) << aer[2].problem;
  EXPECT_EQ(aer[2].rootport[0], 7u);
  EXPECT_EQ(aer[2].rootport[2], 1u);
}

TEST(ReadAer, MissingFilesAreNotReadableNeverZero) {
  Tree t;
  t.Device("0000:00:06.0");  // a GPU on a VM's root bus: no AER files at all
  std::ofstream(t.Device("0000:00:06.0") / "class") << "0x030200\n";
  const auto aer = ReadAer(t.root(), PathOf({"0000:00:06.0"}));
  ASSERT_EQ(aer.size(), 1u);
  EXPECT_TRUE(aer[0].missing);
  EXPECT_FALSE(aer[0].Readable());
  EXPECT_FALSE(aer[0].root_port);  // a GPU at the top of its path is no root port
  for (const auto& count : aer[0].device) EXPECT_FALSE(count);
  EXPECT_NE(aer[0].problem.find("no AER counters"), std::string::npos) << aer[0].problem;
  // One file of three missing is odd, not "no AER".
  t.Aer("0000:01:00.0");
  fs::remove(t.Device("0000:01:00.0") / "aer_dev_fatal");
  const auto partial = ReadAer(t.root(), PathOf({"0000:01:00.0"}));
  EXPECT_FALSE(partial[0].missing);
  EXPECT_FALSE(partial[0].Readable());
  EXPECT_NE(partial[0].problem.find("aer_dev_fatal"), std::string::npos) << partial[0].problem;
  EXPECT_EQ(partial[0].device[0], 4u);  // what could be read is there
  EXPECT_FALSE(partial[0].device[2]);
  // A root port whose totals are missing says which.
  t.RootPort("0000:00:01.0");
  fs::remove(t.Device("0000:00:01.0") / "aer_rootport_total_err_cor");
  const auto root = ReadAer(t.root(), PathOf({"0000:00:01.0"}));
  EXPECT_FALSE(root[0].Readable());
  EXPECT_NE(root[0].problem.find("aer_rootport_total_err_cor"), std::string::npos);
}

TEST(ReadAer, HostileFilesAreRefusedWithTheReasonAndNeverHang) {
  Tree t;
  const std::string bdf = "0000:01:00.0";
  const auto problem_with = [&](const std::function<void(const fs::path&)>& make) {
    const fs::path file = t.Device(bdf) / "aer_dev_correctable";
    fs::remove_all(file);  // what the last case left (writing into its FIFO would block)
    t.Aer(bdf);
    fs::remove_all(file);
    make(file);
    const auto aer = ReadAer(t.root(), PathOf({"0000:01:00.0"}));
    EXPECT_FALSE(aer[0].Readable());
    EXPECT_FALSE(aer[0].device[0]);   // not readable, not 0
    EXPECT_EQ(aer[0].device[2], 1u);  // the other files still read
    return aer[0].problem;
  };
  // A FIFO nobody writes: opened non-blocking and refused, not waited on.
  EXPECT_NE(problem_with([](const fs::path& f) {
              ASSERT_EQ(mkfifo(f.c_str(), 0600), 0);
            }).find("not a regular file"),
            std::string::npos);
  EXPECT_NE(problem_with([](const fs::path& f) { fs::create_directory(f); }).find("directory"),
            std::string::npos);
  EXPECT_NE(problem_with([](const fs::path& f) {
              std::ofstream(f) << std::string(1 << 20, '7');
            }).find("larger than 4096 bytes"),
            std::string::npos);
  EXPECT_NE(problem_with([](const fs::path& f) {
              std::ofstream(f) << "\xff\xfe\x00garbage";
            }).find("aer_dev_correctable"),
            std::string::npos);
}

TEST(LinkErrorReader, ReplaysFromNvmlOrWhyNot) {
  Tree t;
  t.Aer("0000:01:00.0");
  auto nvml = std::make_shared<fakes::FakeNvml>();
  nvml->Set("0000:01:00.0", [](auto& gpu) { gpu.replays = 42; });
  DeviceInfo gpu;
  gpu.pci_bus_id = "0000:01:00.0";
  gpu.uuid = "GPU-1";
  const auto reader = MakeLinkErrorReader(t.root(), nvml);
  LinkErrors read = reader->Read(gpu, PathOf({"0000:01:00.0"}));
  EXPECT_EQ(read.replays.value, 42u);
  EXPECT_EQ(read.aer.at(0).device[0], 4u);
  // N/A on this GPU (a vGPU, an older board).
  nvml->Set("0000:01:00.0", [](auto& g) { g.replays_rc = kNvmlErrorNotSupported; });
  read = reader->Read(gpu, PathOf({"0000:01:00.0"}));
  EXPECT_FALSE(read.replays.value);
  EXPECT_NE(read.replays.problem.find("N/A"), std::string::npos) << read.replays.problem;
  EXPECT_TRUE(read.replays.missing);  // no fault: said at info level
  // Another NVML error is one.
  nvml->Set("0000:01:00.0", [](auto& g) { g.replays_rc = kNvmlErrorGpuIsLost; });
  read = reader->Read(gpu, PathOf({"0000:01:00.0"}));
  EXPECT_FALSE(read.replays.missing);
  EXPECT_NE(read.replays.problem.find("GPU is lost"), std::string::npos) << read.replays.problem;
  // A GPU NVML does not know.
  DeviceInfo other;
  other.pci_bus_id = "0000:09:00.0";
  other.uuid = "GPU-9";
  EXPECT_NE(reader->Read(other, {}).replays.problem.find("NVML does not know"), std::string::npos);
  // No driver at all.
  auto none = std::make_shared<fakes::FakeNvml>();
  none->unavailable = "libnvidia-ml.so.1 not loadable";
  const auto without = MakeLinkErrorReader(t.root(), none);
  EXPECT_NE(without->Read(gpu, {}).replays.problem.find("not loadable"), std::string::npos);
  EXPECT_TRUE(without->Read(gpu, {}).replays.missing);
  EXPECT_NE(without->Describe().find("not readable"), std::string::npos);
}

SimOptions FastSim() {
  SimOptions o;
  o.time_scale = 0;
  return o;
}

ProbeSpec Pinned() {
  ProbeSpec spec;
  spec.size_bytes = 64ull << 20;
  return spec;
}

// Runs probes on device 0 until its timeline passed `seconds`.
void RunFor(SimBackend& sim, double seconds) {
  double t = 0;
  while (t < seconds) t += sim.Run(0, Pinned()).device_time_s;
}

TEST(SimLinkErrors, AHealthyDeviceReadsZerosEverywhere) {
  SimBackend sim(FastSim());
  RunFor(sim, 2);
  const LinkErrors e = sim.ReadLinkErrors(0, sim.ReadLinkPath(0));
  ASSERT_EQ(e.aer.size(), 2u);  // the built-in host: the GPU and its switch's port
  for (const AerCounters& c : e.aer) {
    EXPECT_TRUE(c.Readable());
    for (const auto& count : c.device) EXPECT_EQ(count, 0u);
  }
  EXPECT_EQ(e.replays.value, 0u);
}

TEST(SimLinkErrors, AFaultGrowsItsCounterAtItsRateWhereItSays) {
  SimOptions o = FastSim();
  o.faults = {{.kind = SimFault::Kind::kLinkErrors,
               .counter = SimFault::ErrorCounter::kCorrectable,
               .rate = 100,
               .hop = 1}};
  SimBackend sim(o);
  RunFor(sim, 2);
  LinkErrors e = sim.ReadLinkErrors(0, sim.ReadLinkPath(0));
  EXPECT_EQ(e.aer[0].device[0], 0u);  // the GPU's own end counts nothing
  ASSERT_TRUE(e.aer[1].device[0]);
  EXPECT_GE(*e.aer[1].device[0], 200u);
  EXPECT_LT(*e.aer[1].device[0], 300u);  // 100 per second of its ~2 s
  EXPECT_EQ(e.aer[1].device[1], 0u);
  ASSERT_FALSE(e.aer[1].kinds.empty());
  EXPECT_EQ(e.aer[1].kinds[0].name, "RxErr");
  // Replays, and a new fault on reload: what was counted stays, the new one adds.
  const std::uint64_t before = *e.aer[1].device[0];
  sim.SetFaults({{.kind = SimFault::Kind::kLinkErrors,
                  .counter = SimFault::ErrorCounter::kReplay,
                  .rate = 50}});
  RunFor(sim, 1);
  e = sim.ReadLinkErrors(0, sim.ReadLinkPath(0));
  EXPECT_EQ(e.aer[1].device[0], before);  // never goes back, no longer grows
  ASSERT_TRUE(e.replays.value);
  EXPECT_GE(*e.replays.value, 50u);
  // Only on the device the fault names.
  o.devices = 2;
  o.faults[0].device = 1;
  SimBackend two(o);
  RunFor(two, 1);
  EXPECT_EQ(two.ReadLinkErrors(0, two.ReadLinkPath(0)).aer[1].device[0], 0u);
}

TEST(SimLinkErrors, OnATreeTheFilesAreReadAndTheFaultAddsUpToTheRootPort) {
  SimOptions o = FastSim();
  o.sysfs_root = fs::path(XFERD_TEST_DATA_DIR) / "sysfs/hgx-8gpu";
  o.faults = {{.kind = SimFault::Kind::kLinkErrors,
               .device = 0,
               .counter = SimFault::ErrorCounter::kNonFatal,
               .rate = 10,
               .hop = 2}};
  SimBackend sim(o);
  RunFor(sim, 1);
  const LinkPath path = sim.ReadLinkPath(0);
  const LinkErrors e = sim.ReadLinkErrors(0, path);
  ASSERT_EQ(e.aer.size(), 4u);  // GPU, the switch's two ports, the root port
  for (const AerCounters& c : e.aer) EXPECT_TRUE(c.Readable()) << c.bdf << ": " << c.problem;
  EXPECT_TRUE(e.aer.back().root_port);
  EXPECT_GE(e.aer[2].device[1].value_or(0), 10u);
  // The error message reached the root port, which counts it in its totals.
  EXPECT_EQ(e.aer.back().rootport[1], e.aer[2].device[1]);
  EXPECT_EQ(e.aer.back().device[1], 0u);
}

}  // namespace
}  // namespace xferd::probes
