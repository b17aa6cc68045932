// Confidential computing and MIG as read through NvmlApi (the fake): what counts as CC on,
// what an unreadable driver gives, and how MIG devices become instances with a profile and
// copy engines.
#include <gtest/gtest.h>

#include "testing/fakes.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {
namespace {

constexpr const char* kShapeBus = "0000:3b:00.0";

// What ReadConfidentialComputing makes of `settings` from a driver that answers the
// settings call (R535 on).
ConfidentialComputing FromSettings(fakes::FakeNvml& nvml, NvmlConfComputeState settings) {
  nvml.cc = settings;
  nvml.cc_settings_rc = kNvmlSuccess;
  return ReadConfidentialComputing(nvml);
}

TEST(ReadConfidentialComputing, FeatureEnabledIsOnAndReadyStateIsRead) {
  fakes::FakeNvml nvml;
  nvml.cc_ready_rc = kNvmlSuccess;
  nvml.cc_ready = 0;
  const ConfidentialComputing cc = FromSettings(nvml, {2, kNvmlCcFeatureEnabled, 0, 0});
  EXPECT_EQ(cc.state, CcState::kOn);
  ASSERT_TRUE(cc.gpus_ready.has_value());
  EXPECT_FALSE(*cc.gpus_ready);
  EXPECT_TRUE(cc.NotReady());
  EXPECT_EQ(cc.detail, "production");
  nvml.cc_ready = 1;
  EXPECT_FALSE(ReadConfidentialComputing(nvml).NotReady());
}

TEST(ReadConfidentialComputing, ProtectedPcieIsOnEvenWithTheFeatureFieldZero) {
  fakes::FakeNvml nvml;
  const ConfidentialComputing cc = FromSettings(nvml, {2, 0, 0, kNvmlCcMultiGpuProtectedPcie});
  EXPECT_EQ(cc.state, CcState::kOn);
  EXPECT_EQ(cc.detail, "production, protected PCIe, ready state not readable: fake NVML error 13");
  EXPECT_FALSE(cc.gpus_ready.has_value());
  EXPECT_FALSE(cc.NotReady());  // not read is not "not ready"
}

TEST(ReadConfidentialComputing, NvleAloneIsNotCc) {
  fakes::FakeNvml nvml;
  const ConfidentialComputing cc = FromSettings(nvml, {2, 0, 0, kNvmlCcMultiGpuNvle});
  EXPECT_EQ(cc.state, CcState::kOff);
  EXPECT_EQ(cc.detail, "production, NVLE");
}

TEST(ReadConfidentialComputing, OlderDriversAnswerTheStateCall) {
  fakes::FakeNvml nvml;
  nvml.cc = {2, kNvmlCcFeatureEnabled, 0, {}};
  nvml.cc_state_rc = kNvmlSuccess;  // no settings call
  EXPECT_EQ(ReadConfidentialComputing(nvml).state, CcState::kOn);
  nvml.cc.cc_feature = 0;
  EXPECT_EQ(ReadConfidentialComputing(nvml).state, CcState::kOff);
}

TEST(ReadConfidentialComputing, NeitherCallIsUnknownWithTheReason) {
  fakes::FakeNvml nvml;
  const ConfidentialComputing cc = ReadConfidentialComputing(nvml);
  EXPECT_EQ(cc.state, CcState::kUnknown);
  EXPECT_NE(cc.problem.find("nvmlSystemGetConfComputeSettings"), std::string::npos);
  nvml.unavailable = "libnvidia-ml.so.1 not loadable";
  EXPECT_EQ(ReadConfidentialComputing(nvml).problem,
            "NVML not usable: libnvidia-ml.so.1 not loadable");
}

// MIG on, with profiles shaped like a 141 GB Hopper GPU's (ids and counts made up for the
// test).
void MigOnWithH200Profiles(fakes::FakeNvml::Gpu& gpu) {
  gpu.mig_rc = kNvmlSuccess;
  gpu.mig_current = kNvmlMigEnabled;
  gpu.profiles = {{19, 1, 1, 16384, "MIG 1g.18gb"},
                  {9, 3, 3, 72704, "MIG 3g.71gb"},
                  {0, 7, 8, 143360, "MIG 7g.141gb"}};
}

// ReadMig of the GPU at kShapeBus, as the fake has it.
MigState ReadMigAtShapeBus(fakes::FakeNvml& nvml) {
  NvmlDevice device = nullptr;
  EXPECT_EQ(nvml.DeviceByPciBusId(kShapeBus, &device), kNvmlSuccess);
  return ReadMig(nvml, device);
}

TEST(ReadMig, AGpuWithoutMigIsDisabled) {
  fakes::FakeNvml nvml;
  nvml.Set(kShapeBus, [](auto&) {});
  const MigState mig = ReadMigAtShapeBus(nvml);
  EXPECT_EQ(mig.mode, MigMode::kDisabled);
  EXPECT_TRUE(mig.problem.empty());
}

TEST(ReadMig, InstancesWithProfileAndCopyEngines) {
  fakes::FakeNvml nvml;
  nvml.Set(kShapeBus, [](fakes::FakeNvml::Gpu& gpu) {
    MigOnWithH200Profiles(gpu);
    gpu.mig_devices = {{"MIG-bbbb", 2, 0, 9}, {"MIG-aaaa", 1, 0, 9}, {"MIG-cccc", 9, 0, 19}};
  });
  const MigState mig = ReadMigAtShapeBus(nvml);
  EXPECT_EQ(mig.mode, MigMode::kEnabled);
  EXPECT_EQ(mig.whole_gpu_copy_engines, 8);
  ASSERT_EQ(mig.instances.size(), 3u);
  EXPECT_EQ(mig.instances[0].uuid, "MIG-aaaa");  // by GPU instance id
  EXPECT_EQ(mig.instances[0].gpu_instance_id, 1);
  EXPECT_EQ(mig.instances[0].profile, "3g.71gb");
  EXPECT_EQ(mig.instances[0].copy_engines, 3);
  EXPECT_EQ(mig.instances[2].profile, "1g.18gb");
  EXPECT_EQ(mig.instances[2].copy_engines, 1);
  EXPECT_TRUE(mig.problem.empty()) << mig.problem;
  // The link goes through the instances with the most copy engines.
  EXPECT_EQ(LinkInstances(mig), (std::vector<std::size_t>{0, 1}));
}

TEST(ReadMig, EnabledWithNoInstanceHasNothingToProbeThrough) {
  fakes::FakeNvml nvml;
  nvml.Set(kShapeBus, [](fakes::FakeNvml::Gpu& gpu) { MigOnWithH200Profiles(gpu); });
  const MigState mig = ReadMigAtShapeBus(nvml);
  EXPECT_TRUE(mig.Enabled());
  EXPECT_TRUE(mig.instances.empty());
  EXPECT_EQ(UnjudgeableReason({}, mig), "MIG enabled, no GPU instance to probe through");
}

TEST(ReadMig, AModeThatCannotBeReadIsUnknown) {
  fakes::FakeNvml nvml;
  nvml.Set(kShapeBus, [](fakes::FakeNvml::Gpu& gpu) { gpu.mig_rc = kNvmlErrorUnknown; });
  const MigState mig = ReadMigAtShapeBus(nvml);
  EXPECT_EQ(mig.mode, MigMode::kUnknown);
  EXPECT_EQ(mig.problem, "nvmlDeviceGetMigMode: fake NVML error 999");
}

TEST(ReadMig, AProfileWithoutANameIsNamedFromItsSlicesAndMemory) {
  fakes::FakeNvml nvml;
  nvml.Set(kShapeBus, [](fakes::FakeNvml::Gpu& gpu) {
    gpu.mig_rc = kNvmlSuccess;
    gpu.mig_current = kNvmlMigEnabled;
    gpu.profiles = {{9, 3, 3, 72704, ""}};  // the v1 call: no name
    gpu.mig_devices = {{"MIG-aaaa", 1, 0, 9}};
  });
  EXPECT_EQ(ReadMigAtShapeBus(nvml).instances.at(0).profile, "3g.71gb");
}

TEST(ListNvmlGpus, BusIdsInSysfsForm) {
  fakes::FakeNvml nvml;
  nvml.Set(kShapeBus, [](fakes::FakeNvml::Gpu& gpu) { gpu.uuid = "GPU-1"; });
  const std::vector<NvmlGpu> gpus = ListNvmlGpus(nvml);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].pci_bus_id, kShapeBus);
  EXPECT_EQ(gpus[0].uuid, "GPU-1");
  EXPECT_EQ(gpus[0].name, "NVIDIA H200");
}

