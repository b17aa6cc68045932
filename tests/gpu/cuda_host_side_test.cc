// The host-side parts of the CUDA backend, which need no GPU: the pattern and checksum the
// device must agree with, the sparse poison check, device naming, NUMA placement, the skip
// reasons and link paths of discovery, and the loop every probe object runs in. Built only
// where the CUDA backend is (they live in probes/cuda), run everywhere.
#if defined(XFERD_HAVE_CUDA)
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

#include "probes/cuda/device_identity.h"
#include "probes/cuda/discovery.h"
#include "probes/cuda/host_memory.h"
#include "probes/cuda/probe_abort.h"
#include "probes/cuda/transfer_probe.h"

namespace xferd::probes::cuda {
namespace {

TEST(CudaHostSide, PatternChecksumMatchesTheBufferForAnySize) {
  for (std::uint64_t size : {1, 7, 8, 15, 16, 17, 4096, 4096 * 3 + 5}) {
    std::vector<unsigned char> buf(size);
    const std::uint64_t written = HostFillPattern(buf.data(), size, 3);
    EXPECT_EQ(written, HostChecksum(buf.data(), size)) << size;
    EXPECT_EQ(written, PatternChecksum(size, 3)) << size;
    EXPECT_NE(written, PatternChecksum(size, 4)) << "a different salt must differ, size " << size;
  }
}

TEST(CudaHostSide, ChecksumCatchesAFlippedByteAndSwappedWords) {
  std::vector<unsigned char> buf(1 << 16);
  const std::uint64_t good = HostFillPattern(buf.data(), buf.size(), 0);
  buf[1234] ^= 0x01;
  EXPECT_NE(HostChecksum(buf.data(), buf.size()), good);
  buf[1234] ^= 0x01;
  std::swap_ranges(buf.begin() + 64, buf.begin() + 72, buf.begin() + 8000);
  EXPECT_NE(HostChecksum(buf.data(), buf.size()), good) << "order must matter";
  std::vector<unsigned char> poisoned(buf.size(), 0xA5);
  EXPECT_NE(HostChecksum(poisoned.data(), poisoned.size()), good);
}

TEST(CudaHostSide, SparseCheckSeesPoisonAndAShortCopy) {
  const std::uint64_t size = 64 * 4096;
  std::vector<unsigned char> src(size), dst(size);
  HostFillPattern(src.data(), size, 0);
  for (std::uint64_t round = 0; round < 3; ++round) {
    SparsePoison(dst.data(), size, 0, round);
    EXPECT_FALSE(SparseCheck(dst.data(), size, 0, round)) << "poison must fail the check";
    std::memcpy(dst.data(), src.data(), size);
    EXPECT_TRUE(SparseCheck(dst.data(), size, 0, round));
    // A copy that stopped one page short is caught.
    SparsePoison(dst.data(), size, 0, round);
    std::memcpy(dst.data(), src.data(), size - 4096);
    EXPECT_FALSE(SparseCheck(dst.data(), size, 0, round));
  }
}

TEST(CudaHostSide, UuidAndBusIdLookLikeNvidiaSmi) {
  const unsigned char bytes[16] = {0xde, 0x19, 0x80, 0x28, 0xe7, 0x43, 0xc7, 0x80,
                                   0xc4, 0xa1, 0xe9, 0xab, 0x35, 0xde, 0x50, 0x3e};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-de198028-e743-c780-c4a1-e9ab35de503e");
  EXPECT_EQ(NormalizeBusId("00000000:00:06.0"), "0000:00:06.0");
  EXPECT_EQ(NormalizeBusId("0000:3B:00.0"), "0000:3b:00.0");
}

TEST(CudaHostSide, DriverVersionFromProc) {
  EXPECT_EQ(ParseProcDriverVersion(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  9 "
                "20:27:00 UTC 2025\nGCC version:  gcc version 12.2.0\n"),
            "580.159.04");
  EXPECT_EQ(ParseProcDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  "
                                   "540.4.0  Release Build\n"),
            "540.4.0");
  EXPECT_EQ(ParseProcDriverVersion("garbage without a version\n"), "");
}

TEST(CudaHostSide, DeviceMinorFromProc) {
  // /proc/driver/nvidia/gpus/0000:3b:00.0/information as driver 580 writes it.
  EXPECT_EQ(ParseDeviceMinor("Model: \t\t NVIDIA H200\nIRQ:   \t\t 233\n"
                             "GPU UUID: \t GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52\n"
                             "Video BIOS: \t 96.00.b9.00.01\nBus Type: \t PCIe\n"
                             "DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n"
                             "Bus Location: \t 0000:3b:00.0\nDevice Minor: \t 3\n"
                             "GPU Excluded:\t No\n"),
            3);
  EXPECT_EQ(ParseDeviceMinor("Device Minor: \t 12\n"), 12);
  EXPECT_EQ(ParseDeviceMinor("Device Minor: \t none\n"), -1);
  EXPECT_EQ(ParseDeviceMinor("Model: NVIDIA H200\n"), -1);
  EXPECT_EQ(DeviceMinor("0000:ff:1f.7-not-a-gpu"), -1);
}

TEST(CudaHostSide, MemoryPolicyIsSetForTheScopeAndRestored) {
  int mode = -1;
  unsigned long mask[16] = {};
  ASSERT_EQ(syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), nullptr, 0UL),
            0)
      << "no NUMA support in this kernel";
  const int before = mode;
  {
    ScopedMemoryPolicy policy(0);
    if (!policy.note().empty()) GTEST_SKIP() << "the kernel refused: " << policy.note();
    ASSERT_EQ(syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), nullptr, 0UL),
              0);
    EXPECT_EQ(mode, 1 /* MPOL_PREFERRED */);
    EXPECT_EQ(mask[0] & 1UL, 1UL);
  }
  ASSERT_EQ(syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), nullptr, 0UL),
            0);
  EXPECT_EQ(mode, before);
  ScopedMemoryPolicy untouched(-1);
  EXPECT_TRUE(untouched.note().empty());
}

