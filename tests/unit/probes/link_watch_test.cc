// The link watch's readings: each link of a GPU's path read once, at its upper end, from
// sysfs attributes kept open (a value rewritten in place is seen at the next poll, a FIFO or
// an odd file is a problem named, never a hang or a speed), NVML where sysfs shows no link,
// and the simulated device's own link on top of its tree.
#include "xferd/probes/link_watch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "probes/sim/sim_topology.h"
#include "testing/fakes.h"
#include "xferd/probes/nvml.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

fs::path Tree(const std::string& name) {
  return fs::path(XFERD_TEST_DATA_DIR) / "sysfs" / name;
}

// A copy of a committed tree the test may rewrite.
fs::path CopyTree(const fakes::TempDir& dir, const std::string& name) {
  const fs::path root = dir.path() / name;
  fs::copy(Tree(name), root, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return root;
}

// Both ends of a link report the one state it trained to: a test sets them together.
void SetLink(const fs::path& root, const std::string& lower_bdf, int gen, int width) {
  const fs::path lower = fs::canonical(root / "bus/pci/devices" / lower_bdf);
  for (const fs::path& dir : {lower, lower.parent_path()}) {
    if (!fs::exists(dir / "current_link_speed")) continue;
    std::ofstream(dir / "current_link_speed", std::ios::trunc) << (gen == 5   ? "32.0"
                                                                   : gen == 4 ? "16.0"
                                                                   : gen == 2 ? "5.0"
                                                                              : "2.5")
                                                               << " GT/s PCIe\n";
    std::ofstream(dir / "current_link_width", std::ios::trunc) << width << "\n";
  }
}

DeviceInfo Gpu(int index, const std::string& bdf) {
  DeviceInfo d;
  d.index = index;
  d.uuid = "GPU-" + std::to_string(index);
  d.pci_bus_id = bdf;
  return d;
}

std::vector<WatchedGpu> Watched(LinkStateReader& reader, const fs::path& root) {
  std::vector<WatchedGpu> gpus;
  int i = 0;
  for (const std::string& bdf : FindNvidiaGpus(root)) {
    const DeviceInfo d = Gpu(i++, bdf);
    gpus.push_back({d, reader.Links(d, ReadLinkPath(root, bdf))});
  }
  return gpus;
}

TEST(WatchedLinks, OneLinkPerPairOfEndsReadAtItsUpperEnd) {
  // HGX: GPU 0000:18:00.0 below switch port 0000:17:00.0, the switch's upstream port
  // 0000:16:00.0 below root port 0000:15:01.0: two links.
  const std::vector<WatchedLink> hgx = WatchedLinks(ReadLinkPath(Tree("hgx-8gpu"), "0000:18:00.0"));
  ASSERT_EQ(hgx.size(), 2u);
  EXPECT_EQ(hgx[0].bdf, "0000:17:00.0");
  EXPECT_EQ(hgx[0].other_end_bdf, "0000:18:00.0");
  EXPECT_EQ(hgx[1].bdf, "0000:15:01.0");
  EXPECT_EQ(hgx[1].other_end_bdf, "0000:16:00.0");
  EXPECT_EQ(hgx[0].max_gen, 5);
  EXPECT_EQ(hgx[0].max_width, 16);
  // A VM's GPU on the root bus: its own link, read at itself.
  const std::vector<WatchedLink> vm = WatchedLinks(ReadLinkPath(Tree("vm-h200"), "0000:00:06.0"));
  ASSERT_EQ(vm.size(), 1u);
  EXPECT_EQ(vm[0].bdf, "0000:00:06.0");
  EXPECT_EQ(vm[0].other_end_bdf, "");
  // An integrated GPU or NVLink-C2C: no PCIe link carries its copies.
  LinkPath c2c = ReadLinkPath(Tree("vm-h200"), "0000:00:06.0");
  c2c.c2c = true;
  EXPECT_TRUE(WatchedLinks(c2c).empty());
}

TEST(LinkStateReader, SeesALinkRewrittenInPlaceAtTheNextPoll) {
  fakes::TempDir dir("linkwatch");
  const fs::path root = CopyTree(dir, "hgx-8gpu");
  const auto reader = MakeLinkStateReader(root, nullptr);
  const std::vector<WatchedGpu> gpus = Watched(*reader, root);
  ASSERT_EQ(gpus.size(), 8u);
  std::vector<LinkWatchReading> readings;
  reader->Read(gpus, readings);
  ASSERT_EQ(readings.size(), 8u);
  for (const LinkWatchReading& r : readings) {
    EXPECT_EQ(r.problem, "");
    EXPECT_EQ(r.source, "sysfs");
    for (const LinkState& l : r.links) EXPECT_EQ(l, (LinkState{5, 16}));
  }
  // GPU 0's own link drops to x8; its switch's uplink (which GPU 1 shares) to Gen4.
  const std::string gpu0 = gpus[0].device.pci_bus_id;
  SetLink(root, gpu0, 5, 8);
  const fs::path uplink =
      fs::canonical(root / "bus/pci/devices" / gpu0).parent_path().parent_path();
  SetLink(root, uplink.filename().string(), 4, 16);
  reader->Read(gpus, readings);
  EXPECT_EQ(readings[0].links[0], (LinkState{5, 8}));
  EXPECT_EQ(readings[0].links[1], (LinkState{4, 16}));
  // The other GPU behind that switch reads the shared uplink the same, its own link as it was.
  ASSERT_EQ(gpus[1].links[1].bdf, gpus[0].links[1].bdf);
  EXPECT_EQ(readings[1].links[0], (LinkState{5, 16}));
  EXPECT_EQ(readings[1].links[1], (LinkState{4, 16}));
}

TEST(LinkStateReader, NamesALinkItCannotReadAndNeverHangsOnIt) {
  fakes::TempDir dir("linkwatch");
  const fs::path root = CopyTree(dir, "vm-h200");
  const fs::path gpu = fs::canonical(root / "bus/pci/devices/0000:00:06.0");
  fs::remove(gpu / "current_link_width");
  ASSERT_EQ(mkfifo((gpu / "current_link_width").c_str(), 0600), 0);  // a FIFO: no writer
  const auto reader = MakeLinkStateReader(root, nullptr);
  const std::vector<WatchedGpu> gpus = Watched(*reader, root);
  ASSERT_EQ(gpus.size(), 1u);
  std::vector<LinkWatchReading> readings;
  const auto start = std::chrono::steady_clock::now();
  reader->Read(gpus, readings);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(readings.size(), 1u);
  EXPECT_FALSE(readings[0].links[0].Readable());
  EXPECT_NE(readings[0].problem.find("current_link_width: it is a FIFO, not a regular file"),
            std::string::npos)
      << readings[0].problem;

  // A width the kernel does not write: not read either, and said with the text.
  fs::remove(gpu / "current_link_width");
  std::ofstream(gpu / "current_link_width") << "sixteen\n";
  const auto again = MakeLinkStateReader(root, nullptr);
  again->Read(gpus, readings);
  EXPECT_FALSE(readings[0].links[0].Readable());
  EXPECT_NE(readings[0].problem.find("\"sixteen\""), std::string::npos) << readings[0].problem;
}

TEST(LinkStateReader, TakesTheGpusOwnLinkFromNvmlWhereSysfsShowsNone) {
  fakes::TempDir dir("linkwatch");  // no tree at all: sysfs not mounted in a container
  auto nvml = std::make_shared<fakes::FakeNvml>();
  nvml->Set("0000:00:06.0", [](fakes::FakeNvml::Gpu& g) {
    g.uuid = "GPU-0";
    g.link_gen = 1;
    g.link_width = 16;
    g.max_link_gen = 5;
    g.max_link_width = 16;
    g.counters.rx.value = 1000;
    g.counters.rx.timestamp_us = 2'000'000;
    g.counters.rx.is_64_bit = g.counters.tx.is_64_bit = true;
    g.counters.rx_step = 4'000'000'000ull;
    g.counters.timestamp_step_us = 1'000'000;
  });
  const auto reader = MakeLinkStateReader(dir.path(), nvml);
  const DeviceInfo gpu = Gpu(0, "0000:00:06.0");
  const std::vector<WatchedLink> links =
      reader->Links(gpu, ReadLinkPath(dir.path(), gpu.pci_bus_id));
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].max_gen, 5);
  EXPECT_EQ(links[0].max_width, 16);
  std::vector<LinkWatchReading> readings;
  reader->Read({{gpu, links}}, readings);
  EXPECT_EQ(readings[0].links[0], (LinkState{1, 16}));
  EXPECT_NE(readings[0].source.find("NVML"), std::string::npos);
  // Its traffic from NVML's PCIe byte counters: 4 GB a second.
  const auto a = reader->Traffic(gpu);
  const auto b = reader->Traffic(gpu);
  ASSERT_TRUE(a && b);
  EXPECT_DOUBLE_EQ((b->bytes - a->bytes) / (b->at_s - a->at_s), 4e9);
  // Without NVML there is nothing to read.
  EXPECT_TRUE(MakeLinkStateReader(dir.path(), nullptr)
                  ->Links(gpu, ReadLinkPath(dir.path(), gpu.pci_bus_id))
                  .empty());
  EXPECT_FALSE(MakeLinkStateReader(dir.path(), nullptr)->Traffic(gpu));
}

