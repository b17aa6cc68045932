// The band and the rules that hold a result to it, shared by `xferd probe` and `xferd run`:
// what a band is a share of, a GPU's band from its path, each mode's share, which results
// it holds, the verdict, and a concurrent group's band.
#include "core/band.h"

#include <gtest/gtest.h>

#include "core/host_groups.h"
#include "core/plan.h"
#include "testing/fakes.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::core {
namespace {

using probes::Direction;
using probes::TransferMode;

probes::DeviceInfo SimGpu() {
  probes::DeviceInfo d;
  d.index = 0;
  d.uuid = "SIM-e9fd6049-d65a-f21e-5775-264a9a7e1b09";
  return d;
}

probes::LinkPath Gen4x16() {
  probes::LinkPath path;
  path.pcie = true;
  path.links.push_back({"0000:11:00.0", 4, 16, 4, 16});
  return path;
}

const double kGen4x16 = probes::PcieBytesPerSecond(4, 16);
const double kGen4x8 = probes::PcieBytesPerSecond(4, 8);

// A PCIe path from the GPU's own link up: {bdf, current gen, width, max gen, width} each.
probes::LinkPath Path(std::vector<probes::PcieLink> links) {
  probes::LinkPath path;
  path.links = std::move(links);
  probes::PairLinkEnds(path);
  return path;
}

TEST(BandFromPath, TheSeedsBandForGen4x16) {
  const ExpectedBand band = BandFromPath(
      Path({{"0000:01:00.0", 4, 16, 4, 16}, {"0000:00:01.0", 4, 16, 4, 16}}), 0.63, 0.83);
  ASSERT_TRUE(band.Known());
  EXPECT_NEAR(band.lower_bytes_per_s, 19.85e9, 0.01e9);
  EXPECT_NEAR(band.upper_bytes_per_s, 26.15e9, 0.01e9);
  EXPECT_NE(band.source.find("Gen4 x16"), std::string::npos) << band.source;
}

TEST(BandFromPath, TheNarrowestLinkBehindASwitchDecidesAndIsNamed) {
  // The GPU's own slot is Gen5 x16; the switch's uplink and the root port can do Gen4 x8.
  const probes::LinkPath path = Path({{"0000:02:00.0", 5, 16, 5, 16},
                                      {"0000:01:08.0", 5, 16, 5, 16},
                                      {"0000:01:00.0", 4, 8, 4, 8},
                                      {"0000:00:01.0", 4, 8, 5, 16}});
  const ExpectedBand band = BandFromPath(path, 0.63, 0.83);
  EXPECT_NEAR(band.lower_bytes_per_s, 0.63 * kGen4x8, 1e7);
  EXPECT_NEAR(band.upper_bytes_per_s, 0.83 * kGen4x8, 1e7);
  EXPECT_EQ(band.source, "link Gen4 x8 at 0000:01:00.0");
  EXPECT_NEAR(HostLinkRate(path), kGen4x8, 1e7);
}

// The band follows what the link can carry, never what it trained to: each path, the rate of
// the link the band is made from, and the source it names ("" = not looked at).
TEST(BandFromPath, FollowsWhatTheLinkCanCarryNotWhatItTrainedTo) {
  const struct {
    const char* what;
    probes::LinkPath path;
    double link_rate;
    const char* source;
  } cases[] = {
      // Trained down from the start: x4 where both ends can do x16. The band stays Gen4
      // x16's, so the link's copies read below it (and the diagnosis names link_downtrained).
      {"trained down to x4", Path({{"0000:01:00.0", 4, 4, 4, 16}, {"0000:00:01.0", 4, 4, 4, 16}}),
       kGen4x16, "link Gen4 x16 at 0000:01:00.0, trained Gen4 x4"},
      {"down a generation on the uplink behind a switch",
       Path({{"0000:02:00.0", 5, 16, 5, 16},
             {"0000:01:08.0", 5, 16, 5, 16},
             {"0000:01:00.0", 4, 16, 5, 16},
             {"0000:00:01.0", 4, 16, 5, 16}}),
       probes::PcieBytesPerSecond(5, 16), ""},
      {"slowed down at idle to save power (Gen1)",
       Path({{"0000:01:00.0", 1, 16, 4, 16}, {"0000:00:01.0", 1, 16, 4, 16}}), kGen4x16, ""},
      // Held to the slot, the lower of the link's two ends.
      {"a Gen5 GPU in a Gen4 slot",
       Path({{"0000:01:00.0", 4, 16, 5, 16}, {"0000:00:01.0", 4, 16, 4, 16}}), kGen4x16,
       "link Gen4 x16 at 0000:01:00.0"},
      {"an x16 root port linked to an x8 switch",
       Path({{"0000:02:00.0", 5, 16, 5, 16},
             {"0000:01:08.0", 5, 16, 5, 16},
             {"0000:01:00.0", 5, 8, 5, 8},
             {"0000:00:01.0", 5, 8, 5, 16}}),
       probes::PcieBytesPerSecond(5, 8), ""},
      // No other end on the path: its own maximum.
      {"a GPU on a virtual machine's root bus", Path({{"0000:00:06.0", 4, 4, 4, 16}}), kGen4x16,
       ""},
  };
  for (const auto& c : cases) {
    const ExpectedBand band = BandFromPath(c.path, 0.63, 0.83);
    EXPECT_NEAR(band.lower_bytes_per_s, 0.63 * c.link_rate, 1e7) << c.what;
    EXPECT_NEAR(band.upper_bytes_per_s, 0.83 * c.link_rate, 1e7) << c.what;
    EXPECT_NEAR(HostLinkRate(c.path), c.link_rate, 1e7) << c.what;
    if (*c.source != 0) EXPECT_EQ(band.source, c.source) << c.what;
  }
}

TEST(BandFromPath, FollowsTheTrainedLinkWhereAMaximumCannotBeRead) {
  // The root port's max_link_speed unreadable: the link's maximum is not known (the GPU's
  // alone would hold it to Gen5 in what may be a Gen4 slot), so the band follows the link
  // as trained, and says so.
  const probes::LinkPath path =
      Path({{"0000:01:00.0", 4, 16, 5, 16}, {"0000:00:01.0", 4, 16, 0, 16}});
  EXPECT_EQ(CapabilityRate(path.links[0]), 0.0);
  const ExpectedBand band = BandFromPath(path, 0.63, 0.83);
  EXPECT_NEAR(band.lower_bytes_per_s, 0.63 * kGen4x16, 1e7);
  EXPECT_EQ(band.source, "link Gen4 x16 as trained at 0000:01:00.0 (maximum unreadable)");
  // The GPU's own maximum unreadable: the same.
  const probes::LinkPath own = Path({{"0000:01:00.0", 4, 8, 0, 0}, {"0000:00:01.0", 4, 8, 4, 16}});
  EXPECT_NEAR(BandFromPath(own, 0.63, 0.83).upper_bytes_per_s, 0.83 * kGen4x8, 1e7);
}

TEST(BandFromPath, HonoursOtherFractions) {
  const ExpectedBand band = BandFromPath(Path({{"0000:01:00.0", 5, 16, 5, 16}}), 0.5, 0.9);
  EXPECT_NEAR(band.lower_bytes_per_s, 31.5e9, 0.01e9);
  EXPECT_NEAR(band.upper_bytes_per_s, 56.7e9, 0.02e9);
}

TEST(BandFromPath, UnknownWithoutALinkRateAndSaysWhy) {
  // A VM's GPU on the root bus without link attributes: the path's note says so.
  probes::LinkPath vm = Path({{"0000:00:06.0", 0, 0, 0, 0}});
  vm.note = "0000:00:06.0: no link attributes in sysfs (not a PCIe link?)";
  ExpectedBand band = BandFromPath(vm, 0.63, 0.83);
  EXPECT_FALSE(band.Known());
  EXPECT_EQ(band.source.rfind("unknown", 0), 0u) << band.source;
  EXPECT_NE(band.source.find("0000:00:06.0"), std::string::npos) << band.source;
  // No device found at all.
  EXPECT_FALSE(BandFromPath(probes::LinkPath{}, 0.63, 0.83).Known());
  EXPECT_EQ(HostLinkRate(probes::LinkPath{}), 0.0);
  // An integrated GPU has no link to the host.
  probes::LinkPath integrated;
  integrated.pcie = false;
  band = BandFromPath(integrated, 0.63, 0.83);
  EXPECT_FALSE(band.Known());
  EXPECT_NE(band.source.find("not a PCIe device"), std::string::npos) << band.source;
  EXPECT_EQ(HostLinkRate(integrated), 0.0);
}

TEST(BandFromPath, NvlinkC2cCopiesAreHeldToTheC2cRateNotThePcieLink) {
  probes::SimOptions o;
  o.time_scale = 0;
  o.devices = 2;
  o.c2c = true;
  probes::SimBackend sim(o);
  const probes::LinkPath path = sim.ReadLinkPath(0);
  ASSERT_TRUE(path.c2c);
  ASSERT_FALSE(path.links.empty()) << "the topology also shows a PCIe link";
  // The band comes from C2C, not from the Gen4 x16 PCIe link the topology also shows.
  const ExpectedBand band = BandFromPath(path, 0.63, 0.83);
  EXPECT_NEAR(band.lower_bytes_per_s, 0.63 * 450e9, 1e6);
  EXPECT_NEAR(band.upper_bytes_per_s, 0.83 * 450e9, 1e6);
  EXPECT_NE(band.source.find("NVLink-C2C"), std::string::npos);
  EXPECT_EQ(HostLinkRate(path), probes::kC2cBytesPerSecond);
  const probes::ProbeSample h2d = sim.Run(0, fakes::PinnedSpec());
  EXPECT_GT(h2d.MedianBandwidth(), band.lower_bytes_per_s);
  EXPECT_LT(h2d.MedianBandwidth(), band.upper_bytes_per_s);
}

TEST(ResolveBand, OverrideByIndexOrUuidInAnyCaseElseTheLink) {
  Settings s;
  const auto from_link = ResolveBand(s, SimGpu(), Gen4x16());
  EXPECT_NE(from_link.source, "config");
  EXPECT_NEAR(from_link.lower_bytes_per_s, 0.63 * 31.5e9, 0.2e9);
  s.bands = {{"SIM-E9FD6049-D65A-F21E-5775-264A9A7E1B09", 20e9, 26e9}};
  const auto upper_case = ResolveBand(s, SimGpu(), Gen4x16());
  EXPECT_EQ(upper_case.source, "config");
  EXPECT_EQ(upper_case.lower_bytes_per_s, 20e9);
  s.bands = {{"0", 21e9, 27e9}};
  EXPECT_EQ(ResolveBand(s, SimGpu(), Gen4x16()).lower_bytes_per_s, 21e9);
  s.bands = {{"1", 21e9, 27e9}};
  EXPECT_NE(ResolveBand(s, SimGpu(), Gen4x16()).source, "config");
}

TEST(JudgeBand, LinkBoundFromFourMiBPerDirection) {
  const ExpectedBand band{20e9, 26e9, "config"};
  const std::uint64_t big = 64ull << 20;
  struct Case {
    TransferMode mode;
    Direction direction;
    std::uint64_t size;
    double bytes_per_s;
    BandVerdict verdict;
  };
  const Case cases[] = {
      {TransferMode::kPinned, Direction::kH2D, big, 25e9, BandVerdict::kOk},
      {TransferMode::kPinned, Direction::kH2D, big, 19e9, BandVerdict::kBelowBand},
      // Both ways at once: 38 GB/s is 19 per direction.
      {TransferMode::kPinned, Direction::kBidirectional, big, 38e9, BandVerdict::kBelowBand},
      {TransferMode::kPinned, Direction::kBidirectional, big, 45e9, BandVerdict::kOk},
      // Not held to the band: staging, faults, host population, latency-bound sizes.
      {TransferMode::kPageable, Direction::kH2D, big, 1e9, BandVerdict::kNotLinkBound},
      {TransferMode::kManaged, Direction::kD2H, big, 1e9, BandVerdict::kNotLinkBound},
      {TransferMode::kManagedPrefetch, Direction::kD2H, big, 1e9, BandVerdict::kNotLinkBound},
      {TransferMode::kManagedPrefetch, Direction::kH2D, big, 1e9, BandVerdict::kBelowBand},
      {TransferMode::kPinned, Direction::kH2D, kBandMinSizeBytes - 1, 1e9,
       BandVerdict::kLatencyBound},
      {TransferMode::kPinned, Direction::kH2D, kBandMinSizeBytes, 1e9, BandVerdict::kBelowBand},
      // managed_prefetch h2d is held from 64 MiB: its band share was measured there (a
      // healthy H200 reads 28-36 GB/s at 16 MiB, under it).
      {TransferMode::kManagedPrefetch, Direction::kH2D, 16ull << 20, 10e9,
       BandVerdict::kLatencyBound},
      {TransferMode::kManagedPrefetch, Direction::kH2D, 64ull << 20, 10e9, BandVerdict::kBelowBand},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(JudgeBand(c.mode, c.direction, c.size, c.bytes_per_s, band), c.verdict)
        << probes::ToString(c.mode) << " " << probes::ToString(c.direction) << " " << c.size;
    EXPECT_EQ(HeldToBand(c.mode, c.direction, c.size),
              c.verdict == BandVerdict::kOk || c.verdict == BandVerdict::kBelowBand);
  }
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, big, 1e9, ExpectedBand{}),
            BandVerdict::kNoBand);
  EXPECT_EQ(ToString(BandVerdict::kBelowBand), "below band");
  EXPECT_EQ(ToString(BandVerdict::kNotLinkBound), "n/a (not link-bound)");
}