TEST(CudaHostSide, MemlockLimitIsNamed) {
  EXPECT_EQ(MemlockLimitText().rfind("RLIMIT_MEMLOCK is ", 0), 0u) << MemlockLimitText();
}

TEST(CudaDiscovery, ModesTheDeviceCannotDoAreSkippedWithTheReason) {
  const CudaOptions options;
  EXPECT_TRUE(CapabilitiesOf({}, options).unsupported.empty());

  const Capabilities no_map = CapabilitiesOf({.can_map_host_memory = false}, options);
  ASSERT_EQ(no_map.unsupported.size(), 1u);
  EXPECT_NE(no_map.unsupported.at(TransferMode::kZeroCopy).find("canMapHostMemory = 0"),
            std::string::npos);

  // Managed memory without page-fault migration (concurrentManagedAccess = 0: Windows, older
  // Jetson modules).
  const Capabilities whole = CapabilitiesOf({.concurrent_managed_access = false}, options);
  ASSERT_EQ(whole.unsupported.size(), 2u);
  for (TransferMode mode : {TransferMode::kManaged, TransferMode::kManagedPrefetch})
    EXPECT_NE(whole.unsupported.at(mode).find("concurrentManagedAccess"), std::string::npos);
  EXPECT_TRUE(whole.Supports(TransferMode::kPinned));
  const Capabilities none =
      CapabilitiesOf({.managed_memory = false, .concurrent_managed_access = false}, options);
  EXPECT_NE(none.unsupported.at(TransferMode::kManaged).find("managedMemory = 0"),
            std::string::npos)
      << "the first missing feature is the reason";

  CudaOptions hidden;
  hidden.hide_can_map_host_memory = true;
  hidden.hide_concurrent_managed_access = true;
  EXPECT_EQ(CapabilitiesOf({}, hidden).unsupported.size(), 3u);
}

TEST(CudaDiscovery, AGpuWithoutAPcieLinkSaysWhy) {
  DeviceInfo integrated;
  integrated.integrated = true;
  integrated.pci_bus_id = "0000:00:00.0";
  LinkPath path = LinkPathOf(integrated, "/nonexistent");
  EXPECT_FALSE(path.pcie);
  EXPECT_TRUE(path.links.empty());
  EXPECT_NE(path.note.find("integrated GPU"), std::string::npos) << path.note;

  DeviceInfo no_bus;
  path = LinkPathOf(no_bus, "/nonexistent");
  EXPECT_FALSE(path.pcie);
  EXPECT_NE(path.note.find("no PCI bus id"), std::string::npos) << path.note;

  // A discrete GPU's path comes from sysfs; NVLink-C2C is carried over from discovery.
  DeviceInfo grace_hopper;
  grace_hopper.pci_bus_id = "0009:01:00.0";
  grace_hopper.c2c = true;
  const std::filesystem::path empty_sysfs = testing::TempDir() + "/xferd-empty-sysfs";
  std::filesystem::create_directories(empty_sysfs);
  path = LinkPathOf(grace_hopper, empty_sysfs);
  EXPECT_TRUE(path.pcie);
  EXPECT_TRUE(path.c2c);
  EXPECT_NE(path.note.find("no PCI device 0009:01:00.0"), std::string::npos) << path.note;
  grace_hopper.c2c = false;
  EXPECT_FALSE(LinkPathOf(grace_hopper, empty_sysfs).c2c);
}

