// The band and the rule that holds a result to it, shared by `xferd probe` and `xferd run`.
#include "core/band.h"

#include <gtest/gtest.h>

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
  const probes::ExpectedBand band{20e9, 26e9, "config"};
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
      {TransferMode::kManagedPrefetch, Direction::kH2D, 64ull << 20, 10e9,
       BandVerdict::kBelowBand},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(JudgeBand(c.mode, c.direction, c.size, c.bytes_per_s, band), c.verdict)
        << probes::ToString(c.mode) << " " << probes::ToString(c.direction) << " " << c.size;
    EXPECT_EQ(HeldToBand(c.mode, c.direction, c.size),
              c.verdict == BandVerdict::kOk || c.verdict == BandVerdict::kBelowBand);
  }
  EXPECT_EQ(JudgeBand(TransferMode::kPinned, Direction::kH2D, big, 1e9, probes::ExpectedBand{}),
            BandVerdict::kNoBand);
  EXPECT_EQ(ToString(BandVerdict::kBelowBand), "below band");
  EXPECT_EQ(ToString(BandVerdict::kNotLinkBound), "n/a (not link-bound)");
}

}  // namespace
}  // namespace xferd::core
