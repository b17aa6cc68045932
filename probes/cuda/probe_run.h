// One probe in progress on one GPU: its spec, its timer and the sample being filled, and
// the steps every mode's probe object shares: the pattern in a source, poison in a
// destination, the checksum of what arrived. Names CUDA runtime types: private to
// probes/cuda.
#pragma once

#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <utility>

#include "probes/cuda/device_state.h"
#include "probes/cuda/probe_timer.h"
#include "probes/cuda/transfer_probe.h"
#include "xferd/probes/cuda_backend.h"
#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

// The copy modes' buffers keep one pattern; managed memory gets a fresh one per transfer.
inline constexpr std::uint64_t kStaticSalt = 0;

class ProbeRun {
 public:
  // Starts the probe's deadline: make it right before the first transfer.
  ProbeRun(DeviceState& state, const CudaOptions& options, const ProbeSpec& spec,
           std::stop_token stop, ProbeSample& sample);
  ProbeRun(const ProbeRun&) = delete;
  ProbeRun& operator=(const ProbeRun&) = delete;

  DeviceState& state() const { return s_; }
  const CudaOptions& options() const { return options_; }
  const ProbeSpec& spec() const { return spec_; }
  std::uint64_t size() const { return n_; }  // bytes per transfer and direction
  ProbeTimer& timer() { return timer_; }
  Progress& progress() { return progress_; }
  cudaStream_t Stream(int i = 0) const { return s_.streams[i]; }
  // What the probe cost the device, warm-ups and checks included.
  void AddDeviceTime(double seconds) { sample_.device_time_s += seconds; }
  // Device time in which the probe computed and moved nothing over the link.
  void AddComputeOnlyTime(double seconds) {
    sample_.device_time_s += seconds;
    sample_.compute_only_s += seconds;
  }

  // Preparing a transfer.
  void EnsureHostPattern(HostBuffer& b);
  void EnsureDevicePattern(DeviceBuffer& b);
  // The buffer is about to be written: returns how many leading bytes held the pattern.
  std::uint64_t StartWriting(HostBuffer& b) { return std::exchange(b.pattern_bytes, 0); }
  void PoisonDevice(void* ptr);
  // The last transfer is checked in full, so all of it is poisoned; the others sparsely.
  void PoisonHost(void* ptr, Round round);
  void ZeroChecksum();  // the device's checksum slot, before a kernel adds to it

  // The corrupt_transfers test hook: damages one byte on the device, in stream order.
  void DamageOnDevice(void* ptr);

  // Verifying a transfer.
  void EnqueueDeviceCheck(const void* data, bool uncached);
  // Copies the device checksum back and waits until the stream has reached it (kEnd).
  void FetchChecksum();
  void ExpectDeviceChecksum(std::uint64_t expected, const char* where, Round round);
  void ExpectChecksum(std::uint64_t got, std::uint64_t expected, const char* where, Round round);
  // A host destination after its copy: the sampled words, and in full on the last transfer
  // (which then restores what the buffer is known to hold).
  void CheckHostDestination(HostBuffer& b, std::uint64_t held_before, Round round,
                            const char* where);
  std::uint64_t StaticChecksum();  // of the static pattern over the size, cached per size
  [[noreturn]] void Corrupted(const char* where, Round round, const std::string& detail);

 private:
  DeviceState& s_;
  const CudaOptions& options_;
  const ProbeSpec& spec_;
  ProbeSample& sample_;
  std::uint64_t n_;
  Progress progress_;
  ProbeTimer timer_;
};

// The probe object for the run's mode and direction (docs/probe.md), made by its family:
std::unique_ptr<TransferProbe> MakeTransferProbe(ProbeRun& run);
// copy_probes.cc: pageable and pinned, each way, and pinned both ways at once.
std::unique_ptr<TransferProbe> MakeCopyProbe(ProbeRun& run);
// pinned_async_probe.cc: chunked copies over several streams, and their overlap.
std::unique_ptr<TransferProbe> MakePinnedAsyncProbe(ProbeRun& run);
// zero_copy_probe.cc: a kernel reading or writing mapped host memory.
std::unique_ptr<TransferProbe> MakeZeroCopyProbe(ProbeRun& run);
// managed_probe.cc: managed memory migrated by page faults, or prefetched.
std::unique_ptr<TransferProbe> MakeManagedProbe(ProbeRun& run);

}  // namespace xferd::probes::cuda
