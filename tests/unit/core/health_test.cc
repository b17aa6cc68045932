#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "core/freshness.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"

namespace xferd::core {

namespace {

using probes::Direction;
using probes::ProbeStatus;
using probes::TransferMode;

constexpr std::uint64_t kHealthSize = 64ull << 20;

probes::DeviceInfo Gpu0() {
  probes::DeviceInfo d;
  d.index = 0;
  d.uuid = "GPU-0000-test";
  d.name = "Test GPU";
  d.pci_bus_id = "0000:01:00.0";
  return d;
}

// GPU at 0000:01:00.0 behind a root port 0000:00:01.0, both Gen4 x16 capable.
probes::LinkPath Gen4Path(int gpu_gen = 4, int gpu_width = 16, int port_gen = 4,
                          int port_width = 16) {
  probes::LinkPath p;
  p.links.push_back({"0000:01:00.0", gpu_gen, gpu_width, 4, 16});
  p.links.push_back({"0000:00:01.0", port_gen, port_width, 4, 16});
  p.numa_node = 0;
  p.iommu_type = "identity";
  return p;
}

// A probe whose median bandwidth is `gbps` GB/s, with a little spread.
probes::ProbeSample Sample(TransferMode mode, Direction dir, double gbps,
                           ProbeStatus status = ProbeStatus::kOk) {
  probes::ProbeSample s;
  s.spec.mode = mode;
  s.spec.direction = dir;
  s.spec.size_bytes = kHealthSize;
  s.status = status;
  s.bytes_per_transfer = dir == Direction::kBidirectional ? 2 * kHealthSize : kHealthSize;
  if (status == ProbeStatus::kOk) {
    const double d = static_cast<double>(s.bytes_per_transfer) / (gbps * 1e9);
    for (int i = 0; i < 20; ++i) s.durations_s.push_back(d * (1.0 + 0.001 * (i % 5 - 2)));
  } else {
    s.message = "injected";
  }
  return s;
}

CycleObservation Cycle(std::vector<probes::ProbeSample> samples,
                       probes::LinkPath path = Gen4Path()) {
  CycleObservation o;
  o.device = Gpu0();
  o.link_path = std::move(path);
  o.samples = std::move(samples);
  o.host_numa_node = 0;
  return o;
}

// pinned h2d at `pinned` GB/s and pageable h2d at `pageable` GB/s.
CycleObservation PinnedCycle(double pinned, double pageable = 8.0) {
  return Cycle({Sample(TransferMode::kPinned, Direction::kH2D, pinned),
                Sample(TransferMode::kPageable, Direction::kH2D, pageable)});
}

Settings TestConfig(int k = 3) {
  Settings c;
  c.consecutive_bad = k;
  c.baseline_window = 20;
  c.drift_fraction = 0.8;
  return c;
}

bool PinnedDegraded(const DeviceHealth& h) {
  for (const auto& v : h.verdicts) {
    if (v.mode == TransferMode::kPinned && v.direction == Direction::kH2D) return v.degraded;
  }
  ADD_FAILURE() << "no pinned h2d verdict";
  return false;
}

TEST(Band, ConfigOverrideWinsByIndexOrUuid) {
  Settings c = TestConfig();
  const auto from_path = ResolveBand(c, Gpu0(), Gen4Path());
  EXPECT_NEAR(from_path.lower_bytes_per_s, 0.63 * 31.5e9, 0.01e9);
  EXPECT_NEAR(from_path.upper_bytes_per_s, 0.83 * 31.5e9, 0.01e9);
  EXPECT_NE(from_path.source, "config");

  c.bands.push_back({"0", 10e9, 12e9});
  auto by_index = ResolveBand(c, Gpu0(), Gen4Path());
  EXPECT_EQ(by_index.source, "config");
  EXPECT_DOUBLE_EQ(by_index.lower_bytes_per_s, 10e9);

  c.bands = {{"GPU-0000-test", 5e9, 6e9}};
  auto by_uuid = ResolveBand(c, Gpu0(), Gen4Path());
  EXPECT_DOUBLE_EQ(by_uuid.upper_bytes_per_s, 6e9);

  c.bands = {{"1", 5e9, 6e9}};  // another GPU's override does not apply
  EXPECT_NE(ResolveBand(c, Gpu0(), Gen4Path()).source, "config");
}

TEST(Band, FollowsTheNarrowestLinkAndItsFractions) {
  Settings c = TestConfig();
  c.band_lower_fraction = 0.5;
  c.band_upper_fraction = 0.9;
  // GPU link Gen4 x16 but the port above can do x8 at most: the x8 link decides.
  probes::LinkPath x8 = Gen4Path(4, 16, 4, 8);
  x8.links[1].max_width = 8;
  const auto band = ResolveBand(c, Gpu0(), x8);
  EXPECT_NEAR(band.lower_bytes_per_s, 0.5 * 15.75e9, 0.01e9);
  EXPECT_NEAR(band.upper_bytes_per_s, 0.9 * 15.75e9, 0.01e9);
  // Trained to x8 where it can do x16: held to x16, what it should carry.
  const auto down = ResolveBand(c, Gpu0(), Gen4Path(4, 16, 4, 8));
  EXPECT_NEAR(down.lower_bytes_per_s, 0.5 * 31.5e9, 0.01e9);
}

TEST(Baseline, RobustToAnOutlierCycle) {
  HealthTracker h(TestConfig());
  for (int i = 0; i < 9; ++i) h.Observe(PinnedCycle(25.0 + 0.1 * (i % 3)));
  h.Observe(PinnedCycle(250.0));  // one absurd reading (not low, so it is learned)
  const double base =
      h.Baseline("GPU-0000-test", TransferMode::kPinned, Direction::kH2D, kHealthSize);
  EXPECT_NEAR(base, 25.1e9, 0.15e9);
}

TEST(Baseline, NotLearnedFromBusyOrFailedOrDriftingCycles) {
  HealthTracker h(TestConfig());
  for (int i = 0; i < 6; ++i) h.Observe(PinnedCycle(25.0));
  auto busy = PinnedCycle(5.0);
  busy.busy = true;
  h.Observe(busy);
  h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 0, ProbeStatus::kError)}));
  for (int i = 0; i < 10; ++i) h.Observe(PinnedCycle(12.0));  // below 0.8 x 25: not learned
  EXPECT_NEAR(h.Baseline("GPU-0000-test", TransferMode::kPinned, Direction::kH2D, kHealthSize),
              25e9, 0.01e9);
  const auto snap = h.Snapshot();
  EXPECT_EQ(snap.at("GPU-0000-test").at("pinned/h2d/64MiB").size(), 6u);
}

TEST(Verdict, FlipsAfterExactlyKBadCyclesAndBackAfterKGood) {
  for (int k : {1, 3, 5}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    HealthTracker h(TestConfig(k));
    for (int i = 0; i < 6; ++i) EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(24.0))));
    // 10 GB/s is below the Gen4 x16 band (19.8 GB/s).
    for (int i = 1; i < k; ++i) EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
    DeviceHealth bad = h.Observe(PinnedCycle(10.0));
    EXPECT_TRUE(PinnedDegraded(bad));
    EXPECT_TRUE(bad.Degraded());
    for (int i = 1; i < k; ++i) EXPECT_TRUE(PinnedDegraded(h.Observe(PinnedCycle(24.0))));
    EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(24.0))));
  }
}

