// The simulated device: a seeded link model whose faults do what they say.
#include "xferd/probes/sim_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "xferd/probes/stats.h"
#include "xferd/probes/topology.h"

namespace xferd::probes {
namespace {

using namespace std::chrono_literals;

SimOptions Fast(std::uint64_t seed = 1) {
  SimOptions o;
  o.seed = seed;
  o.time_scale = 0;  // report simulated durations, never sleep them
  return o;
}

ProbeSpec Spec(TransferMode mode, Direction direction, std::uint64_t size = 64ull << 20,
               int iterations = 20) {
  ProbeSpec spec;
  spec.mode = mode;
  spec.direction = direction;
  spec.size_bytes = size;
  spec.iterations = iterations;
  return spec;
}

double MedianBw(SimBackend& sim, TransferMode mode, Direction direction, int device = 0) {
  const ProbeSample s = sim.Run(device, Spec(mode, direction));
  EXPECT_EQ(s.status, ProbeStatus::kOk) << s.message;
  return s.MedianBandwidth();
}

const double kSimGen4x16 = PcieBytesPerSecond(4, 16);

TEST(SimBackend, SameSeedSameCallsSameDurations) {
  SimBackend a(Fast(7)), b(Fast(7));
  for (const auto& [mode, direction] : AllModeDirections()) {
    const ProbeSample sa = a.Run(0, Spec(mode, direction));
    const ProbeSample sb = b.Run(0, Spec(mode, direction));
    ASSERT_EQ(sa.status, ProbeStatus::kOk);
    EXPECT_EQ(sa.durations_s, sb.durations_s) << ToString(mode) << " " << ToString(direction);
  }
}

TEST(SimBackend, DifferentSeedsDiffer) {
  SimBackend a(Fast(1)), b(Fast(2));
  const auto spec = Spec(TransferMode::kPinned, Direction::kH2D);
  EXPECT_NE(a.Run(0, spec).durations_s, b.Run(0, spec).durations_s);
  EXPECT_NE(a.Devices()[0].uuid, b.Devices()[0].uuid);
}

TEST(SimBackend, EachDeviceHasItsOwnRandomStream) {
  SimOptions o = Fast(3);
  o.devices = 2;
  SimBackend busy(o), quiet(o);
  const auto spec = Spec(TransferMode::kPinned, Direction::kD2H);
  busy.Run(0, spec);  // device 0's probes must not shift device 1's numbers
  busy.Run(0, spec);
  EXPECT_EQ(busy.Run(1, spec).durations_s, quiet.Run(1, spec).durations_s);
}

TEST(SimBackend, SaysItIsSimulated) {
  SimOptions o = Fast(5);
  o.devices = 3;
  SimBackend sim(o);
  const auto devices = sim.Devices();
  ASSERT_EQ(devices.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(devices[i].index, i);
    EXPECT_TRUE(devices[i].simulated);
    EXPECT_EQ(devices[i].driver_version, "sim");
    EXPECT_EQ(devices[i].name, "Simulated GPU (xferd sim)");
    EXPECT_EQ(devices[i].uuid.rfind("SIM-", 0), 0u) << devices[i].uuid;
    EXPECT_EQ(devices[i].pci_bus_id.size(), 12u) << devices[i].pci_bus_id;
  }
  EXPECT_NE(devices[0].uuid, devices[1].uuid);
  EXPECT_NE(devices[0].pci_bus_id, devices[1].pci_bus_id);
  EXPECT_EQ(SimBackend(o).Devices()[2].uuid, devices[2].uuid);  // stable per seed and index
  EXPECT_EQ(sim.Name(), "sim");
}

TEST(SimBackend, HostBuffersSitOnTheGpusNumaNode) {
  SimOptions o = Fast();
  o.devices = 2;
  SimBackend sim(o);
  for (int device = 0; device < 2; ++device) {
    const ProbeSample s = sim.Run(device, Spec(TransferMode::kPinned, Direction::kH2D));
    EXPECT_EQ(s.host_numa_node, sim.ReadLinkPath(device).numa_node);
  }
  EXPECT_NE(sim.ReadLinkPath(0).numa_node, sim.ReadLinkPath(1).numa_node);
}

TEST(SimBackend, ModesRankAsOnRealHardware) {
  SimBackend sim(Fast());
  const double pinned = MedianBw(sim, TransferMode::kPinned, Direction::kH2D);
  const double pageable = MedianBw(sim, TransferMode::kPageable, Direction::kH2D);
  const double managed = MedianBw(sim, TransferMode::kManaged, Direction::kH2D);
  const double prefetch = MedianBw(sim, TransferMode::kManagedPrefetch, Direction::kH2D);
  const double bidir = MedianBw(sim, TransferMode::kPinned, Direction::kBidirectional);
  // Pinned copies run at ~80% of a Gen4 x16 link: inside the seed's 20-26 GB/s.
  EXPECT_GT(pinned, 0.63 * kSimGen4x16);
  EXPECT_LT(pinned, 0.83 * kSimGen4x16);
  EXPECT_GT(pinned, 2 * pageable);
  EXPECT_GT(prefetch, 3 * managed);  // prefetching beats page faults
  EXPECT_GT(bidir, 1.6 * pinned);    // both ways at once: more bytes, not twice as many
  EXPECT_LT(bidir, 2.0 * pinned);
  // Pageable D2H and H2D stage differently.
  EXPECT_NE(MedianBw(sim, TransferMode::kPageable, Direction::kD2H), pageable);
}

TEST(SimBackend, SmallTransfersHitTheLatencyFloorAndHaveATail) {
  SimBackend sim(Fast());
  const ProbeSample s =
      sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D, 4096, /*iterations=*/5000));
  ASSERT_EQ(s.status, ProbeStatus::kOk);
  ASSERT_EQ(s.durations_s.size(), 5000u);
  const double p50 = Quantile(s.durations_s, 0.5);
  const double p999 = Quantile(s.durations_s, 0.999);
  EXPECT_GT(p50, 2e-6);  // a few microseconds even for 4 KiB
  EXPECT_LT(p50, 20e-6);
  EXPECT_GT(p999, 1.5 * p50);  // the tail a histogram must show
  EXPECT_LT(s.MedianBandwidth(), 0.1 * kSimGen4x16);
}

