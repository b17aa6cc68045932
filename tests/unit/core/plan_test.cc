// The one plan of `xferd probe`, `xferd run` and `xferd check-config`: which GPUs, which
// probes in which order, and their deadlines.
#include "core/plan.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace xferd::core