TEST(Verdict, ChangedMarksTheCycleItFlipsIn) {
  HealthTracker h(TestConfig(2));
  auto changed = [](const DeviceHealth& d) {
    for (const auto& v : d.verdicts) {
      if (v.mode == TransferMode::kPinned && v.direction == Direction::kH2D) return v.changed;
    }
    return false;
  };
  EXPECT_FALSE(changed(h.Observe(PinnedCycle(24.0))));  // first sight, healthy: no news
  EXPECT_FALSE(changed(h.Observe(PinnedCycle(10.0))));
  EXPECT_TRUE(changed(h.Observe(PinnedCycle(10.0))));   // now degraded
  EXPECT_FALSE(changed(h.Observe(PinnedCycle(10.0))));  // still degraded
  EXPECT_FALSE(changed(h.Observe(PinnedCycle(24.0))));
  EXPECT_TRUE(changed(h.Observe(PinnedCycle(24.0))));  // recovered
}

TEST(Diagnosis, DiagnoseOnceJudgesASingleRun) {
  auto obs = Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 10.0),
                    Sample(TransferMode::kPageable, Direction::kH2D, 8.0)});
  obs.link_path.iommu_type = "DMA-FQ";
  const auto causes = DiagnoseOnce(TestConfig(5), obs);
  std::vector<std::string> names;
  for (const auto& d : causes) {
    names.emplace_back(ToString(d.cause));
    EXPECT_FALSE(d.advice.empty());
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"iommu_translating", "pinned_pageable_ratio", "below_band"}));
  EXPECT_TRUE(
      DiagnoseOnce(TestConfig(), Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 24.0)}))
          .empty());
}

TEST(Verdict, ASingleBadCycleOrAnInterruptedStreakDoesNotFlip) {
  HealthTracker h(TestConfig(3));
  for (int i = 0; i < 6; ++i) h.Observe(PinnedCycle(24.0));
  EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
  EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
  EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(24.0))));  // streak broken
  EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
  EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
  EXPECT_TRUE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
}

TEST(Verdict, ErrorsDoNotCountAsGood) {
  HealthTracker h(TestConfig(2));
  for (int i = 0; i < 6; ++i) h.Observe(PinnedCycle(24.0));
  h.Observe(PinnedCycle(10.0));
  EXPECT_TRUE(PinnedDegraded(h.Observe(PinnedCycle(10.0))));
  auto failed = Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 0, ProbeStatus::kTimeout)});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(PinnedDegraded(h.Observe(failed)));
  EXPECT_TRUE(PinnedDegraded(h.Observe(PinnedCycle(24.0))));
  EXPECT_FALSE(PinnedDegraded(h.Observe(PinnedCycle(24.0))));
}

// A baseline judges from its second learned reading (kProvisionalBaselineCycles): a drop
// in a GPU's first cycles is caught, not learned; a single first reading judges nothing.
TEST(Verdict, DriftBelowBaselineCountsFromTheSecondLearnedReading) {
  HealthTracker h(TestConfig(1));
  // pageable is not link-bound: only its own history can judge it.
  auto pageable = [](double gbps) {
    return Cycle({Sample(TransferMode::kPageable, Direction::kH2D, gbps)});
  };
  h.Observe(pageable(8.0));
  DeviceHealth early = h.Observe(pageable(3.0));  // 1 learned reading: no judgment yet
  EXPECT_FALSE(early.Degraded());
  HealthTracker g(TestConfig(1));
  g.Observe(pageable(8.0));
  g.Observe(pageable(8.0));
  DeviceHealth late = g.Observe(pageable(3.0));
  EXPECT_TRUE(late.Degraded());
  EXPECT_TRUE(late.Has(DiagnosisCause::kBelowBaseline));
  EXPECT_FALSE(late.Has(DiagnosisCause::kBelowBand));  // pageable is not held to the band
}

TEST(Verdict, BusyCyclesMoveNothing) {
  HealthTracker h(TestConfig(2));
  for (int i = 0; i < 6; ++i) h.Observe(PinnedCycle(24.0));
  auto busy = PinnedCycle(5.0);
  busy.busy = true;
  for (int i = 0; i < 4; ++i) {
    DeviceHealth r = h.Observe(busy);
    EXPECT_FALSE(PinnedDegraded(r));
    EXPECT_TRUE(r.Has(DiagnosisCause::kGpuBusy));
  }
}

// ---- Diagnosis: each cause fires on its condition and not otherwise ---------------------

TEST(Diagnosis, HealthyDeviceHasNoCause) {
  HealthTracker h(TestConfig());
  DeviceHealth r;
  for (int i = 0; i < 8; ++i) r = h.Observe(PinnedCycle(24.0, 8.0));
  EXPECT_TRUE(r.diagnoses.empty()) << ToString(r.diagnoses.front().cause);
  EXPECT_EQ(h.Summary(), "ok: 2/2 within band");
}

TEST(Diagnosis, LinkDowntrainedNamesTheLink) {
  HealthTracker h(TestConfig());
  DeviceHealth r = h.Observe(
      Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 10.0)}, Gen4Path(4, 16, 4, 8)));
  ASSERT_TRUE(r.Has(DiagnosisCause::kLinkDowntrained));
  for (const auto& d : r.diagnoses) {
    if (d.cause != DiagnosisCause::kLinkDowntrained) continue;
    EXPECT_EQ(d.detail, "0000:00:01.0 Gen4 x8, max Gen4 x16");
    EXPECT_NE(d.advice.find("lspci -vv -s 0000:00:01.0"), std::string::npos);
  }
  // The band is what the link can carry, Gen4 x16: 10 GB/s is below 0.63 x 31.5, and the
  // downtrained link is why.
  EXPECT_TRUE(r.Has(DiagnosisCause::kBelowBand));
  for (int i = 1; i < TestConfig().consecutive_bad; ++i) {
    r = h.Observe(
        Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 10.0)}, Gen4Path(4, 16, 4, 8)));
  }
  EXPECT_TRUE(r.Degraded());
  EXPECT_EQ(h.Summary().rfind("DEGRADED gpu0 pinned h2d", 0), 0u) << h.Summary();
  EXPECT_NE(h.Summary().find("link_downtrained"), std::string::npos) << h.Summary();
  // Unknown max (0) is not a downtrain.
  probes::LinkPath unknown = Gen4Path();
  unknown.links[1].max_width = 0;
  unknown.links[1].current_width = 8;
  EXPECT_FALSE(h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 24.0)}, unknown))
                   .Has(DiagnosisCause::kLinkDowntrained));
}

