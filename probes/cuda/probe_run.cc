#include "probes/cuda/probe_run.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/host_memory.h"
#include "probes/cuda/kernels.h"
#include "probes/cuda/probe_abort.h"

namespace xferd::probes::cuda {
namespace {

constexpr unsigned char kPoisonByte = 0xA5;

}  // namespace

ProbeRun::ProbeRun(DeviceState& state, const CudaOptions& options, const ProbeSpec& spec,
                   std::stop_token stop, ProbeSample& sample)
    : s_(state),
      options_(options),
      spec_(spec),
      sample_(sample),
      n_(spec.size_bytes),
      timer_(state, spec, std::move(stop), progress_) {}

void ProbeRun::EnsureHostPattern(HostBuffer& b) {
  if (b.pattern_bytes >= n_) return;
  HostFillPattern(b.ptr(), options_.max_size_bytes, kStaticSalt);
  b.pattern_bytes = options_.max_size_bytes;
}

void ProbeRun::EnsureDevicePattern(DeviceBuffer& b) {
  if (b.pattern_bytes >= n_) return;
  Check(LaunchFill(b.ptr(), options_.max_size_bytes, kStaticSalt, nullptr, s_.blocks, Stream()),
        "fill kernel");
  b.pattern_bytes = options_.max_size_bytes;  // stream order puts the fill before any copy
}

void ProbeRun::PoisonDevice(void* ptr) {
  Check(cudaMemsetAsync(ptr, kPoisonByte, n_, Stream()), "cudaMemsetAsync (poison)");
}

void ProbeRun::PoisonHost(void* ptr, Round round) {
  if (round.last)
    std::memset(ptr, kPoisonByte, n_);
  else
    SparsePoison(ptr, n_, kStaticSalt, round.index);
}

void ProbeRun::ZeroChecksum() {
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
}

void ProbeRun::DamageOnDevice(void* ptr) {
  if (options_.corrupt_transfers) Check(LaunchFlipByte(ptr, n_ / 2, Stream()), "flip kernel");
}

void ProbeRun::EnqueueDeviceCheck(const void* data, bool uncached) {
  Check(LaunchChecksum(data, n_, uncached, s_.device_result(), s_.blocks, Stream()),
        "checksum kernel");
}

void ProbeRun::FetchChecksum() {
  Check(cudaMemcpyAsync(s_.host_result(), s_.device_result(), sizeof(std::uint64_t),
                        cudaMemcpyDeviceToHost, Stream()),
        "cudaMemcpyAsync (checksum)");
  timer_.Record(Mark::kEnd);
  timer_.Await(Mark::kEnd, Wait::kSleep);
}

void ProbeRun::ExpectDeviceChecksum(std::uint64_t expected, const char* where, Round round) {
  ExpectChecksum(*s_.host_result(), expected, where, round);
}

void ProbeRun::ExpectChecksum(std::uint64_t got, std::uint64_t expected, const char* where,
                              Round round) {
  if (got != expected) {
    char detail[96];
    std::snprintf(detail, sizeof(detail), "has checksum %016llx, expected %016llx",
                  static_cast<unsigned long long>(got), static_cast<unsigned long long>(expected));
    Corrupted(where, round, detail);
  }
}

void ProbeRun::CheckHostDestination(HostBuffer& b, std::uint64_t held_before, Round round,
                                    const char* where) {
  if (options_.corrupt_transfers) static_cast<unsigned char*>(b.ptr())[n_ / 2] ^= 0xFF;
  if (!SparseCheck(b.ptr(), n_, kStaticSalt, round.index))
    Corrupted(where, round, "does not hold the pattern at a sampled word");
  if (round.last) {
    const std::uint64_t sum = HostChecksum(b.ptr(), n_);
    if (sum != StaticChecksum()) Corrupted(where, round, "fails its full checksum");
    b.pattern_bytes = std::max(held_before, n_);
  }
}

std::uint64_t ProbeRun::StaticChecksum() {
  auto [it, inserted] = s_.pattern_checksums.try_emplace(n_, 0);
  if (inserted) it->second = PatternChecksum(n_, kStaticSalt);
  return it->second;
}

void ProbeRun::Corrupted(const char* where, Round round, const std::string& detail) {
  throw ProbeAbort{ProbeStatus::kError,
                   std::string("corrupted transfer: ") + where + " of transfer " +
                       std::to_string(round.index + 1) + " " + detail +
                       " (a copy that moves wrong bytes is a failure, not a fast result: check "
                       "dmesg for Xid/AER errors, the PCIe link and the driver)"};
}

std::unique_ptr<TransferProbe> MakeTransferProbe(ProbeRun& run) {
  switch (run.spec().mode) {
    case TransferMode::kPageable:
    case TransferMode::kPinned: return MakeCopyProbe(run);
    case TransferMode::kPinnedAsync: return MakePinnedAsyncProbe(run);
    case TransferMode::kZeroCopy: return MakeZeroCopyProbe(run);
    case TransferMode::kManaged:
    case TransferMode::kManagedPrefetch: return MakeManagedProbe(run);
  }
  throw ProbeAbort{ProbeStatus::kError, "unknown mode"};
}

}  // namespace xferd::probes::cuda