TEST(BandSeries, ExemptUnderItsSizeAndOwnBandWhereTheShareDiffers) {
  const std::uint64_t big = 64ull << 20;
  // Exempt: link-bound but under the size its mode is held at; never a mode not link-bound.
  EXPECT_TRUE(BandExempt(TransferMode::kPinned, Direction::kH2D, 1 << 20));
  EXPECT_FALSE(BandExempt(TransferMode::kPinned, Direction::kH2D, big));
  EXPECT_TRUE(BandExempt(TransferMode::kManagedPrefetch, Direction::kH2D, 16ull << 20));
  EXPECT_FALSE(BandExempt(TransferMode::kPageable, Direction::kH2D, 1 << 20));
  // Of the 13 pairs only managed_prefetch h2d is held to a share other than the band.
  int own = 0;
  for (const auto& [mode, direction] : probes::AllModeDirections())
    own += HasOwnBand(mode, direction);
  EXPECT_EQ(own, 1);
  EXPECT_TRUE(HasOwnBand(TransferMode::kManagedPrefetch, Direction::kH2D));
  const ExpectedBand prefetch =
      ModeBand({20e9, 26e9, "config"}, TransferMode::kManagedPrefetch, Direction::kH2D);
  EXPECT_DOUBLE_EQ(prefetch.lower_bytes_per_s, 0.8 * 20e9);
  EXPECT_NE(prefetch.source.find("x 0.8 for managed_prefetch h2d"), std::string::npos)
      << prefetch.source;
}