TEST(Diagnosis, NumaRemoteWhenBuffersCouldNotBePlacedOnTheGpusNode) {
  HealthTracker h(TestConfig());
  auto obs = PinnedCycle(24.0);
  obs.link_path.numa_node = 1;
  obs.host_numa_node = -1;  // from the samples
  for (auto& s : obs.samples) {
    s.host_numa_node = -1;  // the kernel cannot say where they are...
    s.host_placement = "set_mempolicy(preferred node 1) failed: Operation not permitted";
  }
  DeviceHealth r = h.Observe(obs);  // ... but they were not put on node 1
  ASSERT_TRUE(r.Has(DiagnosisCause::kNumaRemote));
  EXPECT_EQ(r.diagnoses.front().detail,
            "GPU on node 1, host buffers on node unknown (not placed on node 1: "
            "set_mempolicy(preferred node 1) failed: Operation not permitted)");
  for (auto& s : obs.samples) s.host_numa_node = 1;  // refused, yet there anyway
  EXPECT_FALSE(h.Observe(obs).Has(DiagnosisCause::kNumaRemote));
}

TEST(Diagnosis, NumaRemoteOnlyWhenBothNodesKnownAndDiffer) {
  HealthTracker h(TestConfig());
  auto obs = PinnedCycle(24.0);
  obs.link_path.numa_node = 1;
  obs.host_numa_node = 0;
  DeviceHealth r = h.Observe(obs);
  ASSERT_TRUE(r.Has(DiagnosisCause::kNumaRemote));
  EXPECT_EQ(r.diagnoses.front().detail, "GPU on node 1, host buffers on node 0");
  obs.host_numa_node = -1;  // unknown: no verdict
  EXPECT_FALSE(h.Observe(obs).Has(DiagnosisCause::kNumaRemote));
  obs.host_numa_node = 1;
  EXPECT_FALSE(h.Observe(obs).Has(DiagnosisCause::kNumaRemote));
  obs.link_path.numa_node = -1;
  obs.host_numa_node = 0;
  EXPECT_FALSE(h.Observe(obs).Has(DiagnosisCause::kNumaRemote));
  // The backend's own finding in the samples counts when the caller names no node.
  obs.link_path.numa_node = 1;
  obs.host_numa_node = -1;
  for (auto& s : obs.samples) s.host_numa_node = 0;
  EXPECT_TRUE(h.Observe(obs).Has(DiagnosisCause::kNumaRemote));
  for (auto& s : obs.samples) s.host_numa_node = 1;
  EXPECT_FALSE(h.Observe(obs).Has(DiagnosisCause::kNumaRemote));
}

TEST(Diagnosis, IommuTranslatingOnlyWhileBandwidthIsLow) {
  HealthTracker h(TestConfig());
  for (const char* type : {"DMA", "DMA-FQ"}) {
    auto fine = PinnedCycle(24.0);
    fine.link_path.iommu_type = type;
    EXPECT_FALSE(h.Observe(fine).Has(DiagnosisCause::kIommuTranslating));
    auto low = PinnedCycle(10.0, 4.0);
    low.link_path.iommu_type = type;
    EXPECT_TRUE(h.Observe(low).Has(DiagnosisCause::kIommuTranslating)) << type;
  }
  auto passthrough = PinnedCycle(10.0, 4.0);
  passthrough.link_path.iommu_type = "identity";
  EXPECT_FALSE(h.Observe(passthrough).Has(DiagnosisCause::kIommuTranslating));
  passthrough.link_path.iommu_type = "";
  EXPECT_FALSE(h.Observe(passthrough).Has(DiagnosisCause::kIommuTranslating));
}

TEST(Diagnosis, PinnedPageableRatioOutsideItsWindow) {
  HealthTracker h(TestConfig());
  EXPECT_FALSE(h.Observe(PinnedCycle(24.0, 8.0)).Has(DiagnosisCause::kPinnedPageableRatio));  // 3x
  EXPECT_FALSE(
      h.Observe(PinnedCycle(24.0, 2.9)).Has(DiagnosisCause::kPinnedPageableRatio));          // 8.3x
  EXPECT_TRUE(h.Observe(PinnedCycle(24.0, 1.5)).Has(DiagnosisCause::kPinnedPageableRatio));  // 16x
  EXPECT_TRUE(
      h.Observe(PinnedCycle(24.0, 20.0)).Has(DiagnosisCause::kPinnedPageableRatio));  // 1.2x
  // Without a pageable reading there is no ratio.
  EXPECT_FALSE(h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 24.0)}))
                   .Has(DiagnosisCause::kPinnedPageableRatio));
  // Integrated GPUs share DRAM: pinned ~ pageable is normal there.
  auto igpu = PinnedCycle(24.0, 20.0);
  igpu.device.integrated = true;
  EXPECT_FALSE(h.Observe(igpu).Has(DiagnosisCause::kPinnedPageableRatio));
}

TEST(Diagnosis, BelowBandOnlyForLinkBoundModes) {
  HealthTracker h(TestConfig());
  DeviceHealth r = h.Observe(Cycle({Sample(TransferMode::kManaged, Direction::kH2D, 3.0),
                                    Sample(TransferMode::kPageable, Direction::kH2D, 5.0)}));
  EXPECT_FALSE(r.Has(DiagnosisCause::kBelowBand));
  r = h.Observe(Cycle({Sample(TransferMode::kZeroCopy, Direction::kD2H, 12.0)}));
  ASSERT_TRUE(r.Has(DiagnosisCause::kBelowBand));
  EXPECT_EQ(r.diagnoses.back().detail, "zero_copy d2h 12.0 GB/s < 19.8 GB/s band");
  // managed_prefetch d2h is bounded by the host populating pages, not by the link.
  EXPECT_FALSE(h.Observe(Cycle({Sample(TransferMode::kManagedPrefetch, Direction::kD2H, 10.0)}))
                   .Has(DiagnosisCause::kBelowBand));
  EXPECT_TRUE(h.Observe(Cycle({Sample(TransferMode::kManagedPrefetch, Direction::kH2D, 10.0)}))
                  .Has(DiagnosisCause::kBelowBand));
  // Both directions at once are judged per direction: 30 GB/s summed is 15 each.
  r = h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kBidirectional, 30.0)}));
  ASSERT_TRUE(r.Has(DiagnosisCause::kBelowBand));
  EXPECT_EQ(r.diagnoses.back().detail, "pinned bidir 15.0 GB/s per direction < 19.8 GB/s band");
  EXPECT_FALSE(h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kBidirectional, 44.0)}))
                   .Has(DiagnosisCause::kBelowBand));
  // A 4 KiB transfer is latency-bound: never held to the band.
  auto small = Sample(TransferMode::kPinned, Direction::kH2D, 1.0);
  small.spec.size_bytes = 4096;
  small.bytes_per_transfer = 4096;
  EXPECT_FALSE(h.Observe(Cycle({small})).Has(DiagnosisCause::kBelowBand));
  // No band known (integrated, no PCIe path): nothing to hold it to.
  probes::LinkPath none;
  none.pcie = false;
  EXPECT_FALSE(h.Observe(Cycle({Sample(TransferMode::kZeroCopy, Direction::kD2H, 12.0)}, none))
                   .Has(DiagnosisCause::kBelowBand));
}

