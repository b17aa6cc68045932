// The simulated host's topology: the built-in one and fake sysfs trees (tests/data/sysfs),
// read with the real topology reader, and the sim's bandwidth following the paths.
#include "probes/sim/sim_topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "platform/exit_codes.h"
#include "testing/fakes.h"
#include "xferd/probes/backend.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

const fs::path kSysfs = fs::path(XFERD_TEST_DATA_DIR) / "sysfs";

SimOptions FromTree(const std::string& tree) {
  SimOptions o;
  o.time_scale = 0;
  o.sysfs_root = kSysfs / tree;
  return o;
}


// A copy of a tree that a test may change.
class TreeCopy {
 public:
  explicit TreeCopy(const std::string& tree) {
    std::string pattern = (fs::temp_directory_path() / "xferd-sysfs-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    fs::copy(kSysfs / tree, root_, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
  ~TreeCopy() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const fs::path& root() const { return root_; }
  void Write(const std::string& bdf, const std::string& file, const std::string& text) {
    std::ofstream(root_ / "bus/pci/devices" / bdf / file) << text << "\n";
  }

 private:
  fs::path root_;
};

TEST(SimTopology, HgxTreeGivesItsEightGpusOnlyWithTheirNodesAndSwitches) {
  SimBackend sim(FromTree("hgx-8gpu"));
  const auto devices = sim.Devices();
  ASSERT_EQ(devices.size(), 8u);  // not the NVSwitch, NVMe drives or NICs
  const char* expected[] = {"0000:18:00.0", "0000:19:00.0", "0000:3a:00.0", "0000:3b:00.0",
                            "0000:9a:00.0", "0000:9b:00.0", "0000:ba:00.0", "0000:bb:00.0"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(devices[i].index, i);
    EXPECT_EQ(devices[i].pci_bus_id, expected[i]);
    EXPECT_TRUE(devices[i].simulated);
    const LinkPath path = sim.ReadLinkPath(i);
    EXPECT_EQ(path.numa_node, i < 4 ? 0 : 1) << i;
    // GPU, downstream port, switch upstream port, root port.
    ASSERT_EQ(path.links.size(), 4u) << i;
    EXPECT_EQ(path.links[0].bdf, expected[i]);
    EXPECT_EQ(path.links[0].current_gen, 5);
    EXPECT_EQ(path.links[0].current_width, 16);
  }
  // The two GPUs of a switch share its upstream port.
  EXPECT_EQ(sim.ReadLinkPath(0).links[2].bdf, "0000:16:00.0");
  EXPECT_EQ(sim.ReadLinkPath(1).links[2].bdf, "0000:16:00.0");
  EXPECT_EQ(sim.ReadLinkPath(2).links[2].bdf, "0000:38:00.0");
}

TEST(SimTopology, BandwidthFollowsTheNarrowestLinkOfTheTree) {
  SimBackend hgx(FromTree("hgx-8gpu"));
  SimBackend igx(FromTree("igx-dgpu"));
  ASSERT_EQ(igx.Devices().size(), 1u);  // the GPU's audio function is no GPU
  const LinkPath path = igx.ReadLinkPath(0);
  ASSERT_NE(path.Narrowest(), nullptr);
  EXPECT_EQ(path.Narrowest()->current_gen, 4);
  EXPECT_EQ(path.Narrowest()->current_width, 8);
  EXPECT_EQ(path.links[0].current_gen, 5);  // the GPU's own link is Gen5 x16
  EXPECT_EQ(path.numa_node, -1);
  const double gen4x8 = PcieBytesPerSecond(4, 8), gen5x16 = PcieBytesPerSecond(5, 16);
  const ProbeSample on_igx = igx.Run(0, fakes::PinnedSpec());
  const ProbeSample on_hgx = hgx.Run(0, fakes::PinnedSpec());
  ASSERT_EQ(on_igx.status, ProbeStatus::kOk) << on_igx.message;
  ASSERT_EQ(on_hgx.status, ProbeStatus::kOk) << on_hgx.message;
  EXPECT_NEAR(on_igx.MedianBandwidth() / gen4x8, 0.80, 0.03);
  EXPECT_NEAR(on_hgx.MedianBandwidth() / gen5x16, 0.80, 0.03);
  EXPECT_EQ(on_hgx.host_numa_node, 0);
}

TEST(SimTopology, ATreeChangedUnderTheBackendIsReadAgain) {
  TreeCopy tree("hgx-8gpu");
  SimOptions o = FromTree("hgx-8gpu");
  o.sysfs_root = tree.root();
  SimBackend sim(o);
  const double before = sim.Run(2, fakes::PinnedSpec()).MedianBandwidth();
  // The uplink of GPU 2's switch trains down to x4.
  tree.Write("0000:38:00.0", "current_link_width", "4");
  const LinkPath path = sim.ReadLinkPath(2);
  ASSERT_NE(path.Narrowest(), nullptr);
  EXPECT_EQ(path.Narrowest()->bdf, "0000:38:00.0");
  EXPECT_TRUE(path.links[2].Downtrained());
  const double after = sim.Run(2, fakes::PinnedSpec()).MedianBandwidth();
  EXPECT_NEAR(after / before, 0.25, 0.02);
}

TEST(SimTopology, ATreeWithoutNvidiaGpusIsRefusedWithTheFix) {
  SimOptions o = FromTree("no-such-tree");
  try {
    SimBackend sim(o);
    FAIL() << "no error";
  } catch (const NoDeviceError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("no-such-tree"), std::string::npos) << text;
    EXPECT_NE(text.find("0x10de"), std::string::npos) << text;
    EXPECT_NE(text.find("sysfs_root"), std::string::npos) << text;
  }
}

TEST(SimTopology, AFaultNamingADeviceTheTreeLacksIsAConfigError) {
  SimOptions o = FromTree("igx-dgpu");
  SimFault fault;
  fault.kind = SimFault::Kind::kLost;
  fault.device = 3;
  o.faults.push_back(fault);
  try {
    SimBackend sim(o);
    FAIL() << "no error";
  } catch (const platform::Error& e) {
    EXPECT_EQ(e.failure(), platform::Failure::kConfig);
    EXPECT_NE(std::string(e.what()).find("devices 0-0"), std::string::npos) << e.what();
  }
}

TEST(SimTopology, DowntrainFaultLowersTheGpusOwnLinkInATree) {
  SimOptions o = FromTree("hgx-8gpu");
  SimFault fault;
  fault.kind = SimFault::Kind::kDownTrain;
  fault.device = 1;
  fault.gen = 5;
  fault.width = 8;
  o.faults.push_back(fault);
  SimBackend sim(o);
  EXPECT_TRUE(sim.ReadLinkPath(1).links[0].Downtrained());
  EXPECT_FALSE(sim.ReadLinkPath(0).links[0].Downtrained());
  EXPECT_NEAR(sim.Run(1, fakes::PinnedSpec()).MedianBandwidth() / sim.Run(0, fakes::PinnedSpec()).MedianBandwidth(), 0.5,
              0.02);
}

TEST(SimTopology, BuiltInHostPutsGpusBehindSwitchesOverNumaNodes) {
  SimOptions o = fakes::SwitchedSimHost(6, 2, 4, 8);
  o.numa_nodes = 2;
  SimBackend sim(o);
  const auto devices = sim.Devices();
  ASSERT_EQ(devices.size(), 6u);
  EXPECT_EQ(devices[0].pci_bus_id, "0000:11:00.0");
  EXPECT_EQ(devices[1].pci_bus_id, "0000:12:00.0");
  EXPECT_EQ(devices[2].pci_bus_id, "0000:21:00.0");
  for (int i = 0; i < 6; ++i) {
    const LinkPath path = sim.ReadLinkPath(i);
    ASSERT_EQ(path.links.size(), 2u);
    EXPECT_EQ(path.numa_node, (i / 2) % 2) << i;
    EXPECT_EQ(path.links[1].bdf, i < 2 ? "0000:10:00.0" : i < 4 ? "0000:20:00.0" : "0000:30:00.0");
    ASSERT_NE(path.Narrowest(), nullptr);
    EXPECT_EQ(path.Narrowest()->bdf, path.links[1].bdf);  // the Gen4 x8 uplink
  }
  EXPECT_NEAR(sim.Run(0, fakes::PinnedSpec()).MedianBandwidth() / PcieBytesPerSecond(4, 8), 0.80, 0.03);
}

TEST(SimTopology, DefaultBuiltInHostIsUnchanged) {
  SimOptions o;
  o.time_scale = 0;
  o.devices = 3;
  SimBackend sim(o);
  EXPECT_EQ(sim.Devices()[0].pci_bus_id, "0000:11:00.0");
  EXPECT_EQ(sim.Devices()[2].pci_bus_id, "0000:31:00.0");
  EXPECT_EQ(sim.ReadLinkPath(0).links[1].bdf, "0000:10:00.0");
  EXPECT_EQ(sim.ReadLinkPath(1).numa_node, 1);
}

}  // namespace
}  // namespace xferd::probes

