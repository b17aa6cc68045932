// The one plan of `xferd probe`, `xferd run` and `xferd check-config`: which GPUs, which
// probes in which order, and their deadlines.
#include "core/plan.h"

#include <gtest/gtest.h>

#include "xferd/probes/topology.h"

namespace xferd::core {
namespace {

using namespace std::chrono_literals;
using probes::Direction;
using probes::TransferMode;

std::vector<probes::DeviceInfo> TwoGpus() {
  std::vector<probes::DeviceInfo> d(2);
  d[0].index = 0;
  d[0].uuid = "SIM-e9fd6049-d65a-f21e-5775-264a9a7e1b09";
  d[1].index = 1;
  d[1].uuid = "GPU-5c3b6a2e-0000-1111-2222-333344445555";
  return d;
}

Settings PinnedAndPageable() {
  Settings c;
  c.modes = {TransferMode::kPinned, TransferMode::kPageable};
  c.bidirectional = true;
  c.sizes = {1 << 20};
  c.probe_deadline = 5s;
  return c;
}

TEST(PlanProbes, EveryModeBothWaysPlusBidirectionalPerSize) {
  Settings c = PinnedAndPageable();
  c.sizes = {1 << 20, 4 << 20};
  auto plan = PlanProbes(c);
  ASSERT_EQ(plan.size(), 10u);  // 2 sizes x (2 modes x 2 directions + bidir)
  EXPECT_EQ(plan[4].direction, Direction::kBidirectional);
  EXPECT_EQ(plan[4].mode, TransferMode::kPinned);
  EXPECT_EQ(plan[5].size_bytes, 4u << 20);
  EXPECT_EQ(plan[0].deadline, 5s);
}

// Both ways at once is a pinned probe: without pinned among the modes there is none (the
// pinned memory cap is checked on the same rule).
TEST(PlanProbes, BidirectionalOnlyWithPinned) {
  Settings c = PinnedAndPageable();
  c.modes = {TransferMode::kPageable, TransferMode::kZeroCopy};
  for (const auto& spec : PlanProbes(c)) EXPECT_NE(spec.direction, Direction::kBidirectional);
  EXPECT_EQ(PlanProbes(c).size(), 4u);
}

TEST(PlanProbes, OneShotDeadlinesStretchToTheSizeAsked) {
  Settings c = PinnedAndPageable();
  c.sizes = {1ull << 30};
  c.iterations = 20;
  c.warmup = 2;
  const auto daemon = PlanProbes(c);
  const auto one_shot = PlanProbes(c, Deadlines::kStretchedToSize);
  EXPECT_EQ(daemon[0].deadline, 5s);
  // 22 x 1 GiB at 0.5 GB/s: 47.2 s; both ways at once moves twice that.
  EXPECT_EQ(one_shot[0].deadline.count(), 47245);
  EXPECT_EQ(one_shot[4].deadline.count(), 94490);
  // Small probes keep the configured deadline.
  c.sizes = {1 << 20};
  EXPECT_EQ(PlanProbes(c, Deadlines::kStretchedToSize)[0].deadline, 5s);
}

TEST(SelectDevices, ByIndexOrUuidAndUnknownIsAnError) {
  const auto devices = TwoGpus();
  EXPECT_EQ(SelectDevices(devices, {}).size(), 2u);
  auto one = SelectDevices(devices, {"GPU-5c3b6a2e-0000-1111-2222-333344445555"});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].index, 1);
  try {
    SelectDevices(devices, {"7"});
    FAIL() << "an unknown GPU must be rejected";
  } catch (const UnknownGpuError& e) {
    EXPECT_EQ(e.gpu(), "7");
    EXPECT_NE(std::string(e.what()).find("no GPU \"7\""), std::string::npos);
    EXPECT_NE(e.known().find("1 (GPU-5c3b6a2e"), std::string::npos) << e.known();
  }
}

// nvidia-smi prints lower case; a UUID pasted in upper case names the same GPU, for
// selection and for bands alike.
TEST(SelectDevices, UuidsMatchInAnyCaseInTheOrderGivenOnce) {
  const auto devices = TwoGpus();
  const auto picked = SelectDevices(devices, {"GPU-5C3B6A2E-0000-1111-2222-333344445555",
                                              "SIM-E9FD6049-D65A-F21E-5775-264A9A7E1B09", "1"});
  ASSERT_EQ(picked.size(), 2u);
  EXPECT_EQ(picked[0].index, 1);
  EXPECT_EQ(picked[1].index, 0);
  EXPECT_TRUE(NamesDevice("sim-E9FD6049-d65a-F21E-5775-264a9a7e1b09", devices[0]));
  EXPECT_FALSE(NamesDevice("SIM-E9FD6049", devices[0]));
  EXPECT_FALSE(NamesDevice("00", devices[0]));
}