TEST(SimBackend, ReportsEveryTimedTransferAndTheDeviceTime) {
  SimBackend sim(Fast());
  ProbeSpec spec = Spec(TransferMode::kZeroCopy, Direction::kD2H, 1 << 20, 7);
  spec.warmup = 3;
  const ProbeSample s = sim.Run(0, spec);
  ASSERT_EQ(s.durations_s.size(), 7u);
  EXPECT_EQ(s.bytes_per_transfer, 1u << 20);
  double timed = 0;
  for (double d : s.durations_s) timed += d;
  EXPECT_GT(s.device_time_s, timed);  // warm-up transfers cost device time too
  EXPECT_FALSE(s.overlap_ratio.has_value());
}

TEST(SimBackend, PinnedAsyncModelsOverlap) {
  SimBackend sim(Fast());
  ProbeSpec spec = Spec(TransferMode::kPinnedAsync, Direction::kH2D);
  spec.streams = 4;
  const ProbeSample four = sim.Run(0, spec);
  spec.streams = 1;
  const ProbeSample one = sim.Run(0, spec);
  ASSERT_TRUE(four.overlap_ratio && one.overlap_ratio);
  EXPECT_GT(*four.overlap_ratio, 0.5);
  EXPECT_LE(*four.overlap_ratio, 1.0);
  EXPECT_EQ(*one.overlap_ratio, 0.0);  // one stream serialises copy and compute
  spec.chunk_bytes = 4096;             // below the 256 KiB the design asks for
  EXPECT_EQ(sim.Run(0, spec).status, ProbeStatus::kError);
}

// Pinned h2d bandwidth with `fault` over the same without it.
double FaultedOverHealthy(const SimFault& fault) {
  SimBackend healthy(Fast()), faulted(Fast());
  faulted.SetFaults({fault});
  return MedianBw(faulted, TransferMode::kPinned, Direction::kH2D) /
         MedianBw(healthy, TransferMode::kPinned, Direction::kH2D);
}