TEST(Summary, NamesTheDegradedSeriesAndTheLikelyCause) {
  HealthTracker h(TestConfig(2));
  EXPECT_EQ(h.Summary(), "starting: no probe cycle finished yet");
  // The port above the GPU trained down to Gen4 x8, and a config band says 20 GB/s.
  Settings c = TestConfig(2);
  c.bands = {{"0", 20e9, 26e9}};
  h.Reconfigure(c);
  for (int i = 0; i < 2; ++i) {
    h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 12.1),
                     Sample(TransferMode::kPinned, Direction::kD2H, 12.3)},
                    Gen4Path(4, 16, 4, 8)));
  }
  EXPECT_EQ(h.Summary(),
            "DEGRADED gpu0 pinned h2d 12.1 GB/s < 20.0 GB/s band (+1 more); likely: "
            "link_downtrained (0000:00:01.0 Gen4 x8, max Gen4 x16)");
}

TEST(Reconfigure, DroppedModesLoseTheirVerdictButKeepTheirHistory) {
  HealthTracker h(TestConfig(1));
  for (int i = 0; i < 6; ++i) h.Observe(PinnedCycle(24.0, 8.0));
  h.Observe(PinnedCycle(10.0, 8.0));
  ASSERT_NE(h.Summary().find("DEGRADED"), std::string::npos);
  Settings c = TestConfig(1);
  c.modes = {TransferMode::kPageable};
  h.Reconfigure(c);
  EXPECT_EQ(h.Summary(), "ok: 1/1 within band");
  EXPECT_EQ(h.Snapshot().at("GPU-0000-test").at("pinned/h2d/64MiB").size(), 6u);
  // Back in the config, the history judges it again at once.
  h.Reconfigure(TestConfig(1));
  EXPECT_TRUE(PinnedDegraded(h.Observe(PinnedCycle(10.0, 8.0))));
}

TEST(Restore, RestoredHistoryJudgesTheFirstCycles) {
  HealthTracker first(TestConfig(1));
  for (int i = 0; i < 8; ++i)
    first.Observe(Cycle({Sample(TransferMode::kManaged, Direction::kH2D, 4.0)}));
  const BaselineSet saved = first.Snapshot();

  HealthTracker second(TestConfig(1));
  second.Restore(saved);
  EXPECT_NEAR(
      second.Baseline("GPU-0000-test", TransferMode::kManaged, Direction::kH2D, kHealthSize), 4e9,
      1e6);
  // A drop right after the restart is caught against the old history.
  DeviceHealth r = second.Observe(Cycle({Sample(TransferMode::kManaged, Direction::kH2D, 1.0)}));
  EXPECT_TRUE(r.Degraded());
  // Series not seen since the restart survive the next snapshot.
  BaselineSet extra = saved;
  extra["GPU-other"]["pinned/h2d/64MiB"] = {1e9, 1e9};
  HealthTracker third(TestConfig(1));
  third.Restore(extra);
  third.Observe(PinnedCycle(24.0));
  EXPECT_EQ(third.Snapshot().at("GPU-other").at("pinned/h2d/64MiB").size(), 2u);
}

TEST(HealthTracker, ReadersRunAlongsideTheProbeLoop) {
  // The probe loop observes while HTTP threads read the status line (TSan checks this).
  HealthTracker h(TestConfig(2));
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      EXPECT_FALSE(h.Summary().empty());
      h.Devices();
      h.Snapshot();
      h.Baseline("GPU-0000-test", TransferMode::kPinned, Direction::kH2D, kHealthSize);
    }
  });
  for (int i = 0; i < 300; ++i) h.Observe(PinnedCycle(i % 7 == 0 ? 10.0 : 24.0));
  h.Reconfigure(TestConfig(3));
  for (int i = 0; i < 50; ++i) h.Observe(PinnedCycle(24.0));
  done = true;
  reader.join();
  EXPECT_EQ(h.Summary(), "ok: 2/2 within band");
}

}  // namespace
}  // namespace xferd::core

namespace xferd::core {
namespace {

// GPU 0000:01:00.0 in slot 0000:00:01.0: the two ends of one link, paired as sysfs gives them.
probes::LinkPath PairedPath(int gpu_max_gen, int gpu_max_width, int slot_max_gen,
                            int slot_max_width, int gen, int width) {
  probes::LinkPath p;
  p.links.push_back({"0000:01:00.0", gen, width, gpu_max_gen, gpu_max_width});
  p.links.push_back({"0000:00:01.0", gen, width, slot_max_gen, slot_max_width});
  probes::PairLinkEnds(p);
  p.numa_node = 0;
  p.iommu_type = "identity";
  return p;
}

// What a fresh tracker makes of one pinned h2d reading of `gbps` GB/s over `path`.
DeviceHealth FirstPinnedReading(double gbps, const probes::LinkPath& path) {
  HealthTracker h(TestConfig());
  return h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, gbps)}, path));
}

probes::ProbeSample Contended(probes::ProbeSample s, double foreign_gbps) {
  s.contention.state = probes::ContentionState::kContended;
  s.contention.foreign_h2d_bytes_per_s = foreign_gbps * 1e9;
  s.contention.reason = "test";
  return s;
}

TEST(Diagnosis, AGpuFasterThanItsSlotIsACapabilityMismatchNotADowntrain) {
  // Gen5 GPU in a Gen4 slot, trained at Gen4 x16: all it can be.
  const DeviceHealth r = FirstPinnedReading(24.0, PairedPath(5, 16, 4, 16, 4, 16));
  EXPECT_FALSE(r.Has(DiagnosisCause::kLinkDowntrained));
  ASSERT_TRUE(r.Has(DiagnosisCause::kCapabilityMismatch));
  for (const auto& d : r.diagnoses) {
    if (d.cause != DiagnosisCause::kCapabilityMismatch) continue;
    EXPECT_EQ(d.detail,
              "GPU can do Gen5 x16, its path at most Gen4 x16 (link 0000:01:00.0 - 0000:00:01.0)");
    EXPECT_NE(d.advice.find("Not a fault"), std::string::npos);
  }
  EXPECT_FALSE(r.Degraded());
  // The band follows what the path can carry, the slot's Gen4 x16: 24 GB/s is within it.
  EXPECT_FALSE(r.Has(DiagnosisCause::kBelowBand));
}

TEST(Diagnosis, DowntrainedBelowBothEndsIsNamedOnceWithTheLinksMaximum) {
  const DeviceHealth r = FirstPinnedReading(10.0, PairedPath(4, 16, 4, 16, 4, 8));
  ASSERT_TRUE(r.Has(DiagnosisCause::kLinkDowntrained));
  EXPECT_FALSE(r.Has(DiagnosisCause::kCapabilityMismatch));
  for (const auto& d : r.diagnoses) {
    if (d.cause == DiagnosisCause::kLinkDowntrained) {
      EXPECT_EQ(d.detail, "0000:01:00.0 Gen4 x8, max Gen4 x16");  // once, not per end
    }
  }
}