namespace xferd::probes {
namespace {

TEST(SimTopology, GraceHopperHostsCopyOverNvlinkC2c) {
  SimOptions o;
  o.time_scale = 0;
  o.devices = 2;
  o.c2c = true;
  SimBackend sim(o);
  const auto devices = sim.Devices();
  EXPECT_TRUE(devices[0].c2c);
  EXPECT_EQ(HostLinkOf(devices[0]), HostLink::kC2c);
  const LinkPath path = sim.ReadLinkPath(0);
  EXPECT_TRUE(path.c2c);
  // Copies run at C2C's rate (0.63-0.83 of it, as on a GH200), not at the Gen4 x16 PCIe
  // link the topology also shows.
  const ProbeSample h2d = sim.Run(0, fakes::PinnedSpec());
  EXPECT_GT(h2d.MedianBandwidth(), 0.63 * kC2cBytesPerSecond);
  EXPECT_LT(h2d.MedianBandwidth(), 0.83 * kC2cBytesPerSecond);
  // Each superchip has its own C2C: together they lose nothing.
  for (const ProbeSample& s : sim.RunConcurrent({0, 1}, fakes::PinnedSpec())) {
    EXPECT_NEAR(s.MedianBandwidth() / h2d.MedianBandwidth(), 1.0, 0.03);
  }
}

TEST(SimTopology, RemoteNumaNeedsAGpuWithANumaNode) {
  // igx-dgpu is a single-node host (numa_node -1): no far node to put the buffers on.
  SimOptions o = FromTree("igx-dgpu");
  o.faults = {{.kind = SimFault::Kind::kRemoteNuma, .factor = 0.7}};
  try {
    SimBackend sim(o);
    FAIL() << "a remote_numa fault on a GPU without a NUMA node was accepted";
  } catch (const platform::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no NUMA node"), std::string::npos) << what;
    EXPECT_NE(what.find("device = N"), std::string::npos) << what;
  }
  // hgx-8gpu's GPUs sit on nodes 0 and 1: each gets the other one.
  SimOptions hgx = FromTree("hgx-8gpu");
  hgx.faults = o.faults;
  SimBackend sim(hgx);
  ProbeSpec spec;
  spec.mode = TransferMode::kPinned;
  spec.size_bytes = 4 << 20;
  spec.iterations = 2;
  for (int device : {0, 7}) {
    const ProbeSample s = sim.Run(device, spec);
    EXPECT_EQ(s.host_numa_node, sim.ReadLinkPath(device).numa_node == 0 ? 1 : 0);
  }
}

}  // namespace
}  // namespace xferd::probes