TEST(SimBackend, DegradeScalesBandwidth) {
  EXPECT_NEAR(FaultedOverHealthy({.kind = SimFault::Kind::kDegrade, .factor = 0.5}), 0.5, 0.03);
}

TEST(SimBackend, RemoteNumaPutsTheBuffersOnTheFarNodeAndCostsEveryMode) {
  SimOptions o = Fast();
  o.devices = 2;  // one GPU on node 0, one on node 1
  o.faults = {{.kind = SimFault::Kind::kRemoteNuma, .factor = 0.7}};
  SimBackend sim(o), healthy(Fast());
  for (int device = 0; device < 2; ++device) {
    const ProbeSample s = sim.Run(device, Spec(TransferMode::kPinned, Direction::kH2D));
    EXPECT_GE(s.host_numa_node, 0);
    EXPECT_NE(s.host_numa_node, sim.ReadLinkPath(device).numa_node);
  }
  for (TransferMode mode : {TransferMode::kPinned, TransferMode::kPageable}) {
    EXPECT_NEAR(MedianBw(sim, mode, Direction::kH2D) / MedianBw(healthy, mode, Direction::kH2D),
                0.7, 0.03)
        << ToString(mode);
  }
}

TEST(SimBackend, SlowStagingCostsPageableOnly) {
  SimOptions o = Fast();
  o.faults = {{.kind = SimFault::Kind::kSlowStaging, .factor = 0.25}};
  SimBackend sim(o), healthy(Fast());
  EXPECT_NEAR(MedianBw(sim, TransferMode::kPageable, Direction::kH2D) /
                  MedianBw(healthy, TransferMode::kPageable, Direction::kH2D),
              0.25, 0.02);
  EXPECT_NEAR(MedianBw(sim, TransferMode::kPinned, Direction::kH2D) /
                  MedianBw(healthy, TransferMode::kPinned, Direction::kH2D),
              1.0, 0.02);
  // Past the 10x the diagnosis names (pinned_pageable_ratio), from the usual 2-4x.
  EXPECT_GT(MedianBw(sim, TransferMode::kPinned, Direction::kH2D) /
                MedianBw(sim, TransferMode::kPageable, Direction::kH2D),
            10.0);
  EXPECT_EQ(sim.Run(0, Spec(TransferMode::kPageable, Direction::kH2D)).host_numa_node,
            sim.ReadLinkPath(0).numa_node);
}

TEST(SimBackend, FaultsCanTargetOneDevice) {
  SimOptions o = Fast();
  o.devices = 2;
  o.faults = {{.kind = SimFault::Kind::kLost, .device = 1}};
  SimBackend sim(o);
  EXPECT_EQ(sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D)).status, ProbeStatus::kOk);
  EXPECT_EQ(sim.Run(1, Spec(TransferMode::kPinned, Direction::kH2D)).status, ProbeStatus::kError);
}

TEST(SimBackend, DowntrainedLinkShowsInThePathAndTheBandwidth) {
  SimBackend healthy(Fast()), downtrained(Fast());
  downtrained.SetFaults({{.kind = SimFault::Kind::kDownTrain, .gen = 4, .width = 8}});

  const LinkPath good = healthy.ReadLinkPath(0);
  ASSERT_FALSE(good.links.empty());
  EXPECT_FALSE(good.links[0].Downtrained());

  const LinkPath path = downtrained.ReadLinkPath(0);
  ASSERT_FALSE(path.links.empty());
  EXPECT_TRUE(path.links[0].Downtrained());
  EXPECT_EQ(path.links[0].current_width, 8);
  EXPECT_EQ(path.links[0].max_width, 16);
  EXPECT_EQ(path.Narrowest(), &path.links[0]);
  EXPECT_NEAR(path.Narrowest()->CurrentBytesPerSecond(),
              good.Narrowest()->CurrentBytesPerSecond() / 2, 1e6);

  const double ratio = MedianBw(downtrained, TransferMode::kPinned, Direction::kH2D) /
                       MedianBw(healthy, TransferMode::kPinned, Direction::kH2D);
  EXPECT_NEAR(ratio, 0.5, 0.03);
}

