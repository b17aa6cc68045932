#include "probes/cuda/host_memory.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "probes/cuda/pattern.h"

namespace xferd::probes::cuda {
namespace {

// From <linux/mempolicy.h>; spelled out so no libnuma header is needed.
constexpr int kMpolDefault = 0;
constexpr int kMpolPreferred = 1;
constexpr unsigned long kMpolFNode = 1UL << 0;  // MPOL_F_NODE
constexpr unsigned long kMpolFAddr = 1UL << 1;  // MPOL_F_ADDR
constexpr unsigned long kMaxNodes = 16 * 8 * sizeof(unsigned long);

constexpr std::uint64_t kPage = 4096;

std::uint64_t LoadWord(const unsigned char* p, std::uint64_t available) {
  std::uint64_t word = 0;
  if (available >= 8) {
    std::memcpy(&word, p, 8);
  } else {
    for (std::uint64_t b = 0; b < available; ++b) word |= std::uint64_t{p[b]} << (8 * b);
  }
  return word;
}

std::uint64_t SparseWordIndex(std::uint64_t page, std::uint64_t round) {
  return (page * kPage) / 8 + ((page * 7 + round * 13) % (kPage / 8));
}

}  // namespace

ScopedMemoryPolicy::ScopedMemoryPolicy(int numa_node) {
  if (numa_node < 0) return;
  if (static_cast<unsigned long>(numa_node) >= kMaxNodes) {
    note_ = "NUMA node " + std::to_string(numa_node) + " is beyond the supported 1024";
    return;
  }
  if (syscall(SYS_get_mempolicy, &old_mode_, old_mask_, kMaxNodes, nullptr, 0UL) != 0) {
    note_ = std::string("get_mempolicy failed: ") + std::strerror(errno);
    return;
  }
  unsigned long mask[16] = {};
  mask[numa_node / (8 * sizeof(unsigned long))] |= 1UL << (numa_node % (8 * sizeof(unsigned long)));
  if (syscall(SYS_set_mempolicy, kMpolPreferred, mask, kMaxNodes) != 0) {
    note_ = std::string("set_mempolicy(preferred node ") + std::to_string(numa_node) +
            ") failed: " + std::strerror(errno);
    return;
  }
  applied_ = true;
}

ScopedMemoryPolicy::~ScopedMemoryPolicy() {
  if (!applied_) return;
  if (old_mode_ == kMpolDefault) {
    syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0UL);
  } else {
    syscall(SYS_set_mempolicy, old_mode_, old_mask_, kMaxNodes);
  }
}

int NumaNodeOf(const void* address) {
  if (address == nullptr) return -1;
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, const_cast<void*>(address),
              kMpolFNode | kMpolFAddr) != 0) {
    return -1;
  }
  return node >= 0 ? node : -1;
}

std::string MemlockLimitText() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "RLIMIT_MEMLOCK is unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "RLIMIT_MEMLOCK is unlimited";
  return "RLIMIT_MEMLOCK is " + std::to_string(limit.rlim_cur / 1024) + " KiB";
}

std::uint64_t HostFillPattern(void* data, std::uint64_t bytes, std::uint64_t salt) {
  auto* p = static_cast<unsigned char*>(data);
  std::uint64_t sum = 0;
  const std::uint64_t words = bytes / 8;
  for (std::uint64_t i = 0; i < words; ++i) {
    const std::uint64_t w = PatternWord(i, salt);
    std::memcpy(p + i * 8, &w, 8);
    sum += ChecksumTerm(w, i);
  }
  if (bytes % 8 != 0) {
    const std::uint64_t w = PatternWord(words, salt);
    std::memcpy(p + words * 8, &w, bytes % 8);
    sum += ChecksumTerm(LoadWord(p + words * 8, bytes % 8), words);
  }
  return sum;
}

std::uint64_t HostChecksum(const void* data, std::uint64_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t sum = 0;
  const std::uint64_t words = bytes / 8;
  for (std::uint64_t i = 0; i < words; ++i) sum += ChecksumTerm(LoadWord(p + i * 8, 8), i);
  if (bytes % 8 != 0) sum += ChecksumTerm(LoadWord(p + words * 8, bytes % 8), words);
  return sum;
}

std::uint64_t PatternChecksum(std::uint64_t bytes, std::uint64_t salt) {
  std::uint64_t sum = 0;
  const std::uint64_t words = bytes / 8;
  for (std::uint64_t i = 0; i < words; ++i) sum += ChecksumTerm(PatternWord(i, salt), i);
  if (bytes % 8 != 0) {
    const std::uint64_t keep = (bytes % 8) * 8;
    sum += ChecksumTerm(PatternWord(words, salt) & ((1ull << keep) - 1), words);
  }
  return sum;
}

void SparsePoison(void* data, std::uint64_t bytes, std::uint64_t salt, std::uint64_t round) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::uint64_t page = 0; page * kPage < bytes; ++page) {
    const std::uint64_t i = SparseWordIndex(page, round);
    if ((i + 1) * 8 > bytes) break;
    const std::uint64_t poison = ~PatternWord(i, salt);
    std::memcpy(p + i * 8, &poison, 8);
  }
}

bool SparseCheck(const void* data, std::uint64_t bytes, std::uint64_t salt, std::uint64_t round) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::uint64_t page = 0; page * kPage < bytes; ++page) {
    const std::uint64_t i = SparseWordIndex(page, round);
    if ((i + 1) * 8 > bytes) break;
    if (LoadWord(p + i * 8, 8) != PatternWord(i, salt)) return false;
  }
  return true;
}

}  // namespace xferd::probes::cuda