// A band over a link of `link_bytes_per_s` (the default fractions), pinned_async in 1 MiB
// chunks unless told.
ExpectedBand BandOver(double link_bytes_per_s, bool c2c = false,
                      std::uint64_t chunk_bytes = 1ull << 20) {
  ExpectedBand band{0.63 * link_bytes_per_s, 0.83 * link_bytes_per_s, "test"};
  band.link_bytes_per_s = link_bytes_per_s;
  band.c2c = c2c;
  band.chunk_bytes = chunk_bytes;
  return band;
}

TEST(BandHold, PinnedAsyncFollowsItsPerCopyCostOnEachLink) {
  const std::uint64_t big = 64ull << 20;
  const auto share = [](const ExpectedBand& b) {
    return ExpectedLinkShare(TransferMode::kPinnedAsync, Direction::kH2D, b);
  };
  // The H200's Gen5 x16 read 0.75-0.78 of the link: the model sits at its low end and the
  // band holds it, as before.
  const ExpectedBand gen5 = BandOver(probes::PcieBytesPerSecond(5, 16));
  EXPECT_NEAR(share(gen5), 0.755, 0.005);
  EXPECT_EQ(HoldOf(TransferMode::kPinnedAsync, Direction::kH2D, big, gen5), BandHold::kHeld);
  EXPECT_GT(share(BandOver(kGen4x16)), share(gen5));
  EXPECT_GT(share(BandOver(probes::PcieBytesPerSecond(3, 16))), share(BandOver(kGen4x16)));
  // NVLink-C2C: 1 MiB lasts ~2.3 us at 450 GB/s, as long as a copy's own cost.
  const ExpectedBand c2c = BandOver(probes::kC2cBytesPerSecond, true);
  EXPECT_LT(share(c2c), 0.5);
  EXPECT_EQ(HoldOf(TransferMode::kPinnedAsync, Direction::kD2H, big, c2c), BandHold::kPerCopyBound);
  EXPECT_EQ(JudgeBand(TransferMode::kPinnedAsync, Direction::kH2D, big, 220e9, c2c),
            BandVerdict::kPerCopyBound);
  EXPECT_NE(ToString(BandVerdict::kPerCopyBound).find("baseline only"), std::string::npos);
  // Smaller chunks on PCIe: the same cost, a larger share of each copy.
  const ExpectedBand small_chunks = BandOver(probes::PcieBytesPerSecond(5, 16), false, 256 << 10);
  EXPECT_EQ(HoldOf(TransferMode::kPinnedAsync, Direction::kH2D, big, small_chunks),
            BandHold::kPerCopyBound);
  EXPECT_TRUE(BandExempt(TransferMode::kPinnedAsync, Direction::kH2D, big, small_chunks));
  EXPECT_EQ(HoldOf(TransferMode::kPinnedAsync, Direction::kH2D, big,
                   BandOver(probes::PcieBytesPerSecond(3, 16), false, 256 << 10)),
            BandHold::kHeld);
  // No link known (a plan, the budget): the size rule only.
  EXPECT_TRUE(HeldToBand(TransferMode::kPinnedAsync, Direction::kH2D, big));
}