// The loop every probe object runs in, on a probe that records what it was asked to do.
class RecordingProbe final : public TransferProbe {
 public:
  void Prepare(Round round) override { Step("prepare", round); }
  void Timed(Round round) override { Step("timed", round); }
  double Verify(Round round) override {
    Step("verify", round);
    if (on_verify) on_verify(round);
    const double d = round.index + 1.0;             // seconds
    if (book != nullptr) book->device_time_s += d;  // as the real probes book theirs
    return d;
  }
  int Finish(ProbeSample& sample) override {
    steps.push_back("finish");
    sample.overlap_ratio = 0.5;
    return extra_copies;
  }

  std::vector<std::string> steps;
  std::vector<int> last_rounds;  // the rounds marked last
  std::function<void(Round)> on_verify;
  int extra_copies = 0;
  ProbeSample* book = nullptr;  // where Verify books the device time, when set

 private:
  void Step(const char* what, Round round) {
    steps.push_back(std::string(what) + " " + std::to_string(round.index));
    if (round.last && std::string(what) == "prepare") last_rounds.push_back(round.index);
  }
};

ProbeSpec LoopSpec(TransferMode mode, Direction direction, int warmup, int iterations) {
  ProbeSpec spec;
  spec.mode = mode;
  spec.direction = direction;
  spec.size_bytes = 1000;
  spec.warmup = warmup;
  spec.iterations = iterations;
  return spec;
}