TEST(SimBackend, ErrorEveryNthProbe) {
  SimBackend sim(Fast());
  sim.SetFaults({{.kind = SimFault::Kind::kErrorEvery, .every = 3}});
  std::vector<ProbeStatus> statuses;
  for (int i = 0; i < 6; ++i) {
    const ProbeSample s = sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D));
    statuses.push_back(s.status);
    if (s.status == ProbeStatus::kError) {
      EXPECT_NE(s.message.find("simulated error"), std::string::npos) << s.message;
      EXPECT_TRUE(s.durations_s.empty());
    }
  }
  EXPECT_EQ(statuses,
            (std::vector<ProbeStatus>{ProbeStatus::kOk, ProbeStatus::kOk, ProbeStatus::kError,
                                      ProbeStatus::kOk, ProbeStatus::kOk, ProbeStatus::kError}));
}

TEST(SimBackend, HangBlocksUntilStopIsRequested) {
  SimBackend sim(Fast());
  sim.SetFaults({{.kind = SimFault::Kind::kHang}});
  std::stop_source stop;
  auto result = std::async(std::launch::async, [&] {
    return sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D), stop.get_token());
  });
  EXPECT_EQ(result.wait_for(100ms), std::future_status::timeout);  // still hung
  stop.request_stop();
  ASSERT_EQ(result.wait_for(30s), std::future_status::ready);
  const ProbeSample s = result.get();
  EXPECT_EQ(s.status, ProbeStatus::kError);
  EXPECT_EQ(s.message, "cancelled");
}

TEST(SimBackend, SlowStretchesDurationsAndMissesDeadlines) {
  EXPECT_NEAR(FaultedOverHealthy({.kind = SimFault::Kind::kSlow, .factor = 4}), 0.25, 0.0125);
  SimBackend slow(Fast());
  slow.SetFaults({{.kind = SimFault::Kind::kSlow, .factor = 4}});

  // 22 transfers of 64 MiB at a quarter of ~25 GB/s take ~0.2 s: past a 50 ms deadline.
  ProbeSpec spec = Spec(TransferMode::kPinned, Direction::kH2D);
  spec.deadline = 50ms;
  const ProbeSample s = slow.Run(0, spec);
  EXPECT_EQ(s.status, ProbeStatus::kTimeout);
  EXPECT_NE(s.message.find("deadline"), std::string::npos) << s.message;
  EXPECT_TRUE(s.durations_s.empty());
  EXPECT_DOUBLE_EQ(s.device_time_s, 0.05);
}

TEST(SimBackend, LostDeviceFailsEveryProbe) {
  SimBackend sim(Fast());
  sim.SetFaults({{.kind = SimFault::Kind::kLost}});
  for (const auto& [mode, direction] : AllModeDirections()) {
    const ProbeSample s = sim.Run(0, Spec(mode, direction));
    EXPECT_EQ(s.status, ProbeStatus::kError);
    EXPECT_EQ(s.message, "device lost (simulated fault)");
  }
  sim.SetFaults({});  // cleared by a reload
  EXPECT_EQ(sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D)).status, ProbeStatus::kOk);
}

TEST(SimBackend, TimeScaleZeroReturnsAtOnce) {
  SimBackend sim(Fast());
  const auto start = std::chrono::steady_clock::now();
  // ~280 s of simulated page-fault migration.
  const ProbeSample s = [&] {
    ProbeSpec spec = Spec(TransferMode::kManaged, Direction::kH2D, 1ull << 30, 1000);
    spec.deadline = std::chrono::hours(1);
    return sim.Run(0, spec);
  }();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(s.status, ProbeStatus::kOk) << s.message;
  EXPECT_GT(s.device_time_s, 100.0);
  EXPECT_LT(wall, 60.0);
}

TEST(SimBackend, TimeScaleOneTakesTheSimulatedTimeAndStopsWhenAsked) {
  SimOptions o = Fast();
  o.time_scale = 1;
  SimBackend sim(o);
  const auto start = std::chrono::steady_clock::now();
  const ProbeSample s = sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D, 16 << 20, 10));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(s.status, ProbeStatus::kOk);
  EXPECT_GE(wall, 0.95 * s.device_time_s);

  // A minutes-long simulated probe gives up when stopped.
  std::stop_source stop;
  auto result = std::async(std::launch::async, [&] {
    ProbeSpec spec = Spec(TransferMode::kManaged, Direction::kH2D, 1ull << 30, 1000);
    spec.deadline = std::chrono::hours(1);
    return sim.Run(0, spec, stop.get_token());
  });
  std::this_thread::sleep_for(20ms);
  stop.request_stop();
  ASSERT_EQ(result.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(result.get().message, "cancelled");
}

