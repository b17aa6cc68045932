// PCIe paths read from fake sysfs trees built in a temp dir.
#include "xferd/probes/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

// One device on the way from the root complex down to the GPU, as sysfs shows it.
struct FakeDevice {
  std::string bdf;
  std::string current_speed, current_width, max_speed, max_width;  // "" = file absent
};

// A sysfs root with /devices/pci0000:00/<chain> and /bus/pci/devices/<bdf> links into it.
class FakeSysfs {
 public:
  FakeSysfs() {
    std::string pattern = (fs::temp_directory_path() / "xferd-sysfs-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    fs::create_directories(root_ / "bus/pci/devices");
    fs::create_directories(root_ / "devices/pci0000:00");
  }
  ~FakeSysfs() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  const fs::path& root() const { return root_; }

  // Devices from the root port down; returns the last one's directory.
  fs::path AddChain(const std::vector<FakeDevice>& chain) {
    fs::path dir = root_ / "devices/pci0000:00";
    for (const FakeDevice& d : chain) {
      dir /= d.bdf;
      fs::create_directories(dir);
      Write(dir / "current_link_speed", d.current_speed);
      Write(dir / "current_link_width", d.current_width);
      Write(dir / "max_link_speed", d.max_speed);
      Write(dir / "max_link_width", d.max_width);
      const fs::path link = root_ / "bus/pci/devices" / d.bdf;
      if (!fs::exists(link)) {
        fs::create_directory_symlink(fs::relative(dir, link.parent_path()), link);
      }
    }
    return dir;
  }

  static void Write(const fs::path& file, const std::string& text) {
    if (text.empty()) return;
    std::ofstream(file) << text << "\n";
  }

 private:
  fs::path root_;
};

// The path of the last device of `chain` (the GPU), read from a fake sysfs holding `chain`.
LinkPath ReadChain(const std::vector<FakeDevice>& chain) {
  FakeSysfs sysfs;
  sysfs.AddChain(chain);
  return ReadLinkPath(sysfs.root(), chain.back().bdf);
}

// A Gen5 x16 GPU (0000:03:00.0) on a switch's Gen5 x16 downstream port (0000:02:00.0), the
// switch's upstream port `upstream` (0000:01:00.0) on `root_port` (0000:00:01.0).
LinkPath ReadGen5GpuBehindASwitch(const FakeDevice& root_port, const FakeDevice& upstream) {
  return ReadChain({root_port,
                    upstream,
                    {"0000:02:00.0", "32.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16"},
                    {"0000:03:00.0", "32.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16"}});
}

constexpr double kGen4x16 = 31.5077e9;  // 16 GT/s x 16 x 128/130 / 8
constexpr double kGen4x8 = kGen4x16 / 2;

TEST(PcieBytesPerSecond, MatchesTheSpecForEveryGeneration) {
  EXPECT_NEAR(PcieBytesPerSecond(1, 1), 0.25e9, 1e3);  // 2.5 GT/s, 8b/10b
  EXPECT_NEAR(PcieBytesPerSecond(2, 8), 4.0e9, 1e3);
  EXPECT_NEAR(PcieBytesPerSecond(3, 16), 15.754e9, 1e6);
  EXPECT_NEAR(PcieBytesPerSecond(4, 16), 31.5e9, 0.01e9);
  EXPECT_NEAR(PcieBytesPerSecond(5, 16), 63.0e9, 0.02e9);
  EXPECT_NEAR(PcieBytesPerSecond(6, 16), 121.0e9, 1e6);  // 64 GT/s, FLIT 242/256
  EXPECT_NEAR(PcieBytesPerSecond(4, 4), PcieBytesPerSecond(4, 16) / 4, 1.0);
  EXPECT_EQ(PcieBytesPerSecond(0, 16), 0.0);
  EXPECT_EQ(PcieBytesPerSecond(7, 16), 0.0);
  EXPECT_EQ(PcieBytesPerSecond(4, 0), 0.0);
}

TEST(ParseLinkSpeed, ReadsWhatSysfsWrites) {
  EXPECT_EQ(ParseLinkSpeed("2.5 GT/s"), 1);
  EXPECT_EQ(ParseLinkSpeed("5 GT/s"), 2);
  EXPECT_EQ(ParseLinkSpeed("5.0 GT/s PCIe"), 2);
  EXPECT_EQ(ParseLinkSpeed("8.0 GT/s PCIe"), 3);
  EXPECT_EQ(ParseLinkSpeed("16.0 GT/s PCIe\n"), 4);
  EXPECT_EQ(ParseLinkSpeed("32.0 GT/s PCIe"), 5);
  EXPECT_EQ(ParseLinkSpeed("64.0 GT/s PCIe"), 6);
  EXPECT_EQ(ParseLinkSpeed("Unknown"), 0);
  EXPECT_EQ(ParseLinkSpeed("Unknown speed"), 0);
  EXPECT_EQ(ParseLinkSpeed("12.0 GT/s"), 0);
  EXPECT_EQ(ParseLinkSpeed("16.0 Gb/s"), 0);
  EXPECT_EQ(ParseLinkSpeed(""), 0);
}

TEST(FormatLink, NamesGenerationAndWidth) {
  EXPECT_EQ(FormatLink(4, 16), "Gen4 x16");
  EXPECT_EQ(FormatLink(0, 8), "Gen? x8");
}

TEST(ReadLinkPath, Gen4x16GpuOnARootPort) {
  const LinkPath path =
      ReadChain({{"0000:00:01.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"},
                 {"0000:01:00.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"}});
  EXPECT_TRUE(path.pcie);
  ASSERT_EQ(path.links.size(), 2u);
  EXPECT_EQ(path.links[0].bdf, "0000:01:00.0");  // the GPU's own link first
  EXPECT_EQ(path.links[1].bdf, "0000:00:01.0");
  EXPECT_EQ(path.links[0].current_gen, 4);
  EXPECT_EQ(path.links[0].current_width, 16);
  EXPECT_FALSE(path.links[0].Downtrained());
  ASSERT_NE(path.Narrowest(), nullptr);
  EXPECT_NEAR(path.Narrowest()->CurrentBytesPerSecond(), kGen4x16, 1e7);
  EXPECT_TRUE(path.note.empty()) << path.note;
}

TEST(ReadLinkPath, NarrowestLinkBehindASwitchWins) {
  // Root port and switch upstream port trained at Gen4 x8; the GPU's own slot is Gen5 x16.
  const LinkPath path =
      ReadGen5GpuBehindASwitch({"0000:00:01.0", "16.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "16"},
                               {"0000:01:00.0", "16.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "16"});
  ASSERT_EQ(path.links.size(), 4u);
  EXPECT_EQ(path.links[0].current_gen, 5);
  const PcieLink* narrowest = path.Narrowest();
  ASSERT_NE(narrowest, nullptr);
  EXPECT_EQ(narrowest->current_gen, 4);
  EXPECT_EQ(narrowest->current_width, 8);
  EXPECT_EQ(narrowest->bdf, "0000:01:00.0");
  EXPECT_NEAR(narrowest->CurrentBytesPerSecond(), kGen4x8, 1e7);
}

TEST(ReadLinkPath, DowntrainedLinkIsSeenAndIsTheNarrowest) {
  const LinkPath path =
      ReadChain({{"0000:00:01.0", "16.0 GT/s PCIe", "8", "16.0 GT/s PCIe", "16"},
                 {"0000:01:00.0", "16.0 GT/s PCIe", "8", "16.0 GT/s PCIe", "16"}});
  ASSERT_FALSE(path.links.empty());
  EXPECT_TRUE(path.links[0].Downtrained());
  EXPECT_EQ(path.links[0].current_width, 8);
  EXPECT_EQ(path.links[0].max_width, 16);
  EXPECT_NEAR(path.links[0].MaxBytesPerSecond(), kGen4x16, 1e7);
  ASSERT_NE(path.Narrowest(), nullptr);
  EXPECT_NEAR(path.Narrowest()->CurrentBytesPerSecond(), kGen4x8, 1e7);
}

TEST(ReadLinkPath, MissingLinkFilesLeaveTheLinkUnknownWithANote) {
  // A VM's GPU straight on the root bus, with no link attributes at all.
  const LinkPath path = ReadChain({{"0000:00:06.0", "", "", "", ""}});
  EXPECT_TRUE(path.pcie);
  ASSERT_EQ(path.links.size(), 1u);
  EXPECT_EQ(path.links[0].current_gen, 0);
  EXPECT_EQ(path.Narrowest(), nullptr);
  EXPECT_NE(path.note.find("0000:00:06.0"), std::string::npos) << path.note;
}

TEST(ReadLinkPath, UnknownSpeedFallsBackToTheKnownLinks) {
  const LinkPath path = ReadChain({{"0000:00:01.0", "8.0 GT/s PCIe", "16", "8.0 GT/s PCIe", "16"},
                                   {"0000:01:00.0", "Unknown", "16", "Unknown", "16"}});
  ASSERT_EQ(path.links.size(), 2u);
  EXPECT_EQ(path.links[0].current_gen, 0);
  EXPECT_EQ(path.links[0].current_width, 16);
  EXPECT_FALSE(path.links[0].Downtrained());  // unknown is not "down"
  EXPECT_NE(path.note.find("unknown"), std::string::npos) << path.note;
  ASSERT_NE(path.Narrowest(), nullptr);
  EXPECT_EQ(path.Narrowest()->bdf, "0000:00:01.0");
  EXPECT_EQ(path.Narrowest()->current_gen, 3);
}

TEST(ReadLinkPath, NoSuchDeviceSaysSo) {
  FakeSysfs sysfs;
  const LinkPath path = ReadLinkPath(sysfs.root(), "0000:09:00.0");
  EXPECT_TRUE(path.links.empty());
  EXPECT_NE(path.note.find("no PCI device 0000:09:00.0"), std::string::npos) << path.note;
  EXPECT_EQ(path.Narrowest(), nullptr);
}

TEST(ReadLinkPath, GarbageAddressIsRefusedNotCrashedOn) {
  FakeSysfs sysfs;
  for (const char* bad : {"not-a-bdf", "0000:01:00", ":", "0000:zz:00.0", "../../etc"}) {
    const LinkPath path = ReadLinkPath(sysfs.root(), bad);
    EXPECT_TRUE(path.links.empty()) << bad;
    EXPECT_FALSE(path.note.empty()) << bad;
  }
}

TEST(ReadLinkPath, IntegratedDeviceHasNoPcieLink) {
  const LinkPath path = ReadLinkPath("/nonexistent", "");
  EXPECT_FALSE(path.pcie);
  EXPECT_TRUE(path.links.empty());
  EXPECT_FALSE(path.note.empty());
  EXPECT_EQ(path.Narrowest(), nullptr);
}

TEST(ReadLinkPath, ReadsNumaNodeAndIommuType) {
  FakeSysfs sysfs;
  const fs::path gpu =
      sysfs.AddChain({{"0000:00:01.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"},
                      {"0000:41:00.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"}});
  FakeSysfs::Write(gpu / "numa_node", "1");
  const fs::path group = sysfs.root() / "kernel/iommu_groups/12";
  fs::create_directories(group);
  FakeSysfs::Write(group / "type", "DMA-FQ");
  fs::create_directory_symlink(group, gpu / "iommu_group");

  // NVML writes an 8-digit domain and upper case; both must find the device.
  const LinkPath path = ReadLinkPath(sysfs.root(), "00000000:41:00.0");
  EXPECT_EQ(path.numa_node, 1);
  EXPECT_EQ(path.iommu_type, "DMA-FQ");
  ASSERT_EQ(path.links.size(), 2u);
  EXPECT_EQ(ReadLinkPath(sysfs.root(), "0000:41:00.0").links.size(), 2u);
  EXPECT_EQ(ReadLinkPath(sysfs.root(), "41:00.0").links.size(), 2u);
}

TEST(ReadLinkPath, NoNumaNodeAndNoIommu) {
  FakeSysfs sysfs;
  const fs::path gpu =
      sysfs.AddChain({{"0000:01:00.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"}});
  FakeSysfs::Write(gpu / "numa_node", "-1");
  const LinkPath path = ReadLinkPath(sysfs.root(), "0000:01:00.0");
  EXPECT_EQ(path.numa_node, -1);
  EXPECT_EQ(path.iommu_type, "");
}

}  // namespace
}  // namespace xferd::probes

namespace xferd::probes {
namespace {

// A link is downtrained only below what both of its ends can do; an end that can do more
// than the other is capped by it, which is no fault.
TEST(ReadLinkPath, Gen5GpuInAGen4SlotIsCappedNotDowntrained) {
  const LinkPath path =
      ReadChain({{"0000:00:01.0", "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "16"},
                 {"0000:01:00.0", "16.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16"}});
  ASSERT_EQ(path.links.size(), 2u);
  const PcieLink& gpu = path.links[0];
  EXPECT_EQ(gpu.other_end_bdf, "0000:00:01.0");
  EXPECT_EQ(gpu.other_end_max_gen, 4);
  EXPECT_EQ(gpu.LinkMaxGen(), 4);
  EXPECT_FALSE(gpu.Downtrained());
  EXPECT_TRUE(gpu.CappedByOtherEnd());
  EXPECT_FALSE(path.links[1].Downtrained());
  EXPECT_FALSE(path.links[1].CappedByOtherEnd());
  // The link trained to Gen4 x16: that is its rate.
  EXPECT_NEAR(path.Narrowest()->CurrentBytesPerSecond(), kGen4x16, 1e7);
  ASSERT_NE(path.NarrowestMax(), nullptr);
  EXPECT_NEAR(path.NarrowestMax()->LinkMaxBytesPerSecond(), kGen4x16, 1e7);
}

TEST(ReadLinkPath, AnX16RootPortLinkedToAnX8SwitchIsNotDowntrained) {
  // Root port Gen5 x16 capable; the switch's upstream port x8: their link trains to x8.
  // Below the switch the GPU's own link is Gen5 x16 at both ends.
  const LinkPath path =
      ReadGen5GpuBehindASwitch({"0000:00:01.0", "32.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "16"},
                               {"0000:01:00.0", "32.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "8"});
  ASSERT_EQ(path.links.size(), 4u);
  for (const PcieLink& link : path.links) EXPECT_FALSE(link.Downtrained()) << link.bdf;
  // The root port can do more than the switch allows.
  EXPECT_EQ(path.links[3].bdf, "0000:00:01.0");
  EXPECT_EQ(path.links[3].other_end_bdf, "0000:01:00.0");
  EXPECT_TRUE(path.links[3].CappedByOtherEnd());
  EXPECT_EQ(path.links[2].other_end_bdf, "0000:00:01.0");
  EXPECT_EQ(path.links[0].other_end_bdf, "0000:02:00.0");
  // The x8 link is the narrowest.
  EXPECT_NEAR(path.Narrowest()->CurrentBytesPerSecond(), PcieBytesPerSecond(5, 8), 1e7);
}

TEST(ReadLinkPath, BelowBothEndsIsDowntrainedSeenFromEitherEnd) {
  const LinkPath path =
      ReadChain({{"0000:00:01.0", "32.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "16"},
                 {"0000:01:00.0", "32.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "16"}});
  ASSERT_EQ(path.links.size(), 2u);
  EXPECT_TRUE(path.links[0].Downtrained());
  EXPECT_TRUE(path.links[1].Downtrained());
  EXPECT_EQ(path.links[0].LinkMaxWidth(), 16);
}

TEST(ReadLinkPath, AGpuWithNoPortAboveKeepsItsOwnMaximum) {
  // A virtual machine's root bus: the GPU alone on the path, its other end unknown.
  const LinkPath path =
      ReadChain({{"0000:00:06.0", "16.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16"}});
  ASSERT_EQ(path.links.size(), 1u);
  EXPECT_TRUE(path.links[0].other_end_bdf.empty());
  EXPECT_EQ(path.links[0].LinkMaxGen(), 5);
  EXPECT_TRUE(path.links[0].Downtrained());  // only its own maximum to go by
  EXPECT_FALSE(path.links[0].CappedByOtherEnd());
}

}  // namespace
}  // namespace xferd::probes