TEST(TransferLoop, WarmUpsComeFirstAndOnlyTheTimedTransfersAreKept) {
  RecordingProbe probe;
  Progress progress;
  ProbeSample sample;
  RunTransfers(probe, LoopSpec(TransferMode::kPinned, Direction::kH2D, 2, 3), {}, progress, sample);
  const std::vector<std::string> expected = {"prepare 0", "timed 0",   "verify 0",  "prepare 1",
                                             "timed 1",   "verify 1",  "prepare 2", "timed 2",
                                             "verify 2",  "prepare 3", "timed 3",   "verify 3",
                                             "prepare 4", "timed 4",   "verify 4",  "finish"};
  EXPECT_EQ(probe.steps, expected);
  EXPECT_EQ(probe.last_rounds, std::vector<int>{4}) << "only the last is checked in full";
  EXPECT_EQ(sample.durations_s, (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(progress.done, 5);
  EXPECT_EQ(sample.overlap_ratio, 0.5) << "what Finish measured stays in the sample";
}

// A device-time target (nvbench's min-time): the timed transfers stop once the probe's
// device time reaches it, with at least min_iterations of them, and the one that ends it is
// known before it runs, so it is the one checked in full.
TEST(TransferLoop, ADeviceTimeTargetEndsTheProbeOnceItIsReached) {
  RecordingProbe probe;
  Progress progress;
  ProbeSample sample;
  probe.book = &sample;
  ProbeSpec spec = LoopSpec(TransferMode::kPinned, Direction::kH2D, 1, 10);
  spec.target_device_s = 6;  // transfers take 1, 2, 3, ... s: 1 + 2 + 3 + 4 reaches it
  spec.min_iterations = 2;
  RunTransfers(probe, spec, {}, progress, sample);
  EXPECT_EQ(sample.durations_s, (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(probe.last_rounds, std::vector<int>{3});
  EXPECT_EQ(progress.done, 4);
  EXPECT_EQ(sample.link_h2d_bytes, 4000u) << "the bytes of the transfers that ran";
  // The floor: at least min_iterations timed transfers however long each takes.
  RecordingProbe slow;
  ProbeSample floor;
  slow.book = &floor;
  spec.target_device_s = 0.5;
  spec.min_iterations = 3;
  Progress p2;
  RunTransfers(slow, spec, {}, p2, floor);
  EXPECT_EQ(floor.durations_s.size(), 3u);
  // The ceiling: never more than `iterations`.
  RecordingProbe capped;
  ProbeSample ceiling;
  capped.book = &ceiling;
  spec.target_device_s = 1e9;
  spec.iterations = 4;
  Progress p3;
  RunTransfers(capped, spec, {}, p3, ceiling);
  EXPECT_EQ(ceiling.durations_s.size(), 4u);
}

TEST(TransferLoop, LinkBytesCountEveryCopyOverTheLinkEachWay) {
  for (const auto& [mode, direction] : AllModeDirections()) {
    RecordingProbe probe;
    probe.extra_copies = mode == TransferMode::kPinnedAsync ? 3 : 0;
    Progress progress;
    ProbeSample sample;
    RunTransfers(probe, LoopSpec(mode, direction, 2, 5), {}, progress, sample);
    const std::uint64_t all = 1000 * (7 + probe.extra_copies);
    // Managed memory migrates its pages both ways each transfer: home first, then across.
    const bool both = direction == Direction::kBidirectional || mode == TransferMode::kManaged ||
                      mode == TransferMode::kManagedPrefetch;
    const std::string what = std::string(ToString(mode)) + " " + std::string(ToString(direction));
    EXPECT_EQ(sample.link_h2d_bytes, both || direction == Direction::kH2D ? all : 0) << what;
    EXPECT_EQ(sample.link_d2h_bytes, both || direction == Direction::kD2H ? all : 0) << what;
  }
}

// A probe whose transfers take the given durations in turn (the last repeats).
class RampProbe final : public TransferProbe {
 public:
  explicit RampProbe(std::vector<double> durations) : durations_(std::move(durations)) {}
  void Prepare(Round round) override { indexes.push_back(round.index); }
  void Timed(Round) override {}
  double Verify(Round) override {
    const double d = durations_[std::min(next_, durations_.size() - 1)];
    ++next_;
    return d;
  }
  std::vector<int> indexes;

 private:
  std::vector<double> durations_;
  std::size_t next_ = 0;
};

TEST(FirstUseWarmUp, RunsUntilTheDurationsSettle) {
  // The unified memory driver's ramp: slow first migrations, then steady.
  RampProbe probe({12e-3, 11e-3, 9.5e-3, 8.0e-3, 6.3e-3, 6.2e-3, 6.25e-3, 6.2e-3});
  Progress progress;
  const std::vector<double> warm = WarmUntilSteady(probe, {}, progress);
  EXPECT_EQ(warm.size(), 7u) << "steady once three rounds agree within 5 %";
  EXPECT_TRUE(Steady(warm));
  EXPECT_EQ(progress.done, 7);
  EXPECT_GE(probe.indexes.front(), 1 << 20) << "round indexes of their own";
}

TEST(FirstUseWarmUp, StopsAtItsBoundWhenNothingSettles) {
  std::vector<double> noisy;
  for (int i = 0; i < 40; ++i) noisy.push_back(i % 2 ? 1.0 : 2.0);
  RampProbe probe(noisy);
  Progress progress;
  EXPECT_EQ(WarmUntilSteady(probe, {}, progress).size(),
            static_cast<std::size_t>(kMaxFirstUseRounds));
  EXPECT_FALSE(Steady({1.0, 1.0}));
  EXPECT_TRUE(Steady({3.0, 1.0, 1.02, 1.04}));
  EXPECT_FALSE(Steady({1.0, 1.02, 1.06}));
}

TEST(TransferLoop, AStopRequestEndsTheProbeBeforeItsNextTransfer) {
  std::stop_source source;
  RecordingProbe probe;
  probe.on_verify = [&](Round round) {
    if (round.index == 1) source.request_stop();
  };
  Progress progress;
  ProbeSample sample;
  try {
    RunTransfers(probe, LoopSpec(TransferMode::kPinned, Direction::kD2H, 1, 10), source.get_token(),
                 progress, sample);
    FAIL() << "a stop request must end the probe";
  } catch (const ProbeAbort& abort) {
    EXPECT_EQ(abort.status, ProbeStatus::kError);
    EXPECT_EQ(abort.message, "cancelled");
  }
  EXPECT_EQ(progress.done, 2);
  EXPECT_EQ(probe.steps.back(), "verify 1");
  EXPECT_EQ(sample.durations_s.size(), 1u);
}

TEST(TransferLoop, AFailedCheckEndsTheProbeWithoutCountingTheTransfer) {
  RecordingProbe probe;
  probe.on_verify = [](Round round) {
    if (round.index == 1) throw ProbeAbort{ProbeStatus::kError, "corrupted transfer: test"};
  };
  Progress progress;
  ProbeSample sample;
  EXPECT_THROW(RunTransfers(probe, LoopSpec(TransferMode::kZeroCopy, Direction::kH2D, 0, 5), {},
                            progress, sample),
               ProbeAbort);
  EXPECT_EQ(progress.done, 1);
  EXPECT_EQ(sample.durations_s, std::vector<double>{1});
  EXPECT_EQ(probe.steps.back(), "verify 1") << "no finish after a failed transfer";
}

}  // namespace
}  // namespace xferd::probes::cuda
#endif  // XFERD_HAVE_CUDA