TEST(BandHold, OverNvlinkC2cOnlyTheModeWithAFigureKeepsTheBand) {
  const std::uint64_t big = 64ull << 20;
  const ExpectedBand c2c = BandOver(probes::kC2cBytesPerSecond, true);
  EXPECT_EQ(HoldOf(TransferMode::kPinned, Direction::kH2D, big, c2c), BandHold::kHeld);
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, big, 200e9, c2c),
            BandVerdict::kBelowBand);
  for (const auto& [mode, direction] :
       {std::pair{TransferMode::kPinned, Direction::kD2H},
        std::pair{TransferMode::kPinned, Direction::kBidirectional},
        std::pair{TransferMode::kZeroCopy, Direction::kH2D},
        std::pair{TransferMode::kZeroCopy, Direction::kD2H},
        std::pair{TransferMode::kManagedPrefetch, Direction::kH2D}}) {
    EXPECT_EQ(HoldOf(mode, direction, big, c2c), BandHold::kNoLinkFigure)
        << probes::ToString(mode) << " " << probes::ToString(direction);
    EXPECT_EQ(JudgeBand(mode, direction, big, 1e9, c2c), BandVerdict::kNoLinkFigure);
    EXPECT_TRUE(BandExempt(mode, direction, big, c2c));
    // The same pairs over PCIe keep the band.
    EXPECT_EQ(HoldOf(mode, direction, big, BandOver(kGen4x16)), BandHold::kHeld);
  }
  EXPECT_EQ(HoldOf(TransferMode::kPageable, Direction::kH2D, big, c2c), BandHold::kNotLinkBound);
}

