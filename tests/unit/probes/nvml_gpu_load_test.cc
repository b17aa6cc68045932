// The arithmetic of NVML's link-traffic windows, against a fake NVML: counter deltas across
// a wrap, a window too short for the driver to refresh its counters, N/A values, counters
// that jump or stay at 0 while the probe moved data. A window that cannot be read is no
// reading: the probe's contention is then unknown, never clear (an idle link).
#include <gtest/gtest.h>

#include "core/contention.h"
#include "testing/fakes.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {
namespace {

constexpr const char* kBus = "0000:01:00.0";

DeviceInfo Gpu() {
  DeviceInfo d;
  d.index = 0;
  d.uuid = "GPU-0";
  d.pci_bus_id = kBus;
  return d;
}

// NVML with one GPU whose 64-bit counters move `rx_step`/`tx_step` bytes and 10 ms between
// readings.
std::shared_ptr<fakes::FakeNvml> Nvml(std::uint64_t rx_step, std::uint64_t tx_step,
                                      std::uint64_t rx_start = 1000) {
  auto nvml = std::make_shared<fakes::FakeNvml>();
  nvml->Set(kBus, [&](fakes::FakeNvml::Gpu& g) {
    g.uuid = "GPU-0";
    g.counters.rx.is_64_bit = g.counters.tx.is_64_bit = true;
    g.counters.rx.value = rx_start;
    g.counters.tx.value = 5000;
    g.counters.rx.timestamp_us = 1'000'000;
    g.counters.rx_step = rx_step;
    g.counters.tx_step = tx_step;
    g.counters.timestamp_step_us = 10'000;
  });
  return nvml;
}

std::optional<LinkTraffic> Window(GpuLoadReader& reader) {
  reader.BeginWindow(Gpu());
  return reader.EndWindow(Gpu());
}

// A pinned 64 MiB h2d probe of 22 transfers that ran in the window, judged.
Contention Judge(const std::optional<LinkTraffic>& traffic) {
  ProbeSample s;
  s.status = ProbeStatus::kOk;
  s.spec.size_bytes = 64ull << 20;
  s.bytes_per_transfer = s.spec.size_bytes;
  s.durations_s = {0.001};
  s.link_h2d_bytes = 22 * s.spec.size_bytes;
  s.traffic = traffic;
  return core::JudgeContention(s, {2e9});
}

TEST(NvmlWindows, CountersGiveTheBytesOverTheDriversSpan) {
  const auto nvml = Nvml(1'500'000'000, 100'000'000);
  const auto reader = MakeNvmlGpuLoadReader(nvml);
  EXPECT_EQ(reader->Describe(), "NVML (driver 580.00-fake)");
  const auto t = Window(*reader);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source, "nvml counters");
  EXPECT_DOUBLE_EQ(t->window_s, 0.010);  // the driver's timestamps, not the wall clock
  EXPECT_DOUBLE_EQ(t->rx_bytes, 1.5e9);
  EXPECT_DOUBLE_EQ(t->tx_bytes, 1e8);
  EXPECT_DOUBLE_EQ(t->after_s, 0.010);
  EXPECT_DOUBLE_EQ(t->after_rx_bytes, 1.5e9);
  EXPECT_EQ(Judge(t).state, ContentionState::kContended);  // 150 GB/s: far more than its own
}

TEST(NvmlWindows, AWrapOfThe64BitCounterIsExact) {
  const std::uint64_t near_end = ~std::uint64_t{0} - 400'000'000;  // wraps within the window
  const auto nvml = Nvml(1'500'000'000, 100'000'000, near_end);
  const auto t = Window(*MakeNvmlGpuLoadReader(nvml));
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(t->rx_bytes, 1.5e9);
}

TEST(NvmlWindows, ACounterThatJumpsOrGoesBackIsNoReading) {
  const auto nvml = Nvml(1'500'000'000, 100'000'000);
  const auto reader = MakeNvmlGpuLoadReader(nvml);
  reader->BeginWindow(Gpu());
  // The driver reset its counter between the readings: modulo 2^64 that reads as exabytes.
  nvml->Set(kBus, [](auto& g) { g.counters.rx.value = 10; });
  const auto t = reader->EndWindow(Gpu());
  EXPECT_FALSE(t);
  EXPECT_EQ(Judge(t).state, ContentionState::kUnknown);
}

TEST(NvmlWindows, AWindowTooShortForTheDriverToRefreshIsNoReading) {
  const auto nvml = Nvml(0, 0);
  nvml->Set(kBus, [](auto& g) { g.counters.timestamp_step_us = 0; });  // the same values again
  const auto t = Window(*MakeNvmlGpuLoadReader(nvml));
  EXPECT_FALSE(t);
  EXPECT_EQ(Judge(t).state, ContentionState::kUnknown);
}

TEST(NvmlWindows, CountersStuckAtZeroWhileTheProbeMovedDataAreNotReadableNeverIdle) {
  // dcgm-exporter users report the PCIe byte counters at 0 on L40S: the driver refreshes
  // them (the timestamps move), but they never count.
  const auto nvml = Nvml(0, 0, 0);
  nvml->Set(kBus, [](auto& g) { g.counters.tx.value = 0; });
  const auto reader = MakeNvmlGpuLoadReader(nvml);
  for (int probe = 0; probe < 3; ++probe) {
    const auto t = Window(*reader);
    EXPECT_FALSE(t) << "a stuck counter read as " << t->rx_bytes << " B: an idle link";
    const Contention c = Judge(t);
    EXPECT_EQ(c.state, ContentionState::kUnknown);
    EXPECT_NE(c.state, ContentionState::kClear);
  }
}

TEST(NvmlWindows, OneDirectionStuckMissesTheProbesOwnBytes) {
  // rx (host to device) never moves, tx does: an h2d probe's 1.4 GB are not in the window.
  const auto nvml = Nvml(0, 20'000'000);
  const auto t = Window(*MakeNvmlGpuLoadReader(nvml));
  ASSERT_TRUE(t);
  const Contention c = Judge(t);
  EXPECT_EQ(c.state, ContentionState::kUnknown);
  EXPECT_NE(c.reason.find("missed the probe's own bytes"), std::string::npos) << c.reason;
}

TEST(NvmlWindows, NotAvailableCountersFallBackToThroughputSamples) {
  const auto nvml = Nvml(1, 1);
  nvml->Set(kBus, [](auto& g) {
    g.counters.rx.status = kNvmlErrorNotSupported;  // N/A
    g.rx_kib_per_s = 2'000'000;                     // ~2 GB/s
    g.tx_kib_per_s = 100'000;
  });
  const auto reader = MakeNvmlGpuLoadReader(nvml);
  const auto t = Window(*reader);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->source, "nvml throughput");
  EXPECT_TRUE(t->sampled_rates);
  EXPECT_NEAR(t->rx_bytes / t->window_s, 2'000'000 * 1024.0, 1);
  // Throughput that reads 0 while the probe moved data is not an idle link either.
  nvml->Set(kBus, [](auto& g) { g.rx_kib_per_s = g.tx_kib_per_s = 0; });
  EXPECT_FALSE(Window(*reader));
  // Nor one NVML cannot sample (N/A).
  nvml->Set(kBus, [](auto& g) { g.throughput_rc = kNvmlErrorNotSupported; });
  EXPECT_FALSE(Window(*reader));
}

TEST(NvmlLoad, TheBusyReadingOrNothingWhenAValueIsNotAvailable) {
  const auto nvml = Nvml(1, 1);
  nvml->Set(kBus, [](auto& g) {
    g.utilization = 93;
    g.rx_kib_per_s = 1000;
    g.tx_kib_per_s = 1000;
  });
  const auto reader = MakeNvmlGpuLoadReader(nvml);
  const auto load = reader->Read(Gpu());
  ASSERT_TRUE(load);
  EXPECT_EQ(load->utilization_percent, 93);
  EXPECT_DOUBLE_EQ(load->pcie_bytes_per_s, 2000 * 1024.0);
  nvml->Set(kBus, [](auto& g) { g.utilization_rc = kNvmlErrorNotSupported; });
  EXPECT_FALSE(reader->Read(Gpu()));
  // A MIG-enabled GPU has no utilization: busy is judged by its PCIe throughput alone.
  DeviceInfo mig = Gpu();
  mig.mig.mode = MigMode::kEnabled;
  const auto mig_load = reader->Read(mig);
  ASSERT_TRUE(mig_load);
  EXPECT_EQ(mig_load->utilization_percent, 0);
  EXPECT_DOUBLE_EQ(mig_load->pcie_bytes_per_s, 2000 * 1024.0);
}

TEST(NvmlLoad, UtilizationRightAfterTheProbeFromTheDriversSamples) {
  const auto nvml = Nvml(1'500'000'000, 100'000'000);
  const auto now_us =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  nvml->Set(kBus, [&](auto& g) {
    g.samples = {{now_us - 5'000'000, 10}, {now_us + 60'000'000, 80}, {now_us + 61'000'000, 90}};
  });
  const auto t = Window(*MakeNvmlGpuLoadReader(nvml));
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->after_utilization_percent);
  EXPECT_DOUBLE_EQ(*t->after_utilization_percent, 85);  // the samples after it only
}

TEST(NvmlLoad, WithoutNvmlNothingIsReadAndItSaysWhy) {
  auto nvml = std::make_shared<fakes::FakeNvml>();
  nvml->unavailable =
      "libnvidia-ml.so.1 not loadable (no such file); is the NVIDIA driver "
      "installed?";
  const auto reader = MakeNvmlGpuLoadReader(nvml);
  EXPECT_EQ(reader->Describe().rfind("none: libnvidia-ml.so.1 not loadable", 0), 0u);
  EXPECT_FALSE(reader->Read(Gpu()));
  EXPECT_FALSE(Window(*reader));
  // A GPU NVML does not know: the same, for that GPU.
  const auto known = Nvml(1, 1);
  DeviceInfo stranger = Gpu();
  stranger.pci_bus_id = "0000:99:00.0";
  stranger.uuid = "GPU-99";
  const auto other = MakeNvmlGpuLoadReader(known);
  EXPECT_FALSE(other->Read(stranger));
  other->BeginWindow(stranger);
  EXPECT_FALSE(other->EndWindow(stranger));
}

}  // namespace
}  // namespace xferd::probes