TEST(IsHeadline, PinnedPairElseTheFirstMode) {
  Settings c = PinnedAndPageable();
  const auto plan = PlanProbes(c);
  EXPECT_TRUE(IsHeadline(plan[0], c));   // pinned h2d
  EXPECT_TRUE(IsHeadline(plan[1], c));   // pinned d2h
  EXPECT_FALSE(IsHeadline(plan[2], c));  // pageable
  EXPECT_FALSE(IsHeadline(plan[4], c));  // bidir
  c.modes = {TransferMode::kZeroCopy, TransferMode::kPageable};
  EXPECT_TRUE(IsHeadline(PlanProbes(c)[0], c));
  EXPECT_FALSE(IsHeadline(PlanProbes(c)[2], c));
}

// A size over 4 MiB follows the GPU's link: scaled against Gen4 x16 on slower links (so one
// transfer takes as long there), never under 4 MiB, never over what is configured.
TEST(PlannedSize, FollowsTheLinkBelowGen4x16) {
  const Settings c;
  const std::uint64_t mib = 1 << 20;
  const auto pcie = [](int gen, int width) { return probes::PcieBytesPerSecond(gen, width); };
  EXPECT_EQ(PlannedSize(c, 64 * mib, pcie(3, 4)), 8 * mib);
  EXPECT_EQ(PlannedSize(c, 64 * mib, pcie(3, 16)), 32 * mib);
  EXPECT_EQ(PlannedSize(c, 64 * mib, pcie(4, 8)), 32 * mib);
  EXPECT_EQ(PlannedSize(c, 64 * mib, pcie(4, 16)), 64 * mib);
  EXPECT_EQ(PlannedSize(c, 64 * mib, pcie(5, 16)), 64 * mib);
  EXPECT_EQ(PlannedSize(c, 64 * mib, probes::kC2cBytesPerSecond), 64 * mib);
  EXPECT_EQ(PlannedSize(c, 64 * mib, 0), 64 * mib) << "a link not known (integrated)";
  EXPECT_EQ(PlannedSize(c, 64 * mib, pcie(1, 1)), 4 * mib) << "never under 4 MiB";
  EXPECT_EQ(PlannedSize(c, 4 * mib, pcie(3, 4)), 4 * mib);
  EXPECT_EQ(PlannedSize(c, 4096, pcie(3, 4)), 4096u) << "a latency size stays";
  Settings exact;
  exact.sizes_follow_link = false;
  EXPECT_EQ(PlannedSize(exact, 64 * mib, pcie(3, 4)), 64 * mib);
  // Two sizes that come to one are planned once.
  Settings two = PinnedAndPageable();
  two.sizes = {8 * mib, 16 * mib};
  EXPECT_EQ(PlanProbes(two, Deadlines::kAsConfigured, pcie(3, 4)).size(), 5u);
  EXPECT_EQ(PlanProbes(two, Deadlines::kAsConfigured, pcie(4, 16)).size(), 10u);
}

TEST(PlanProbes, EachProbeRunsToItsDeviceTimeTarget) {
  Settings c = PinnedAndPageable();
  c.probe_time = 25ms;
  c.min_iterations = 5;
  for (const probes::ProbeSpec& spec : PlanProbes(c)) {
    EXPECT_DOUBLE_EQ(spec.target_device_s, 0.025);
    EXPECT_EQ(spec.min_iterations, 5);
    EXPECT_EQ(spec.iterations, c.iterations);
  }
  c.probe_time = 0ms;
  EXPECT_EQ(PlanProbes(c)[0].target_device_s, 0);
}

// The one rule both backends stop their transfers by.
TEST(IsLastTransfer, TheTargetWithAFloorAndACeiling) {
  probes::ProbeSpec spec;
  spec.warmup = 2;
  spec.iterations = 20;
  spec.target_device_s = 0.025;
  spec.min_iterations = 5;
  // 1 ms transfers: 25 of them reach the target, but never more than 22 in all.
  EXPECT_EQ(probes::ExpectedTransfers(spec, 0.001), 22);
  // 5 ms: 5 transfers reach it, but the floor is 5 timed after 2 warm-ups.
  EXPECT_EQ(probes::ExpectedTransfers(spec, 0.005), 7);
  // 2 ms: 13 transfers reach 26 ms.
  EXPECT_EQ(probes::ExpectedTransfers(spec, 0.002), 13);
  spec.target_device_s = 0;
  EXPECT_EQ(probes::ExpectedTransfers(spec, 0.005), 22) << "no target: the count";
  EXPECT_FALSE(probes::IsLastTransfer(spec, 20, 0, 0));
  EXPECT_TRUE(probes::IsLastTransfer(spec, 21, 0, 0));
}

}  // namespace
}  // namespace xferd::core