TEST(GroupBand, TheFractionsOfWhatTheMembersCarryTogether) {
  HostGroup group;
  group.name = "host";
  group.gpus = {0, 1};
  EXPECT_FALSE(GroupBand(group, Settings{}).Known());
  EXPECT_NE(GroupBand(group, Settings{}).source.find("unknown"), std::string::npos);
  group.capacity_bytes_per_s = 100e9;
  Settings s;
  s.band_lower_fraction = 0.5;
  s.band_upper_fraction = 0.9;
  const ExpectedBand band = GroupBand(group, s);
  EXPECT_DOUBLE_EQ(band.lower_bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(band.upper_bytes_per_s, 90e9);
  EXPECT_EQ(band.source, "100.0 GB/s over the members' paths");
  EXPECT_TRUE(AggregateHeldToBand(Direction::kH2D));
  EXPECT_TRUE(AggregateHeldToBand(Direction::kD2H));
  EXPECT_FALSE(AggregateHeldToBand(Direction::kBidirectional));
}

// managed_prefetch h2d is held to its band from 64 MiB on Gen5 x16, where it was measured,
// and from the size that takes as long on a slower link: the size the plan gives it there
// (PlannedSize) is held, so no link loses its band to the smaller sizes.
TEST(BandMinSize, FollowsTheLinkAsThePlansSizesDo) {
  const std::uint64_t mib = 1 << 20;
  const auto min = [](int gen, int width) {
    return BandMinSize(probes::TransferMode::kManagedPrefetch, probes::Direction::kH2D,
                       probes::PcieBytesPerSecond(gen, width));
  };
  EXPECT_EQ(min(5, 16), 64 * mib);
  EXPECT_EQ(min(4, 16), 32 * mib);
  EXPECT_EQ(min(3, 4), 4 * mib);
  EXPECT_EQ(min(1, 1), 4 * mib);
  EXPECT_EQ(BandMinSize(probes::TransferMode::kManagedPrefetch, probes::Direction::kH2D, 0),
            64 * mib);
  EXPECT_EQ(BandMinSize(probes::TransferMode::kPinned, probes::Direction::kH2D,
                        probes::PcieBytesPerSecond(3, 4)),
            kBandMinSizeBytes);
  const Settings defaults;
  for (const auto& [gen, width] : {std::pair{3, 4}, {3, 16}, {4, 8}, {4, 16}, {5, 16}}) {
    probes::LinkPath path;
    path.links.push_back({"0000:01:00.0", gen, width, gen, width});
    const ExpectedBand band = BandFromPath(path, 0.63, 0.83);
    const std::uint64_t size = PlannedSize(defaults, 64 * mib, HostLinkRate(path));
    EXPECT_EQ(HoldOf(probes::TransferMode::kManagedPrefetch, probes::Direction::kH2D, size, band),
              BandHold::kHeld)
        << "Gen" << gen << " x" << width << " at " << probes::FormatSize(size);
  }
}

// ---- Confidential computing and MIG ------------------------------------------------------

TEST(ConfidentialComputing, TheLinkBandDoesNotApplyWithoutAPublishedFigure) {
  probes::DeviceInfo gpu = SimGpu();
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.cc.state = probes::CcState::kOn;
  const ExpectedBand band = ResolveBand(Settings{}, gpu, Gen4x16());
  EXPECT_FALSE(band.Known());
  EXPECT_TRUE(band.confidential);
  EXPECT_EQ(band.source.rfind("confidential computing on: bounce-buffered copies", 0), 0u)
      << band.source;
  // Far under the PCIe band, and never below it: held to the baseline only.
  for (const auto& [mode, direction] : probes::AllModeDirections()) {
    const BandVerdict v = JudgeBand(mode, direction, 64ull << 20, 1e9, band);
    EXPECT_NE(v, BandVerdict::kBelowBand) << probes::ToString(mode);
  }
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, 64ull << 20, 1e9, band),
            BandVerdict::kConfidential);
}

