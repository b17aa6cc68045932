// The host-side parts of the CUDA backend, which need no GPU: the pattern and checksum the
// device must agree with, the sparse poison check, device naming, NUMA placement. Built
// only where the CUDA backend is (they live in probes/cuda), run everywhere.
#if defined(XFERD_HAVE_CUDA)
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "probes/cuda/device_identity.h"
#include "probes/cuda/host_memory.h"

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

}  // namespace
}  // namespace xferd::probes::cuda
#endif  // XFERD_HAVE_CUDA
