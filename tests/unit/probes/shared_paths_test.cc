// Shared links: max-min fair shares and the aggregate bound, on hand-built paths and on the
// simulated device's concurrent runs.
#include "xferd/probes/shared_paths.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "testing/fakes.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

const double kPathGen5x16 = PcieBytesPerSecond(5, 16);
const double kPathGen4x16 = PcieBytesPerSecond(4, 16);
const double kPathGen4x8 = PcieBytesPerSecond(4, 8);
const double kPathGen3x4 = PcieBytesPerSecond(3, 4);

PcieLink Link(const char* bdf, int gen, int width) {
  return {bdf, gen, width, gen, width};
}

LinkPath Path(std::vector<PcieLink> links) {
  LinkPath path;
  path.links = std::move(links);
  return path;
}

TEST(FairShares, OnePathGetsItsNarrowestLink) {
  const auto shares = FairShares({Path({Link("0000:02:00.0", 5, 16), Link("0000:01:00.0", 4, 8)})});
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_NEAR(shares[0], kPathGen4x8, 1);
}

TEST(FairShares, TwoGpusBehindOneSwitchSplitItsUplink) {
  const std::vector<LinkPath> paths = {
      Path({Link("0000:18:00.0", 5, 16), Link("0000:16:00.0", 5, 16)}),
      Path({Link("0000:19:00.0", 5, 16), Link("0000:16:00.0", 5, 16)})};
  const auto shares = FairShares(paths);
  EXPECT_NEAR(shares[0], kPathGen5x16 / 2, 1);
  EXPECT_NEAR(shares[1], kPathGen5x16 / 2, 1);
  EXPECT_NEAR(AggregateCapacity(paths), kPathGen5x16, 1);
}

TEST(FairShares, AGpuHeldBackByItsOwnLinkLeavesTheRestToItsNeighbour) {
  const std::vector<LinkPath> paths = {
      Path({Link("0000:18:00.0", 3, 4), Link("0000:16:00.0", 5, 16)}),
      Path({Link("0000:19:00.0", 5, 16), Link("0000:16:00.0", 5, 16)}),
      Path({Link("0000:3a:00.0", 4, 16), Link("0000:38:00.0", 4, 16)})};
  const auto shares = FairShares(paths);
  EXPECT_NEAR(shares[0], kPathGen3x4, 1);
  EXPECT_NEAR(shares[1], kPathGen5x16 - kPathGen3x4, 1);
  EXPECT_NEAR(shares[2], kPathGen4x16, 1);  // independent path
  // Sum over independent paths, each capped by its narrowest, capped by the shared link.
  EXPECT_NEAR(AggregateCapacity(paths), kPathGen5x16 + kPathGen4x16, 1);
}

TEST(FairShares, NestedSwitchesCapEachLevel) {
  // 0 and 1 behind a Gen4 x8 switch, which with 2 sits behind a Gen4 x16 uplink.
  const std::vector<LinkPath> paths = {
      Path({Link("0000:05:00.0", 4, 16), Link("0000:03:00.0", 4, 8), Link("0000:01:00.0", 4, 16)}),
      Path({Link("0000:06:00.0", 4, 16), Link("0000:03:00.0", 4, 8), Link("0000:01:00.0", 4, 16)}),
      Path({Link("0000:07:00.0", 4, 16), Link("0000:01:00.0", 4, 16)})};
  const auto shares = FairShares(paths);
  EXPECT_NEAR(shares[0], kPathGen4x8 / 2, 1);
  EXPECT_NEAR(shares[1], kPathGen4x8 / 2, 1);
  EXPECT_NEAR(shares[2], kPathGen4x16 - kPathGen4x8, 1);
  EXPECT_NEAR(AggregateCapacity(paths), kPathGen4x16, 1);
}

TEST(FairShares, UnknownAndC2cPaths) {
  LinkPath unknown;  // a device whose links sysfs does not show
  unknown.links.push_back({"0000:00:06.0", 0, 0, 0, 0});
  LinkPath c2c = Path({Link("0009:01:00.0", 4, 16)});  // the misleading PCIe view
  c2c.c2c = true;
  LinkPath other_c2c = c2c;
  const auto shares = FairShares({unknown, c2c, other_c2c});
  EXPECT_EQ(shares[0], 0.0);
  EXPECT_NEAR(shares[1], kC2cBytesPerSecond, 1);  // each superchip has its own C2C link
  EXPECT_NEAR(shares[2], kC2cBytesPerSecond, 1);
  EXPECT_EQ(AggregateCapacity({unknown, c2c}), 0.0);
  EXPECT_NEAR(AggregateCapacity({c2c, other_c2c}), 2 * kC2cBytesPerSecond, 1);
}

SimOptions Hgx() {
  SimOptions o;
  o.time_scale = 0;
  o.sysfs_root = std::filesystem::path(XFERD_TEST_DATA_DIR) / "sysfs/hgx-8gpu";
  return o;
}


TEST(SimConcurrent, GpusBehindOneSwitchEachGetHalfOfWhatTheyGetAlone) {
  SimBackend sim(Hgx());
  for (Direction direction : {Direction::kH2D, Direction::kD2H, Direction::kBidirectional}) {
    const double alone = sim.Run(0, fakes::PinnedSpec(direction)).MedianBandwidth();
    const auto together = sim.RunConcurrent({0, 1}, fakes::PinnedSpec(direction));
    ASSERT_EQ(together.size(), 2u);
    for (const ProbeSample& s : together) {
      ASSERT_EQ(s.status, ProbeStatus::kOk) << s.message;
      EXPECT_NEAR(s.MedianBandwidth() / alone, 0.5, 0.02) << ToString(direction);
    }
    // Different switches share nothing.
    for (const ProbeSample& s : sim.RunConcurrent({0, 2, 4, 6}, fakes::PinnedSpec(direction))) {
      EXPECT_NEAR(s.MedianBandwidth() / alone, 1.0, 0.02) << ToString(direction);
    }
  }
}

TEST(SimConcurrent, AGroupOfOneIsTheSoloProbe) {
  SimBackend a(Hgx()), b(Hgx());
  const ProbeSample solo = a.Run(3, fakes::PinnedSpec(Direction::kH2D));
  const auto group = b.RunConcurrent({3}, fakes::PinnedSpec(Direction::kH2D));
  ASSERT_EQ(group.size(), 1u);
  EXPECT_EQ(group[0].durations_s, solo.durations_s);
}

TEST(SimConcurrent, FailuresStayWithTheirDevice) {
  SimOptions o = Hgx();
  SimFault lost;
  lost.kind = SimFault::Kind::kLost;
  lost.device = 1;
  o.faults.push_back(lost);
  SimBackend sim(o);
  const auto samples = sim.RunConcurrent({0, 1, 9}, fakes::PinnedSpec(Direction::kH2D));
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].status, ProbeStatus::kOk);
  EXPECT_EQ(samples[1].status, ProbeStatus::kError);
  EXPECT_NE(samples[1].message.find("lost"), std::string::npos);
  EXPECT_EQ(samples[2].status, ProbeStatus::kError);
  EXPECT_NE(samples[2].message.find("no simulated device 9"), std::string::npos);
}

}  // namespace
}  // namespace xferd::probes