TEST(SimBackend, UnsupportedModesAreSkippedWithTheReason) {
  SimOptions o = Fast();
  o.unsupported = {{TransferMode::kManaged, "no concurrentManagedAccess"}};
  SimBackend sim(o);
  EXPECT_FALSE(sim.GetCapabilities(0).Supports(TransferMode::kManaged));
  EXPECT_TRUE(sim.GetCapabilities(0).Supports(TransferMode::kPinned));
  const ProbeSample s = sim.Run(0, Spec(TransferMode::kManaged, Direction::kH2D));
  EXPECT_EQ(s.status, ProbeStatus::kUnsupported);
  EXPECT_EQ(s.message, "no concurrentManagedAccess");
}

TEST(SimBackend, IntegratedDeviceHasNoPcieLinkButRunsEveryMode) {
  SimOptions o = Fast();
  o.integrated = true;
  SimBackend sim(o);
  const DeviceInfo info = sim.Devices().at(0);
  EXPECT_TRUE(info.integrated);
  EXPECT_TRUE(info.pci_bus_id.empty());
  EXPECT_FALSE(sim.ReadLinkPath(0).pcie);
  EXPECT_TRUE(sim.GetCapabilities(0).unsupported.empty());
  for (const auto& [mode, direction] : AllModeDirections()) {
    EXPECT_EQ(sim.Run(0, Spec(mode, direction)).status, ProbeStatus::kOk);
  }
}

TEST(SimBackend, BadRequestsAreErrorsNotCrashes) {
  SimBackend sim(Fast());
  EXPECT_EQ(sim.Run(5, Spec(TransferMode::kPinned, Direction::kH2D)).status, ProbeStatus::kError);
  EXPECT_EQ(sim.Run(-1, Spec(TransferMode::kPinned, Direction::kH2D)).status, ProbeStatus::kError);
  EXPECT_EQ(sim.Run(0, Spec(TransferMode::kPageable, Direction::kBidirectional)).status,
            ProbeStatus::kError);
  EXPECT_EQ(sim.Run(0, Spec(TransferMode::kPinned, Direction::kH2D, 0)).status,
            ProbeStatus::kError);
  EXPECT_FALSE(sim.ReadLinkPath(9).note.empty());
}

TEST(SimBackend, FaultsCanChangeWhileDevicesProbe) {
  SimOptions o = Fast();
  o.devices = 2;
  SimBackend sim(o);
  std::atomic<bool> done{false};
  std::thread reloader([&] {
    for (int i = 0; !done; ++i) {
      sim.SetFaults(i % 2 ? std::vector<SimFault>{{.kind = SimFault::Kind::kDegrade, .factor = 0.5}}
                          : std::vector<SimFault>{});
      std::this_thread::yield();
    }
  });
  auto probe = [&](int device) {
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(sim.Run(device, Spec(TransferMode::kPinned, Direction::kH2D, 4096, 5)).status,
                ProbeStatus::kOk);
      sim.ReadLinkPath(device);
    }
  };
  std::thread a(probe, 0), b(probe, 1);
  a.join();
  b.join();
  done = true;
  reloader.join();
}

TEST(SimFaultKind, NamesRoundTrip) {
  for (auto kind :
       {SimFault::Kind::kDegrade, SimFault::Kind::kDownTrain, SimFault::Kind::kErrorEvery,
        SimFault::Kind::kHang, SimFault::Kind::kSlow, SimFault::Kind::kLost}) {
    EXPECT_EQ(ParseSimFaultKind(ToString(kind)), kind);
  }
  EXPECT_EQ(ToString(SimFault::Kind::kDownTrain), "downtrain");
  EXPECT_FALSE(ParseSimFaultKind("melt").has_value());
}

}  // namespace
}  // namespace xferd::probes
