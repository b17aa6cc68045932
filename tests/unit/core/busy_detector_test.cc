#include "core/busy_detector.h"

#include <gtest/gtest.h>

namespace xferd::core {

namespace {

TEST(BusyJudge, UtilizationOrPcieAtTheThresholdIsBusy) {
  const BusyThresholds t{50, 2e9};
  EXPECT_FALSE(Judge(49, 1.9e9, t).busy);
  auto by_util = Judge(50, 0, t);
  EXPECT_TRUE(by_util.busy);
  EXPECT_NE(by_util.reason.find("utilization 50%"), std::string::npos) << by_util.reason;
  auto by_pcie = Judge(0, 3e9, t);
  EXPECT_TRUE(by_pcie.busy);
  EXPECT_NE(by_pcie.reason.find("PCIe"), std::string::npos) << by_pcie.reason;
}

TEST(NvmlBusyDetector, MissingLibraryMeansNoDetectionAndSaysWhy) {
  auto d = MakeBusyDetector(probes::MakeNvmlGpuLoadReader("libxferd-no-such-nvml.so.1"),
                            BusyThresholds{});
  probes::DeviceInfo dev;
  dev.pci_bus_id = "0000:01:00.0";
  EXPECT_FALSE(d->Check(dev));
  EXPECT_NE(d->Describe().find("none"), std::string::npos) << d->Describe();
  EXPECT_NE(d->Describe().find("libxferd-no-such-nvml.so.1"), std::string::npos);
}

TEST(SimBusyDetector, JudgesTheSimulatedLoadForSimulatedDevicesOnly) {
  auto busy = MakeBusyDetector(probes::MakeSimGpuLoadReader(90, 0), BusyThresholds{50, 2e9});
  probes::DeviceInfo sim;
  sim.simulated = true;
  ASSERT_TRUE(busy->Check(sim));
  EXPECT_TRUE(busy->Check(sim)->busy);
  probes::DeviceInfo real;
  EXPECT_FALSE(busy->Check(real));
  auto idle = MakeBusyDetector(probes::MakeSimGpuLoadReader(0, 0), BusyThresholds{50, 2e9});
  EXPECT_FALSE(idle->Check(sim)->busy);
}

}  // namespace
}  // namespace xferd::core
