// Host-side memory work for the CUDA backend: NUMA placement, the memlock limit, and the
// pattern and checksum over host buffers (pattern.h's definitions). No CUDA header here.
#pragma once

#include <cstdint>
#include <string>

namespace xferd::probes::cuda {

// While alive, the calling thread's new pages prefer `numa_node` (set_mempolicy, called
// directly: no libnuma). -1 leaves the policy alone. Best effort: a kernel that refuses
// (no NUMA, seccomp) leaves allocation where it would have been, and note() says why.
class ScopedMemoryPolicy {
 public:
  explicit ScopedMemoryPolicy(int numa_node);
  ~ScopedMemoryPolicy();
  ScopedMemoryPolicy(const ScopedMemoryPolicy&) = delete;
  ScopedMemoryPolicy& operator=(const ScopedMemoryPolicy&) = delete;
  const std::string& note() const { return note_; }

 private:
  bool applied_ = false;
  int old_mode_ = 0;
  unsigned long old_mask_[16] = {};  // up to 1024 nodes
  std::string note_;
};

// The NUMA node the page at `address` is on (get_mempolicy with MPOL_F_NODE | MPOL_F_ADDR,
// called directly: no libnuma). Touch the page first: the kernel faults an absent page in
// to answer. -1 when the kernel cannot say: no NUMA (ENOSYS, EINVAL), or a mapping it does
// not manage as ordinary pages (EFAULT).
int NumaNodeOf(const void* address);

// "RLIMIT_MEMLOCK is 8 MiB" or "RLIMIT_MEMLOCK is unlimited", for allocation errors.
std::string MemlockLimitText();

// Write the pattern with `salt` over `bytes`; returns its checksum.
std::uint64_t HostFillPattern(void* data, std::uint64_t bytes, std::uint64_t salt);

// The checksum of `bytes` at `data`, as the device computes it.
std::uint64_t HostChecksum(const void* data, std::uint64_t bytes);

// The checksum the pattern with `salt` over `bytes` has, without a buffer.
std::uint64_t PatternChecksum(std::uint64_t bytes, std::uint64_t salt);

// A cheap check for every transfer into host memory: one word per 4 KiB page (at an
// offset that moves with `round`) is poisoned before the copy and must hold the pattern
// after it. A full checksum of the last transfer catches anything in between.
void SparsePoison(void* data, std::uint64_t bytes, std::uint64_t salt, std::uint64_t round);
bool SparseCheck(const void* data, std::uint64_t bytes, std::uint64_t salt, std::uint64_t round);

}  // namespace xferd::probes::cuda
