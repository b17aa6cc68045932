// The contention judgement with the H200 figures: 55 GB/s of copies read as ~59 GB/s on the
// link counters; a co-located 55 GB/s copy workload halves a probe.
#include "core/contention.h"

#include <gtest/gtest.h>

#include "xferd/probes/topology.h"

namespace xferd::core {
namespace {

using probes::ContentionState;
using probes::Direction;
using probes::TransferMode;

constexpr std::uint64_t kSize = 64ull << 20;

// A finished probe of `mode`/`direction` that moved `own_gbps` GB/s for `window_s` (26 ms:
// pinned 64 MiB x 22 on an H200), with the link counters reading `rx_gbps`/`tx_gbps` over
// the window.
probes::ProbeSample Probe(Direction direction, double own_gbps, double rx_gbps, double tx_gbps,
                          TransferMode mode = TransferMode::kPinned, double window_s = 0.026) {
  probes::ProbeSample s;
  s.spec.mode = mode;
  s.spec.direction = direction;
  s.spec.size_bytes = kSize;
  s.status = probes::ProbeStatus::kOk;
  s.bytes_per_transfer = kSize;
  s.durations_s = {0.001};
  const auto own = static_cast<std::uint64_t>(own_gbps * 1e9 * window_s);
  const bool both = direction == Direction::kBidirectional || mode == TransferMode::kManaged ||
                    mode == TransferMode::kManagedPrefetch;
  s.link_h2d_bytes = both || direction == Direction::kH2D ? own : 0;
  s.link_d2h_bytes = both || direction == Direction::kD2H ? own : 0;
  probes::LinkTraffic t;
  t.source = "test";
  t.window_s = window_s;
  t.rx_bytes = rx_gbps * 1e9 * window_s;
  t.tx_bytes = tx_gbps * 1e9 * window_s;
  t.samples = 2;
  t.after_s = 0.02;
  s.traffic = t;
  return s;
}

// The busy check's default threshold: 2 GB/s.
const ContentionThresholds kDefault{2e9};

TEST(Contention, AProbeAloneIsClearDespiteTheCountersOverhead) {
  // 55 GB/s of pinned h2d copies, the counters reading 59 rx (7 % overhead) and the read
  // requests' few GB/s the other way.
  const auto c = JudgeContention(Probe(Direction::kH2D, 55, 59, 4), kDefault);
  EXPECT_EQ(c.state, ContentionState::kClear) << c.reason;
  EXPECT_EQ(c.foreign_h2d_bytes_per_s, 0);
  EXPECT_EQ(c.foreign_d2h_bytes_per_s, 0);
}

TEST(Contention, AHalvedProbeBesideAWorkloadIsContendedWithTheWorkloadsRate) {
  // The probe got 28 GB/s; the link carried 59: the rest was another process.
  const auto c = JudgeContention(Probe(Direction::kH2D, 28, 59, 4), kDefault);
  EXPECT_EQ(c.state, ContentionState::kContended);
  EXPECT_NEAR(c.foreign_h2d_bytes_per_s, 59e9 - 1.10 * 28e9, 1e8);  // ~28 GB/s
  EXPECT_NE(c.reason.find("during the probe"), std::string::npos) << c.reason;
}

TEST(Contention, TrafficRightAfterTheProbeIsContention) {
  // A clean window, then 27 GB/s in the 20 ms right after: a workload starting up.
  auto s = Probe(Direction::kH2D, 55, 59, 4);
  s.traffic->after_rx_bytes = 27e9 * 0.02;
  const auto c = JudgeContention(s, kDefault);
  EXPECT_EQ(c.state, ContentionState::kContended);
  // Less what the counters may still owe the probe (up to 10 % of its bytes, 3 % here).
  EXPECT_NEAR(c.foreign_h2d_bytes_per_s, 27e9 - (1.10 * 55e9 - 59e9) * 0.026 / 0.02, 1e8);
  EXPECT_NE(c.reason.find("right after"), std::string::npos) << c.reason;
}

TEST(Contention, CountersCatchingUpAfterTheWindowAreTheProbesOwn) {
  // The counters showed 50 GB/s of the probe's 55 by the window's end; the missing bytes
  // (with their 7 % overhead) arrive in the reading after: not foreign.
  auto s = Probe(Direction::kH2D, 55, 50, 3);
  s.traffic->after_rx_bytes = (55 * 1.07 - 50) * 1e9 * 0.026;
  EXPECT_EQ(JudgeContention(s, kDefault).state, ContentionState::kClear);
}

TEST(Contention, ReverseDirectionTrafficOfTheProbeIsNotForeign) {
  // Host-to-device DMA sends read requests the other way: up to 20 % is expected.
  EXPECT_EQ(JudgeContention(Probe(Direction::kH2D, 55, 59, 10), kDefault).state,
            ContentionState::kClear);
  // Beyond that it is another process moving data device-to-host.
  const auto c = JudgeContention(Probe(Direction::kH2D, 55, 59, 30), kDefault);
  EXPECT_EQ(c.state, ContentionState::kContended);
  EXPECT_NEAR(c.foreign_d2h_bytes_per_s, 30e9 - 0.2 * 55e9, 1e8);
}

TEST(Contention, ManagedMemoryMovesItsPagesBothWays) {
  // A managed h2d probe migrates every page home first: 4 GB/s each way is its own.
  EXPECT_EQ(
      JudgeContention(Probe(Direction::kH2D, 4, 4.4, 4.4, TransferMode::kManaged), kDefault).state,
      ContentionState::kClear);
}

TEST(Contention, SmallForeignTrafficIsBelowTheThresholds) {
  // 1 GB/s of someone else's traffic: under the 2 GB/s threshold.
  EXPECT_EQ(JudgeContention(Probe(Direction::kH2D, 55, 55 * 1.07 + 1, 4), kDefault).state,
            ContentionState::kClear);
  // A slow probe (pageable, 6 GB/s) with 2.5 GB/s beside it: over the threshold.
  EXPECT_EQ(JudgeContention(Probe(Direction::kH2D, 6, 6 * 1.07 + 2.5, 0.5, TransferMode::kPageable),
                            kDefault)
                .state,
            ContentionState::kContended);
  // A higher threshold ([busy] pcie_bytes_per_second) lets it pass.
  EXPECT_EQ(JudgeContention(Probe(Direction::kH2D, 6, 6 * 1.07 + 2.5, 0.5, TransferMode::kPageable),
                            ContentionThresholds{5e9})
                .state,
            ContentionState::kClear);
}

TEST(Contention, BothWaysAtOnceCountsItsBytesInBothDirections) {
  // pinned bidir: 50 GB/s each way alone, 53.5 counted each way.
  EXPECT_EQ(
      JudgeContention(Probe(Direction::kBidirectional, 50, 53.5 + 10, 53.5 + 10), kDefault).state,
      ContentionState::kClear);
  // Beside an h2d workload: 31 each way for the probe, the link full at 59 rx.
  EXPECT_EQ(
      JudgeContention(Probe(Direction::kBidirectional, 31, 59 + 6.2, 33.2 + 6.2), kDefault).state,
      ContentionState::kContended);
}

TEST(Contention, SampledRatesCountOverTheProbesDeviceTimeOnly) {
  // Without byte counters: throughput samples read 59 GB/s while the probe copied for its
  // 26 ms of device time, in a 32 ms window (set-up, synchronisation). Rates x window would
  // make 6 ms of copying up; over the device time the probe is alone.
  auto s = Probe(Direction::kH2D, 55 * 0.026 / 0.032, 59, 4, TransferMode::kPinned, 0.032);
  s.traffic->sampled_rates = true;
  s.device_time_s = 0.026;
  EXPECT_EQ(JudgeContention(s, kDefault).state, ContentionState::kClear);
  s.traffic->sampled_rates = false;  // the same figures as counted bytes would be foreign
  EXPECT_EQ(JudgeContention(s, kDefault).state, ContentionState::kContended);
}

TEST(Contention, SampledRatesLeaveOutTheTimeTheProbeComputedAlone) {
  // pinned_async h2d on the H200: 20 copies of 64 MiB (warm-up, timed, the overlap
  // measurement's pipelined rounds) in 28.5 ms of copying at 47 GB/s, plus 7.6 ms of its
  // kernels timed alone (the link idle): 36.1 ms of device time in a 90 ms window. The
  // throughput samples read the link while it copied: 1.07 x 47.1 GB/s. Counted over all
  // 36.1 ms they made 3.8 GB/s of "foreign" traffic up on an idle GPU.
  const double own = 20.0 * kSize, copying_s = 0.0285, window_s = 0.090;
  const double link_gbps = 1.07 * own / copying_s / 1e9;
  auto s = Probe(Direction::kH2D, own / window_s / 1e9, link_gbps, 0.5,
                 TransferMode::kPinnedAsync, window_s);
  s.traffic->sampled_rates = true;
  s.device_time_s = 0.0361;
  s.compute_only_s = 0.0076;
  const auto alone = JudgeContention(s, kDefault);
  EXPECT_EQ(alone.state, ContentionState::kClear) << alone.reason;
  EXPECT_EQ(alone.foreign_h2d_bytes_per_s, 0);
  // The same figures without the compute-alone share: what the daemon did before.
  auto before = s;
  before.compute_only_s = 0;
  EXPECT_EQ(JudgeContention(before, kDefault).state, ContentionState::kContended);
  // A neighbour moving 10 GB/s host to device beside the same probe is still seen.
  auto shared = s;
  shared.traffic->rx_bytes += 10e9 * window_s;
  const auto c = JudgeContention(shared, kDefault);
  EXPECT_EQ(c.state, ContentionState::kContended) << c.reason;
  EXPECT_GT(c.foreign_h2d_bytes_per_s, 2e9);
}

TEST(Contention, UnreadableLinkOrFailedProbeIsUnknown) {
  auto s = Probe(Direction::kH2D, 55, 59, 4);
  s.traffic.reset();
  const auto c = JudgeContention(s, kDefault);
  EXPECT_EQ(c.state, ContentionState::kUnknown);
  EXPECT_FALSE(c.reason.empty());
  auto failed = Probe(Direction::kH2D, 28, 59, 4);
  failed.status = probes::ProbeStatus::kTimeout;
  EXPECT_EQ(JudgeContention(failed, kDefault).state, ContentionState::kUnknown);
}

TEST(Contention, WithoutTheBackendsByteCountTheSpecsTransfersCount) {
  // A backend that does not say what it moved: 22 transfers of 64 MiB in the spec's
  // direction, 1.48 GB in 26 ms, as pinned h2d on an H200.
  probes::ProbeSample s = Probe(Direction::kH2D, 0, 0, 0, TransferMode::kPinned, 0.026);
  s.link_h2d_bytes = s.link_d2h_bytes = 0;
  s.spec.iterations = 20;
  s.spec.warmup = 2;
  const double own = 22.0 * kSize;
  s.traffic->window_s = 0.026;
  s.traffic->rx_bytes = own * 1.07;
  s.traffic->tx_bytes = own * 0.05;
  EXPECT_EQ(s.OwnLinkBytes().first, own);
  EXPECT_EQ(JudgeContention(s, kDefault).state, ContentionState::kClear);
  s.traffic->rx_bytes = own * 1.07 + 27e9 * 0.026;
  EXPECT_EQ(JudgeContention(s, kDefault).state, ContentionState::kContended);
}

// The links a GPU reaches host memory over, from the narrowest xferd is built for to the
// widest: what each carries per direction when healthy.
struct LinkCase {
  const char* name;
  double bytes_per_s;
};
const LinkCase kLinks[] = {
    {"Gen3 x4", probes::PcieBytesPerSecond(3, 4)},
    {"Gen3 x8", probes::PcieBytesPerSecond(3, 8)},
    {"Gen4 x4", probes::PcieBytesPerSecond(4, 4)},
    {"Gen4 x8", probes::PcieBytesPerSecond(4, 8)},
    {"Gen3 x16", probes::PcieBytesPerSecond(3, 16)},
    {"Gen5 x8", probes::PcieBytesPerSecond(5, 8)},
    {"Gen4 x16", probes::PcieBytesPerSecond(4, 16)},
    {"Gen5 x16", probes::PcieBytesPerSecond(5, 16)},
    {"NVLink-C2C", probes::kC2cBytesPerSecond},
};

ContentionThresholds OnLink(double link_bytes_per_s, double configured = 2e9) {
  return {configured, link_bytes_per_s, 0.63};
}

TEST(ContentionThreshold, ScalesWithTheLinkUpToTheConfiguredFigure) {
  // A quarter of the 37 % between the band's lower edge and the link's full rate ...
  EXPECT_NEAR(LinkForeignThreshold(probes::PcieBytesPerSecond(3, 4), 0.63), 0.364e9, 0.001e9);
  EXPECT_NEAR(LinkForeignThreshold(probes::PcieBytesPerSecond(4, 4), 0.63), 0.728e9, 0.001e9);
  EXPECT_NEAR(LinkForeignThreshold(probes::PcieBytesPerSecond(4, 8), 0.63), 1.457e9, 0.001e9);
  EXPECT_EQ(LinkForeignThreshold(0, 0.63), 0.0);
  // ... or the configured figure where that is lower: every x16 link and NVLink-C2C at the
  // default 2 GB/s, as before the threshold followed the link.
  EXPECT_DOUBLE_EQ(ForeignTrafficLimit(OnLink(probes::PcieBytesPerSecond(4, 16)), 0), 2e9);
  EXPECT_DOUBLE_EQ(ForeignTrafficLimit(OnLink(probes::PcieBytesPerSecond(5, 16)), 0), 2e9);
  EXPECT_DOUBLE_EQ(ForeignTrafficLimit(OnLink(probes::kC2cBytesPerSecond), 0), 2e9);
  EXPECT_NEAR(ForeignTrafficLimit(OnLink(probes::PcieBytesPerSecond(4, 4)), 0), 0.728e9, 1e6);
  // A lower configured figure holds on every link; an unknown link keeps the figure alone.
  EXPECT_DOUBLE_EQ(ForeignTrafficLimit(OnLink(probes::PcieBytesPerSecond(4, 4), 0.5e9), 0), 0.5e9);
  EXPECT_DOUBLE_EQ(ForeignTrafficLimit(OnLink(0, 5e9), 0), 5e9);
  // A tighter band leaves a healthy reading less room, and the threshold follows.
  EXPECT_LT(LinkForeignThreshold(probes::PcieBytesPerSecond(4, 4), 0.75),
            LinkForeignThreshold(probes::PcieBytesPerSecond(4, 4), 0.63));
}

TEST(ContentionThreshold, NoNeighbourThatCanPushAHealthyReadingBelowTheBandGoesUnseen) {
  for (const LinkCase& link : kLinks) {
    SCOPED_TRACE(link.name);
    const double r = link.bytes_per_s;
    // A healthy pinned h2d reading at the low end of where they sit (0.80 of the link):
    // the neighbour that takes it down to the band's lower edge (0.63), and any larger, is
    // seen; the probe reads what the neighbour left it.
    const double healthy = 0.80 * r, lower = 0.63 * r;
    for (const double neighbour : {healthy - lower, 0.3 * r}) {
      const double own = healthy - neighbour;
      const auto c = JudgeContention(
          Probe(Direction::kH2D, own / 1e9, (1.07 * own + neighbour) / 1e9, 0.1 * own / 1e9),
          OnLink(r));
      EXPECT_EQ(c.state, ContentionState::kContended) << neighbour / 1e9 << " GB/s: " << c.reason;
    }
    // One under the threshold leaves the reading inside the band: it may be judged.
    const double limit = ForeignTrafficLimit(OnLink(r), healthy);
    EXPECT_GE(healthy - limit, lower) << limit / 1e9 << " GB/s";
  }
}

TEST(ContentionThreshold, ASmallNeighbourOnANarrowLinkIsSeenAndOnAFastOneIsNoise) {
  // 1.7 GB/s of someone else's h2d traffic: a fifth of a Gen4 x4 link, the probe reads 21 %
  // low (5.0 of 6.3 GB/s).
  const double gen4x4 = probes::PcieBytesPerSecond(4, 4);
  const auto narrow =
      JudgeContention(Probe(Direction::kH2D, 5.0, 5.0 * 1.07 + 1.7, 0.5), OnLink(gen4x4));
  EXPECT_EQ(narrow.state, ContentionState::kContended) << narrow.reason;
  EXPECT_NEAR(narrow.foreign_h2d_bytes_per_s, 1.7e9 - 0.03 * 5e9, 0.05e9);
  // The same 1.7 GB/s beside 26 GB/s on Gen4 x16 cannot move the reading out of its band:
  // under the 2 GB/s it is held to there.
  const auto wide = JudgeContention(Probe(Direction::kH2D, 26, 26 * 1.07 + 1.7, 3),
                                    OnLink(probes::PcieBytesPerSecond(4, 16)));
  EXPECT_EQ(wide.state, ContentionState::kClear) << wide.reason;
}

}  // namespace
}  // namespace xferd::core