TEST(ConfidentialComputing, APublishedFigureHoldsPinnedCopiesOnly) {
  probes::DeviceInfo gpu = SimGpu();
  gpu.name = "NVIDIA RTX PRO 6000 Blackwell Server Edition";
  gpu.cc.state = probes::CcState::kOn;
  Settings settings;
  settings.drift_fraction = 0.8;
  const ExpectedBand band = ResolveBand(settings, gpu, Gen4x16());
  ASSERT_TRUE(band.Known());
  EXPECT_DOUBLE_EQ(band.lower_bytes_per_s, 0.8 * 15.7e9);
  EXPECT_NE(band.source.find("PR #6029"), std::string::npos) << band.source;
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, 64ull << 20, 15.0e9, band),
            BandVerdict::kOk);
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kD2H, 64ull << 20, 8.0e9, band),
            BandVerdict::kBelowBand);
  EXPECT_EQ(JudgeBand(TransferMode::kPinnedAsync, Direction::kH2D, 64ull << 20, 8.0e9, band),
            BandVerdict::kConfidential);
  EXPECT_EQ(HoldOf(TransferMode::kPinned, Direction::kBidirectional, 64ull << 20, band),
            BandHold::kConfidential);
}

TEST(ConfidentialComputing, AConfiguredBandStillHolds) {
  probes::DeviceInfo gpu = SimGpu();
  gpu.cc.state = probes::CcState::kOn;
  Settings settings;
  settings.bands.push_back({"0", 10e9, 12e9});
  const ExpectedBand band = ResolveBand(settings, gpu, Gen4x16());
  EXPECT_EQ(band.source, "config");
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, 64ull << 20, 9e9, band),
            BandVerdict::kBelowBand);
}