TEST(Verdict, ContendedReadingsAreNeitherJudgedNorLearned) {
  HealthTracker h(TestConfig());
  for (int i = 0; i < 8; ++i) h.Observe(PinnedCycle(24.0, 8.0));
  const double baseline =
      h.Baseline("GPU-0000-test", TransferMode::kPinned, Direction::kH2D, kHealthSize);
  DeviceHealth r;
  for (int i = 0; i < 10; ++i) {
    // Half of the link taken by a neighbour: 12 GB/s, below band and baseline both.
    r = h.Observe(Cycle({Contended(Sample(TransferMode::kPinned, Direction::kH2D, 12.0), 13.0),
                         Contended(Sample(TransferMode::kPageable, Direction::kH2D, 1.0), 13.0)}));
  }
  EXPECT_FALSE(r.Degraded());
  EXPECT_EQ(h.Baseline("GPU-0000-test", TransferMode::kPinned, Direction::kH2D, kHealthSize),
            baseline);
  EXPECT_FALSE(r.Has(DiagnosisCause::kBelowBand));
  EXPECT_FALSE(r.Has(DiagnosisCause::kBelowBaseline));
  // Not a 24x pinned/pageable ratio either: the readings say nothing about staging.
  EXPECT_FALSE(r.Has(DiagnosisCause::kPinnedPageableRatio));
  ASSERT_TRUE(r.Has(DiagnosisCause::kLinkShared));
  for (const auto& d : r.diagnoses) {
    if (d.cause == DiagnosisCause::kLinkShared) {
      EXPECT_EQ(d.detail, "13.0 GB/s foreign traffic (h2d 13.0, d2h 0.0) during 2 probes");
    }
  }
  for (const auto& s : r.series) {
    // The last judged reading stands; the contended ones are flagged.
    if (s.mode == TransferMode::kPinned) {
      EXPECT_NEAR(s.median_bytes_per_s, 24e9, 0.1e9);
    }
    EXPECT_TRUE(s.contended);
  }
  // Nor do they break a streak: two bad readings, a contended one, then a third bad flips
  // it.
  h.Observe(PinnedCycle(12.0, 4.0));
  h.Observe(PinnedCycle(12.0, 4.0));
  r = h.Observe(Cycle({Contended(Sample(TransferMode::kPinned, Direction::kH2D, 24.0), 13.0)}));
  EXPECT_FALSE(PinnedDegraded(r));
  r = h.Observe(PinnedCycle(12.0, 4.0));
  EXPECT_TRUE(PinnedDegraded(r));
}

TEST(Verdict, ConsecutiveBadCountsReadingsSoConfirmationsFlipItWithinACycle) {
  HealthTracker h(TestConfig());
  for (int i = 0; i < 8; ++i) h.Observe(PinnedCycle(24.0, 8.0));
  const probes::DeviceInfo gpu = Gpu0();
  const auto bad = Sample(TransferMode::kPinned, Direction::kH2D, 12.0);
  const auto good = Sample(TransferMode::kPinned, Direction::kH2D, 24.0);
  // What fast confirmation asks: two more bad readings flip it.
  FlipAhead f = h.ReadingsToFlip(gpu, Gen4Path(), bad);
  EXPECT_EQ(f.readings, 2);
  EXPECT_TRUE(f.to_degraded);
  EXPECT_EQ(h.ReadingsToFlip(gpu, Gen4Path(), good).readings, 0);  // healthy stays healthy
  h.Observe(Cycle({bad}));
  EXPECT_EQ(h.ReadingsToFlip(gpu, Gen4Path(), bad).readings, 1);
  h.Observe(Cycle({bad}));
  EXPECT_EQ(h.ReadingsToFlip(gpu, Gen4Path(), bad).readings, 0);  // this one flips it
  EXPECT_TRUE(PinnedDegraded(h.Observe(Cycle({bad}))));
  // Back: good readings on a degraded series are confirmed too.
  f = h.ReadingsToFlip(gpu, Gen4Path(), good);
  EXPECT_EQ(f.readings, 2);
  EXPECT_FALSE(f.to_degraded);
  // A contended or failed reading asks for nothing.
  EXPECT_EQ(h.ReadingsToFlip(gpu, Gen4Path(), Contended(good, 10)).readings, 0);
  EXPECT_EQ(h.ReadingsToFlip(gpu, Gen4Path(),
                             Sample(TransferMode::kPinned, Direction::kH2D, 0, ProbeStatus::kError))
                .readings,
            0);
  // Three readings in one observation (a cycle and its confirmations) count as three.
  HealthTracker fresh(TestConfig());
  for (int i = 0; i < 8; ++i) fresh.Observe(PinnedCycle(24.0, 8.0));
  EXPECT_TRUE(PinnedDegraded(fresh.Observe(Cycle({bad, bad, bad}))));
}

TEST(Band, ManagedPrefetchHostToDeviceHasItsOwnShareOfTheBand) {
  HealthTracker h(TestConfig());
  // Gen4 x16: the band's lower bound is 19.85 GB/s; managed_prefetch h2d is held to 0.8 of
  // it (15.9), as it reads 62-71 % of the link on healthy hardware.
  DeviceHealth r =
      h.Observe(Cycle({Sample(TransferMode::kManagedPrefetch, Direction::kH2D, 19.5)}));
  EXPECT_FALSE(r.Has(DiagnosisCause::kBelowBand));
  r = h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 19.5)}));
  EXPECT_TRUE(r.Has(DiagnosisCause::kBelowBand));
  r = h.Observe(Cycle({Sample(TransferMode::kManagedPrefetch, Direction::kH2D, 15.0)}));
  ASSERT_TRUE(r.Has(DiagnosisCause::kBelowBand));
  for (const auto& d : r.diagnoses) {
    if (d.cause == DiagnosisCause::kBelowBand) {
      EXPECT_EQ(d.detail, "managed_prefetch h2d 15.0 GB/s < 15.9 GB/s band");
    }
  }
}

// ---- Which cause leads, which series is shown ------------------------------------------

// A note (capability_mismatch: "not a fault") never leads: a Gen5 GPU in a Gen4 slot whose
// pinned copies fall to half is DEGRADED below its band, and the line, the leading cause
// and the causes' order say so, with the note last. What the issue saw: "DEGRADED gpu1
// pageable h2d: capability_mismatch, 1.72 GB/s < 3.38 baseline".
TEST(CauseRanking, ANoteNeverLeadsAndTheMostSevereSeriesIsShown) {
  HealthTracker h(TestConfig(1));
  const probes::LinkPath capped = PairedPath(5, 16, 4, 16, 4, 16);
  for (int i = 0; i < 6; ++i)
    h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 24.0),
                     Sample(TransferMode::kPageable, Direction::kH2D, 8.0)},
                    capped));
  // Pinned 25 % under its band; pageable down to a fifth of its baseline, a larger
  // shortfall, but host-bound and against its baseline only.
  const DeviceHealth r = h.Observe(Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 15.0),
                                          Sample(TransferMode::kPageable, Direction::kH2D, 1.6)},
                                         capped));
  ASSERT_TRUE(r.Degraded());
  ASSERT_TRUE(r.Has(DiagnosisCause::kCapabilityMismatch));
  const SeriesHealth* worst = WorstDegraded(r);
  ASSERT_NE(worst, nullptr);
  EXPECT_EQ(worst->mode, TransferMode::kPinned) << "below band before below baseline";
  EXPECT_EQ(LeadingCause(r), DiagnosisCause::kBelowBand);
  EXPECT_EQ(r.diagnoses.back().cause, DiagnosisCause::kCapabilityMismatch) << "notes last";
  const std::string summary = h.Summary();
  EXPECT_EQ(summary.rfind("DEGRADED gpu0 pinned h2d 15.0 GB/s < 19.8 GB/s band (+1 more)", 0), 0u)
      << summary;
  EXPECT_EQ(summary.find("likely: capability_mismatch"), std::string::npos) << summary;
  EXPECT_NE(summary.find("not a fault: capability_mismatch"), std::string::npos) << summary;
}