TEST(SimLinkStateReader, ShowsPowerSavingAtIdleAndTheTrainedLinkWhileProbing) {
  SimOptions options;
  options.time_scale = 0;
  options.link_gen = 4;
  options.idle_link_gen = 1;
  SimBackend sim(options);
  const DeviceInfo gpu = sim.Devices().at(0);
  const auto reader = MakeSimLinkStateReader(sim, 0);
  const std::vector<WatchedLink> links = reader->Links(gpu, sim.ReadLinkPath(gpu.index));
  ASSERT_EQ(links.size(), 2u);  // the GPU's link and its switch's uplink
  EXPECT_EQ(links[0].max_gen, 4);
  std::vector<LinkWatchReading> readings;
  reader->Read({{gpu, links}}, readings);
  EXPECT_EQ(readings[0].links[0], (LinkState{1, 16}));  // idle: power saving
  EXPECT_EQ(readings[0].links[1], (LinkState{4, 16}));
  sim.Run(gpu.index, fakes::PinnedSpec());
  reader->Read({{gpu, links}}, readings);
  EXPECT_EQ(readings[0].links[0], (LinkState{4, 16}));  // right after a probe: trained
  // Its probes count as the link's traffic.
  EXPECT_GT(reader->Traffic(gpu)->bytes, 64e6);
}