// What CUDA lists on a host with three GPUs: 0000:3b with MIG on and two instances (two
// CUDA devices at its bus id), 0000:5e without MIG, and 0000:86 with MIG on and no instance
// (CUDA lists nothing of it).
TEST(GroupPhysicalGpus, MigInstancesBecomeTheirGpuAndAGpuWithNoInstanceIsListed) {
  fakes::FakeNvml nvml;
  nvml.Set("0000:3b:00.0", [](fakes::FakeNvml::Gpu& gpu) {
    gpu.uuid = "GPU-3b000000-0000-0000-0000-000000000000";
    MigOnWithH200Profiles(gpu);
    gpu.mig_devices = {{"MIG-aaaaaaaa-0000-0000-0000-000000000001", 1, 0, 9},
                       {"MIG-aaaaaaaa-0000-0000-0000-000000000002", 2, 0, 9}};
  });
  nvml.Set("0000:5e:00.0", [](fakes::FakeNvml::Gpu& gpu) { gpu.uuid = "GPU-5e"; });
  nvml.Set("0000:86:00.0", [](fakes::FakeNvml::Gpu& gpu) {
    gpu.uuid = "GPU-86";
    MigOnWithH200Profiles(gpu);
  });
  auto cuda = [](int index, std::string uuid, std::string bus) {
    DeviceInfo d;
    d.index = index;
    d.uuid = std::move(uuid);
    d.pci_bus_id = std::move(bus);
    d.name = "NVIDIA H200 MIG 3g.71gb";
    return d;
  };
  // CUDA formats a MIG device's UUID bytes as "GPU-...", and may list them in any order.
  const std::vector<PhysicalGpu> gpus =
      GroupPhysicalGpus({cuda(0, "GPU-aaaaaaaa-0000-0000-0000-000000000002", "0000:3b:00.0"),
                         cuda(1, "GPU-aaaaaaaa-0000-0000-0000-000000000001", "0000:3b:00.0"),
                         cuda(2, "GPU-5e", "0000:5e:00.0")},
                        nvml);
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].info.index, 0);
  EXPECT_EQ(gpus[0].info.uuid, "GPU-3b000000-0000-0000-0000-000000000000");
  EXPECT_EQ(gpus[0].info.name, "NVIDIA H200");  // the GPU's name, not an instance's
  EXPECT_EQ(gpus[0].cuda_device, -1);
  EXPECT_EQ(gpus[0].instance_cuda_devices, (std::vector<int>{1, 0}));
  EXPECT_TRUE(gpus[0].info.mig.instances[0].reachable);
  EXPECT_EQ(gpus[1].info.index, 1);
  EXPECT_EQ(gpus[1].cuda_device, 2);
  EXPECT_EQ(gpus[1].info.mig.mode, MigMode::kDisabled);
  EXPECT_EQ(gpus[2].info.pci_bus_id, "0000:86:00.0");
  EXPECT_EQ(gpus[2].info.uuid, "GPU-86");
  EXPECT_EQ(UnjudgeableReason({}, gpus[2].info.mig),
            "MIG enabled, no GPU instance to probe through");
}