probes::MigState MigOf(std::vector<int> copy_engines, int whole) {
  probes::MigState mig;
  mig.mode = probes::MigMode::kEnabled;
  mig.whole_gpu_copy_engines = whole;
  int id = 1;
  for (int ce : copy_engines) {
    probes::MigInstance i;
    i.gpu_instance_id = id++;
    i.copy_engines = ce;
    mig.instances.push_back(i);
  }
  return mig;
}

TEST(Mig, InstancesWithFewerCopyEnginesThanTheGpuKeepTheirBaselines) {
  probes::DeviceInfo gpu = SimGpu();
  gpu.mig = MigOf({3, 3}, 7);
  ExpectedBand band = ResolveBand(Settings{}, gpu, Gen4x16());
  EXPECT_TRUE(band.few_copy_engines);
  EXPECT_FALSE(band.Known()) << "no band: each mode its baseline";
  EXPECT_NE(band.source.find("3 of the GPU's 7 copy engines"), std::string::npos) << band.source;
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, 64ull << 20, 1e9, band),
            BandVerdict::kFewCopyEngines);
  gpu.mig = MigOf({7}, 7);
  band = ResolveBand(Settings{}, gpu, Gen4x16());
  EXPECT_FALSE(band.few_copy_engines);
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, 64ull << 20, 1e9, band),
            BandVerdict::kBelowBand);
  gpu.mig = MigOf({0}, 7);  // copy engines not readable: baseline only
  EXPECT_TRUE(ResolveBand(Settings{}, gpu, Gen4x16()).few_copy_engines);
}

TEST(Mig, TheLinkGoesThroughTheInstancesWithTheMostCopyEngines) {
  probes::MigState mig = MigOf({1, 3, 3}, 7);
  EXPECT_EQ(probes::LinkInstances(mig), (std::vector<std::size_t>{1, 2}));
  mig.instances[1].reachable = false;  // created after the process started
  EXPECT_EQ(probes::LinkInstances(mig), (std::vector<std::size_t>{2}));
  EXPECT_EQ(probes::UnjudgeableReason({}, MigOf({}, 7)),
            "MIG enabled, no GPU instance to probe through");
  probes::MigState later = MigOf({3}, 7);
  later.instances[0].reachable = false;
  EXPECT_NE(probes::UnjudgeableReason({}, later).find("restart xferd"), std::string::npos);
}

}  // namespace
}  // namespace xferd::core