TEST(SimLinkStateReader, PutsTheDevicesFaultsAndASteadyLoadOnTopOfItsTree) {
  fakes::TempDir dir("linkwatch");
  SimOptions options;
  options.time_scale = 0;
  options.sysfs_root = CopyTree(dir, "vm-h200");
  options.idle_link_gen = 1;
  SimFault down;
  down.kind = SimFault::Kind::kDownTrain;
  down.width = 8;
  options.faults.push_back(down);
  SimBackend sim(options);
  const DeviceInfo gpu = sim.Devices().at(0);
  std::vector<LinkWatchReading> readings;
  const auto idle = MakeSimLinkStateReader(sim, 0);
  const auto links = idle->Links(gpu, sim.ReadLinkPath(gpu.index));
  idle->Read({{gpu, links}}, readings);
  EXPECT_EQ(readings[0].links[0], (LinkState{1, 8}));  // idle, and the fault's width
  // A steady load ([simulate] pcie_bytes_per_second) keeps the link trained, and flows.
  const auto loaded = MakeSimLinkStateReader(sim, 3e9);
  loaded->Read({{gpu, links}}, readings);
  EXPECT_EQ(readings[0].links[0], (LinkState{5, 8}));
  const auto a = loaded->Traffic(gpu);
  sim.Run(gpu.index, fakes::PinnedSpec());  // moves the device's timeline on
  const auto b = loaded->Traffic(gpu);
  ASSERT_TRUE(a && b && b->at_s > a->at_s);
  EXPECT_GE((b->bytes - a->bytes) / (b->at_s - a->at_s), 3e9);
}

}  // namespace
}  // namespace xferd::probes