TEST(GroupPhysicalGpus, WithoutNvmlEachCudaDeviceIsAGpuWithMigUnknown) {
  fakes::FakeNvml nvml;
  nvml.unavailable = "libnvidia-ml.so.1 not loadable";
  DeviceInfo d;
  d.index = 0;
  d.pci_bus_id = kShapeBus;
  const std::vector<PhysicalGpu> gpus = GroupPhysicalGpus({d, d}, nvml);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[1].info.index, 1);
  EXPECT_EQ(gpus[1].info.mig.mode, MigMode::kUnknown);
  EXPECT_NE(gpus[1].info.mig.problem.find("not loadable"), std::string::npos);
}

TEST(ShapeCapabilities, ConfidentialComputingSkipsWhatItForbidsWithTheReason) {
  DeviceInfo device;
  Capabilities caps;
  ShapeCapabilities(device, caps);
  EXPECT_TRUE(caps.unsupported.empty());
  device.cc.state = CcState::kOn;
  ShapeCapabilities(device, caps);
  for (TransferMode mode :
       {TransferMode::kZeroCopy, TransferMode::kManaged, TransferMode::kManagedPrefetch}) {
    EXPECT_NE(caps.Reason(mode, Direction::kH2D).find("confidential computing on"),
              std::string::npos);
  }
  EXPECT_NE(caps.Reason(TransferMode::kPinned, Direction::kBidirectional).find("nvbandwidth"),
            std::string::npos);
  EXPECT_EQ(caps.Reason(TransferMode::kPinned, Direction::kH2D), "");
  EXPECT_EQ(caps.Reason(TransferMode::kPageable, Direction::kD2H), "");
}

}  // namespace
}  // namespace xferd::probes