// Below band before below baseline; among baseline drops a link-bound mode before a
// host-bound one, however large the host-bound one's shortfall.
TEST(CauseRanking, LinkBoundBeforeHostBoundAmongBaselineDrops) {
  HealthTracker h(TestConfig(1));
  for (int i = 0; i < 6; ++i) {
    h.Observe(Cycle({Sample(TransferMode::kZeroCopy, Direction::kH2D, 25.0),
                     Sample(TransferMode::kPageable, Direction::kH2D, 8.0)}));
  }
  // zero_copy 24 % under its baseline, still within the band; pageable 80 % under.
  const DeviceHealth r = h.Observe(Cycle({Sample(TransferMode::kZeroCopy, Direction::kH2D, 19.9),
                                          Sample(TransferMode::kPageable, Direction::kH2D, 1.6)}));
  ASSERT_NE(WorstDegraded(r), nullptr);
  EXPECT_EQ(WorstDegraded(r)->mode, TransferMode::kZeroCopy);
  EXPECT_EQ(LeadingCause(r), DiagnosisCause::kBelowBaseline);
}

TEST(CauseRanking, FaultsRankBeforeReadingsAndNotesLast) {
  std::vector<Diagnosis> causes;
  for (DiagnosisCause c : kAllDiagnosisCauses) causes.push_back({c, "", ""});
  RankCauses(causes);
  EXPECT_EQ(causes.front().cause, DiagnosisCause::kLinkDowntrained);
  bool notes = false;
  for (const Diagnosis& d : causes) {
    if (IsNote(d.cause)) notes = true;
    EXPECT_EQ(IsNote(d.cause), notes) << ToString(d.cause) << ": a fault after a note";
  }
  for (DiagnosisCause note : {DiagnosisCause::kCapabilityMismatch, DiagnosisCause::kSharedUplink,
                              DiagnosisCause::kLinkShared, DiagnosisCause::kGpuBusy}) {
    EXPECT_TRUE(IsNote(note)) << ToString(note);
  }
  EXPECT_LT(CauseRank(DiagnosisCause::kBelowBand), CauseRank(DiagnosisCause::kBelowBaseline));
  // A link that flaps between probes is a fault, right after one that trained down.
  EXPECT_FALSE(IsNote(DiagnosisCause::kLinkFlapping));
  EXPECT_EQ(causes[1].cause, DiagnosisCause::kLinkFlapping);
  EXPECT_LT(CauseRank(DiagnosisCause::kLinkFlapping), CauseRank(DiagnosisCause::kLinkErrors));
  EXPECT_EQ(ParseDiagnosisCause("link_flapping"), DiagnosisCause::kLinkFlapping);
  EXPECT_EQ(ParseDiagnosisCause("capability_mismatch"), DiagnosisCause::kCapabilityMismatch);
  EXPECT_FALSE(ParseDiagnosisCause("no_such_cause").has_value());
}

// ---- Baselines learn only health ----------------------------------------------------

// No reading judged bad enters a baseline: below band (on any series), below the baseline,
// one of a series on a bad streak or degraded, a confirmation round's, a contended one.
TEST(Baseline, LearnsOnlyReadingsThatAreHealthy) {
  HealthTracker h(TestConfig(3));
  const auto baseline = [&] {
    return h.Baseline(Gpu0().uuid, TransferMode::kPinned, Direction::kH2D, kHealthSize);
  };
  h.Observe(PinnedCycle(24.0));
  h.Observe(PinnedCycle(24.0));
  // Below band from its first reading: never learned (the issue's [25.15, 25.22, 12.52...]).
  for (int i = 0; i < 5; ++i) h.Observe(PinnedCycle(12.5));
  EXPECT_NEAR(baseline(), 24.0e9, 0.1e9);
  // A confirmation round's reading, good or not, teaches nothing.
  HealthTracker g(TestConfig(3));
  CycleObservation confirm = PinnedCycle(24.0);
  confirm.confirmation = true;
  for (int i = 0; i < 4; ++i) g.Observe(confirm);
  EXPECT_EQ(g.Baseline(Gpu0().uuid, TransferMode::kPinned, Direction::kH2D, kHealthSize), 0);
  // A good reading right after bad ones (a streak broken) is not learned either: the series
  // is learned again once a reading finds it healthy.
  HealthTracker f(TestConfig(3));
  for (int i = 0; i < 3; ++i) f.Observe(PinnedCycle(24.0, 8.0));
  f.Observe(PinnedCycle(24.0, 3.0));  // pageable below its baseline: a bad streak of 1
  f.Observe(PinnedCycle(24.0, 7.9));  // breaks it: not learned
  f.Observe(PinnedCycle(24.0, 7.8));  // healthy again: learned
  const auto pageable = [&] {
    const std::vector<DeviceHealth> devices = f.Devices();
    for (const SeriesHealth& s : devices.front().series) {
      if (s.mode == TransferMode::kPageable) return s.baseline_cycles;
    }
    return -1;
  };
  EXPECT_EQ(pageable(), 4);
}

// A baseline judges from its second reading, so a drop in a GPU's first cycles is caught for
// the modes held to a baseline only (pageable here) and never learned.
TEST(Baseline, AFaultFromTheThirdCycleIsCaughtForABaselineOnlyMode) {
  HealthTracker h(TestConfig(3));
  auto pageable = [](double gbps) {
    return Cycle({Sample(TransferMode::kPageable, Direction::kH2D, gbps)});
  };
  h.Observe(pageable(8.0));
  h.Observe(pageable(8.1));
  DeviceHealth r;
  for (int i = 0; i < 6; ++i) r = h.Observe(pageable(4.0));
  EXPECT_TRUE(r.Degraded());
  EXPECT_NEAR(h.Baseline(Gpu0().uuid, TransferMode::kPageable, Direction::kH2D, kHealthSize),
              8.05e9, 0.06e9);
}

