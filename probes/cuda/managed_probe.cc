// managed and managed_prefetch: cudaMallocManaged memory whose pages migrate by page fault,
// or moved first by cudaMemPrefetchAsync inside the timed span. A fresh pattern each
// transfer, so stale pages cannot pass.
#include <memory>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/host_memory.h"
#include "probes/cuda/kernels.h"
#include "probes/cuda/probe_run.h"

namespace xferd::probes::cuda {
namespace {

// cudaMemPrefetchAsync took a device ordinal until CUDA 13, a cudaMemLocation since.
cudaError_t Prefetch(const void* ptr, std::uint64_t bytes, int device, cudaStream_t stream) {
#if CUDART_VERSION >= 13000
  cudaMemLocation location{};
  if (device == cudaCpuDeviceId) {
    location.type = cudaMemLocationTypeHost;
  } else {
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
  }
  return cudaMemPrefetchAsync(ptr, bytes, location, 0, stream);
#else
  return cudaMemPrefetchAsync(ptr, bytes, device, stream);
#endif
}

std::uint64_t SaltOf(Round round) {
  return static_cast<std::uint64_t>(round.index) + 1;
}

// Host to device: the CPU writes the buffer last, then a kernel touches all of it: its
// pages migrate by page fault. With prefetch, cudaMemPrefetchAsync moves them first, inside
// the timed span. The kernel's checksum is the check.
class ManagedToDevice final : public TransferProbe {
 public:
  ManagedToDevice(ProbeRun& run, bool prefetch)
      : run_(run), timer_(run.timer()), prefetch_(prefetch), buf_(run.state().managed.get()) {}

  void Prepare(Round round) override {
    const std::uint64_t n = run_.size();
    timer_.Record(Mark::kBegin);
    // Bring the pages home cheaply before the CPU writes them (untimed setup).
    Check(Prefetch(buf_, n, cudaCpuDeviceId, run_.Stream()), "cudaMemPrefetchAsync (to host)");
    timer_.Record(Mark::kSecond);
    timer_.Await(Mark::kSecond, Wait::kSleep);
    expected_ = HostFillPattern(buf_, n, SaltOf(round));
    if (run_.options().corrupt_transfers) static_cast<unsigned char*>(buf_)[n / 2] ^= 0xFF;
    run_.ZeroChecksum();
  }

  void Timed(Round) override {
    timer_.Record(Mark::kStart);
    if (prefetch_) {
      Check(Prefetch(buf_, run_.size(), run_.state().index, run_.Stream()),
            "cudaMemPrefetchAsync (to device)");
    }
    run_.EnqueueDeviceCheck(buf_, false);
    timer_.Record(Mark::kStop);
  }

  double Verify(Round round) override {
    run_.FetchChecksum();
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kSecond) +
                       timer_.Seconds(Mark::kStart, Mark::kEnd));
    run_.ExpectDeviceChecksum(expected_, "what the kernel read", round);
    return timer_.Seconds(Mark::kStart, Mark::kStop);
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  const bool prefetch_;
  void* const buf_;
  std::uint64_t expected_ = 0;
};

// Device to host: a kernel writes the buffer (its pages now live on the GPU), then the CPU
// reads all of it, faulting the pages back, timed by the wall clock as an application would
// feel it. With prefetch, the timed part is cudaMemPrefetchAsync to the host (events); the
// CPU read that follows finds local pages and is the check.
class ManagedToHost final : public TransferProbe {
 public:
  ManagedToHost(ProbeRun& run, bool prefetch)
      : run_(run), timer_(run.timer()), prefetch_(prefetch), buf_(run.state().managed.get()) {}

  void Prepare(Round round) override {
    DeviceState& s = run_.state();
    const std::uint64_t n = run_.size();
    timer_.Record(Mark::kBegin);
    // Move the pages to the GPU before it writes them: setup, cheaper than faulting them.
    Check(Prefetch(buf_, n, s.index, run_.Stream()), "cudaMemPrefetchAsync (to device)");
    run_.ZeroChecksum();
    Check(LaunchFill(buf_, n, SaltOf(round), s.device_result(), s.blocks, run_.Stream()),
          "fill kernel");
    run_.DamageOnDevice(buf_);
    Check(cudaMemcpyAsync(s.host_result(), s.device_result(), sizeof(std::uint64_t),
                          cudaMemcpyDeviceToHost, run_.Stream()),
          "cudaMemcpyAsync (checksum)");
    timer_.Record(Mark::kStart);
    timer_.Await(Mark::kStart, Wait::kSleep);
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kStart));
    expected_ = *s.host_result();
  }

  void Timed(Round) override {
    if (prefetch_) {
      timer_.Record(Mark::kSecond);
      Check(Prefetch(buf_, run_.size(), cudaCpuDeviceId, run_.Stream()),
            "cudaMemPrefetchAsync (to host)");
      timer_.Record(Mark::kStop);
    } else {
      const auto t0 = ProbeTimer::Now();
      sum_ = HostChecksum(buf_, run_.size());
      wall_s_ = ProbeTimer::SecondsSince(t0);
    }
  }

  double Verify(Round round) override {
    double duration = 0;
    if (prefetch_) {
      timer_.Await(Mark::kStop, Wait::kSleep);
      duration = timer_.Seconds(Mark::kSecond, Mark::kStop);
      run_.AddDeviceTime(duration);
      sum_ = HostChecksum(buf_, run_.size());
    } else {
      duration = wall_s_;
      // The CPU's faults keep the copy engines busy throughout: count all of it.
      run_.AddDeviceTime(duration);
    }
    run_.ExpectChecksum(sum_, expected_, "what the CPU read", round);
    return duration;
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  const bool prefetch_;
  void* const buf_;
  std::uint64_t expected_ = 0, sum_ = 0;
  double wall_s_ = 0;
};

}  // namespace

std::unique_ptr<TransferProbe> MakeManagedProbe(ProbeRun& run) {
  const bool prefetch = run.spec().mode == TransferMode::kManagedPrefetch;
  if (run.spec().direction == Direction::kH2D)
    return std::make_unique<ManagedToDevice>(run, prefetch);
  return std::make_unique<ManagedToHost>(run, prefetch);
}

}  // namespace xferd::probes::cuda