// From the first cycle, a GPU is held to its peers (the same model on the same link on
// this host) while its own baseline learns; a GPU alone has none, and such a fault in a mode
// held to a baseline only is not caught: the fleet peers' rule is what sees it.
TEST(Baseline, AFaultFromTheFirstCycleIsCaughtAgainstItsPeers) {
  HealthTracker h(TestConfig(3));
  probes::DeviceInfo gpu1 = Gpu0();
  gpu1.index = 1;
  gpu1.uuid = "GPU-1111-test";
  auto pageable = [](const probes::DeviceInfo& d, double gbps) {
    CycleObservation o = Cycle({Sample(TransferMode::kPageable, Direction::kH2D, gbps)});
    o.device = d;
    return o;
  };
  DeviceHealth faulty;
  for (int i = 0; i < 6; ++i) {
    h.Observe(pageable(Gpu0(), 8.0));
    faulty = h.Observe(pageable(gpu1, 4.0));
  }
  EXPECT_TRUE(faulty.Degraded());
  EXPECT_EQ(h.Baseline(gpu1.uuid, TransferMode::kPageable, Direction::kH2D, kHealthSize), 0)
      << "the fault was learned";
  ASSERT_NE(WorstDegraded(faulty), nullptr);
  EXPECT_NEAR(WorstDegraded(faulty)->peer_baseline_bytes_per_s, 8.0e9, 0.1e9);
  // Another model is no peer.
  HealthTracker other(TestConfig(3));
  probes::DeviceInfo stranger = gpu1;
  stranger.name = "Another GPU";
  for (int i = 0; i < 6; ++i) {
    other.Observe(pageable(Gpu0(), 8.0));
    faulty = other.Observe(pageable(stranger, 4.0));
  }
  EXPECT_FALSE(faulty.Degraded());
}

// A GPU in confidential-computing mode, or probed through MIG instances, is no peer of a
// plain GPU of the same model: its copies are bounce-buffered, or go through an instance's
// copy engines. A CC GPU reading a third of its plain peers is not "below its peers'
// baseline"; two CC GPUs are each other's peers.
TEST(Baseline, PeersAreGpusOfTheSameShape) {
  HealthTracker h(TestConfig(3));
  probes::DeviceInfo cc = Gpu0();
  cc.index = 1;
  cc.uuid = "GPU-cc-1";
  cc.cc.state = probes::CcState::kOn;
  probes::DeviceInfo cc2 = cc;
  cc2.index = 2;
  cc2.uuid = "GPU-cc-2";
  probes::DeviceInfo mig = Gpu0();
  mig.index = 3;
  mig.uuid = "GPU-mig-3";
  mig.mig.mode = probes::MigMode::kEnabled;
  mig.mig.whole_gpu_copy_engines = 7;
  mig.mig.instances.push_back({"MIG-a", 1, 0, "3g.71gb", 3, true});
  EXPECT_EQ(ReadingShape(Gpu0()), "");
  EXPECT_EQ(ReadingShape(cc), "cc");
  EXPECT_EQ(ReadingShape(mig), "mig-3ce");
  auto pinned = [](const probes::DeviceInfo& d, double gbps) {
    CycleObservation o = Cycle({Sample(TransferMode::kPinned, Direction::kH2D, gbps)});
    o.device = d;
    return o;
  };
  DeviceHealth r;
  for (int i = 0; i < 6; ++i) {
    h.Observe(pinned(Gpu0(), 25.0));
    r = h.Observe(pinned(cc, 8.0));
    EXPECT_FALSE(r.Degraded()) << "held to plain peers";
    EXPECT_FALSE(h.Observe(pinned(mig, 12.0)).Degraded()) << "held to plain peers";
  }
  // The CC GPU learned its own figure: a second CC GPU far under it is held to it.
  for (int i = 0; i < 4; ++i) r = h.Observe(pinned(cc2, 3.0));
  EXPECT_TRUE(r.Degraded());
  ASSERT_NE(WorstDegraded(r), nullptr);
  EXPECT_NEAR(WorstDegraded(r)->peer_baseline_bytes_per_s, 8.0e9, 0.1e9);
}

// A GPU that cannot be judged as it is: unknown, not stale, on its own STATUS line.
TEST(Summary, AGpuThatCannotBeJudgedHasItsOwnLine) {
  HealthTracker h(TestConfig(3));
  CycleObservation o = Cycle({});
  o.device.mig.mode = probes::MigMode::kEnabled;  // and no instance to probe through
  const DeviceHealth r = h.Observe(o);
  EXPECT_TRUE(r.Unknown());
  EXPECT_FALSE(r.Stale());
  EXPECT_EQ(h.Summary(), "UNKNOWN gpu0: MIG enabled, no GPU instance to probe through");
}

// A GPU whose shape changes (confidential computing turned on, other MIG instances) starts
// its baselines over: readings of the old shape never judge the new one, and what it learned
// is kept under its shape's key, for when that shape comes back.
TEST(Baseline, AShapeChangeStartsOverAndKeepsWhatEachShapeLearned) {
  HealthTracker h(TestConfig(3));
  for (int i = 0; i < 6; ++i) h.Observe(PinnedCycle(25.0));
  probes::DeviceInfo cc = Gpu0();
  cc.cc.state = probes::CcState::kOn;
  CycleObservation under_cc = PinnedCycle(8.0);
  under_cc.device = cc;
  DeviceHealth r;
  for (int i = 0; i < 6; ++i) r = h.Observe(under_cc);
  EXPECT_FALSE(r.Degraded()) << "held to what it read without CC";
  EXPECT_NEAR(h.Baseline(cc.uuid, TransferMode::kPinned, Direction::kH2D, kHealthSize), 8.0e9,
              0.1e9);
  const BaselineSet saved = h.Snapshot();
  const auto& keys = saved.at(cc.uuid);
  EXPECT_EQ(keys.count("pinned/h2d/" + probes::FormatSize(kHealthSize)), 1u);
  EXPECT_EQ(keys.count("pinned/h2d/" + probes::FormatSize(kHealthSize) + "@cc"), 1u);
  // Restarted without CC: the plain baseline judges again, and a plain reading at the CC
  // figure is a drop.
  HealthTracker again(TestConfig(3));
  again.Restore(saved);
  for (int i = 0; i < 3; ++i) r = again.Observe(PinnedCycle(8.0));
  EXPECT_TRUE(r.Degraded());
}

// ---- Current readings ---------------------------------------------------------------

// A DEGRADED verdict rests on a bad reading younger than FreshnessBounds::degraded_s: past
// it the series is ok again when it read well since, stale when nothing came since; any
// series past its own bound is stale, and so is a GPU whose headline is.
TEST(Freshness, ADegradedVerdictNeedsACurrentBadReading) {
  Settings c = TestConfig(3);
  HealthTracker h(c);
  const FreshnessBounds b = FreshnessOf(c);
  const SteadyTime t0 = SteadyTime{} + std::chrono::hours(1);
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<SteadyTime::duration>(std::chrono::duration<double>(s));
  };
  auto cycle = [&](double s, std::vector<probes::ProbeSample> samples) {
    CycleObservation o = Cycle(std::move(samples));
    o.at = at(s);
    return h.Observe(o);
  };
  const auto pinned = [](double gbps) {
    return std::vector{Sample(TransferMode::kPinned, Direction::kH2D, gbps),
                       Sample(TransferMode::kPinned, Direction::kBidirectional, 2 * gbps)};
  };
  for (int i = 0; i < 3; ++i) cycle(60.0 * i, pinned(24.0));
  for (int i = 3; i < 6; ++i) cycle(60.0 * i, pinned(12.0));
  ASSERT_TRUE(PinnedDegraded(h.Devices().front()));
  // The fault clears: pinned h2d reads well once, bidir is not measured again.
  const DeviceHealth once = cycle(400, {Sample(TransferMode::kPinned, Direction::kH2D, 24.0)});
  EXPECT_TRUE(PinnedDegraded(once)) << "one good reading of three";
  // Past the bound after the last bad reading (300 s): pinned h2d read well since, so it is
  // ok; bidir was not measured since, so it is stale, not DEGRADED.
  const auto expired = h.Expire(at(300 + b.degraded_s + 1));
  ASSERT_EQ(expired.size(), 1u);
  const DeviceHealth& d = expired.front();
  EXPECT_FALSE(d.Degraded());
  for (const SeriesHealth& s : d.series) {
    if (s.direction == Direction::kBidirectional) EXPECT_TRUE(s.stale);
    if (s.direction == Direction::kH2D) EXPECT_FALSE(s.stale);
  }
  EXPECT_FALSE(d.Stale()) << "its headline is current";
  // Nothing more for a while: the headline's reading passes its bound, the GPU is stale.
  EXPECT_EQ(h.NextExpiry(), at(400 + b.headline_s));
  const auto later = h.Expire(at(400 + b.headline_s));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_TRUE(later.front().Stale());
  EXPECT_EQ(h.Expire(at(400 + b.headline_s + 60)).size(), 0u) << "said once";
}

}  // namespace
}  // namespace xferd::core

namespace xferd::core {
namespace {

// What the link watch hands a cycle when the link flapped between probes.
LinkWatchState Flapping(bool low_only = false) {
  LinkWatchState w;
  w.watching = true;
  w.window_s = 600;
  w.window_transitions = low_only ? 1 : 6;
  w.window_reduced_s = low_only ? 90 : 12;
  w.flapping = true;
  w.low_only = low_only;
  w.last_seen = "0000:00:01.0-0000:01:00.0 Gen4 x8 -> Gen4 x16 (max Gen4 x16)";
  return w;
}

TEST(Diagnosis, AFlappingLinkIsAFaultOfItsOwnWhileEveryReadingIsGood) {
  HealthTracker h(TestConfig());
  CycleObservation obs = PinnedCycle(25.0);
  obs.link_watch = Flapping();
  const DeviceHealth r = h.Observe(obs);
  ASSERT_TRUE(r.Has(DiagnosisCause::kLinkFlapping));
  EXPECT_FALSE(PinnedDegraded(r));  // the readings are fine ...
  EXPECT_TRUE(r.Degraded());        // ... the GPU is not: its link flaps between probes
  // No series to show: the flapping link is what the verdict names.
  EXPECT_EQ(WorstDegraded(r), nullptr);
  EXPECT_EQ(LeadingCause(r), DiagnosisCause::kLinkFlapping);
  for (const Diagnosis& d : r.diagnoses) {
    if (d.cause != DiagnosisCause::kLinkFlapping) continue;
    EXPECT_EQ(d.detail,
              "6 transitions and 12 s below capability in the last 10 min; last "
              "0000:00:01.0-0000:01:00.0 Gen4 x8 -> Gen4 x16 (max Gen4 x16)");
    EXPECT_NE(d.advice.find("lspci -vv -s 0000:01:00.0"), std::string::npos) << d.advice;
  }
  EXPECT_EQ(h.Summary(),
            "DEGRADED gpu0 PCIe link; likely: link_flapping (6 transitions and 12 s below "
            "capability in the last 10 min; last 0000:00:01.0-0000:01:00.0 Gen4 x8 -> Gen4 x16 "
            "(max Gen4 x16))");
  // So does the incident log, with the cause and no series.
  IncidentLog log;
  EXPECT_EQ(log.Observe(r, false, 3, std::chrono::system_clock::now()), DeviceVerdict::kDegraded);
  ASSERT_EQ(log.Incidents().size(), 1u);
  EXPECT_TRUE(log.Incidents()[0].pairs.empty());
  EXPECT_EQ(log.Incidents()[0].causes.front().cause, "link_flapping");
  // Busy cycles too: a workload that keeps the GPU busy skips the probes, not the watch.
  CycleObservation busy = Cycle({});
  busy.busy = true;
  busy.link_watch = Flapping();
  EXPECT_TRUE(h.Observe(busy).Degraded());
  // Once the watch's window lets it go, the GPU is ok again.
  EXPECT_FALSE(h.Observe(PinnedCycle(25.0)).Degraded());
  EXPECT_EQ(h.Summary().rfind("ok: ", 0), 0u) << h.Summary();
}

// A degraded series and a link that flaps: the flapping link leads, before the reading it
// explains (below_band) and before errors on the same path.
TEST(CauseRanking, AFlappingLinkLeadsTheReadingItExplains) {
  HealthTracker h(TestConfig(1));
  CycleObservation obs = PinnedCycle(12.0);
  obs.link_watch = Flapping();
  const DeviceHealth r = h.Observe(obs);
  ASSERT_NE(WorstDegraded(r), nullptr);
  ASSERT_TRUE(r.Has(DiagnosisCause::kBelowBand));
  EXPECT_EQ(LeadingCause(r), DiagnosisCause::kLinkFlapping);
  EXPECT_EQ(r.diagnoses.front().cause, DiagnosisCause::kLinkFlapping);
  EXPECT_NE(h.Summary().find("; likely: link_flapping ("), std::string::npos) << h.Summary();
}

TEST(Diagnosis, ALinkThatStaysLowIsNamedOnceWhereTheProbeSawIt) {
  // The watch saw the link low for 90 s with one transition, and the probe's own reading of
  // the path shows it trained down: link_downtrained names it, not link_flapping too.
  HealthTracker h(TestConfig());
  CycleObservation obs =
      Cycle({Sample(TransferMode::kPinned, Direction::kH2D, 10.0)}, Gen4Path(4, 16, 4, 8));
  obs.link_watch = Flapping(/*low_only=*/true);
  const DeviceHealth r = h.Observe(obs);
  EXPECT_TRUE(r.Has(DiagnosisCause::kLinkDowntrained));
  EXPECT_FALSE(r.Has(DiagnosisCause::kLinkFlapping));
  // Where the probes read the link healthy (a workload keeps it low, probes skipped), the
  // watch's time below capability is the one witness.
  CycleObservation unseen = PinnedCycle(25.0);
  unseen.link_watch = Flapping(/*low_only=*/true);
  EXPECT_TRUE(h.Observe(unseen).Has(DiagnosisCause::kLinkFlapping));
}

}  // namespace
}  // namespace xferd::core
