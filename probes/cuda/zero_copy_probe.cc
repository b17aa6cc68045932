// zero_copy: the transfer is a kernel reading or writing mapped host memory over the link
// with 16-byte accesses.
#include <memory>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/kernels.h"
#include "probes/cuda/probe_run.h"

namespace xferd::probes::cuda {
namespace {

// Host to device: a kernel reads the mapped buffer uncached; the checksum it computes on
// the way is the correctness check.
class ZeroCopyRead final : public TransferProbe {
 public:
  explicit ZeroCopyRead(ProbeRun& run) : run_(run), timer_(run.timer()), src_(run.state().mapped) {}

  void Prepare(Round) override {
    run_.EnsureHostPattern(src_);
    if (run_.options().corrupt_transfers) {
      static_cast<unsigned char*>(src_.ptr())[run_.size() / 2] ^= 0xFF;
      src_.pattern_bytes = 0;
    }
    timer_.Record(Mark::kBegin);
    run_.ZeroChecksum();
  }

  void Timed(Round) override {
    timer_.Record(Mark::kStart);
    run_.EnqueueDeviceCheck(src_.device_ptr, true);
    timer_.Record(Mark::kStop);
  }

  double Verify(Round round) override {
    run_.FetchChecksum();
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kEnd));
    run_.ExpectDeviceChecksum(run_.StaticChecksum(), "what the kernel read", round);
    return timer_.Seconds(Mark::kStart, Mark::kStop);
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  HostBuffer& src_;
};

// Device to host: a kernel writes the pattern into the mapped buffer; the host checks it.
class ZeroCopyWrite final : public TransferProbe {
 public:
  explicit ZeroCopyWrite(ProbeRun& run)
      : run_(run), timer_(run.timer()), dst_(run.state().mapped) {}

  void Prepare(Round round) override {
    held_ = run_.StartWriting(dst_);
    run_.PoisonHost(dst_.ptr(), round);
    timer_.Record(Mark::kBegin);
  }

  void Timed(Round) override {
    timer_.Record(Mark::kStart);
    Check(LaunchFill(dst_.device_ptr, run_.size(), kStaticSalt, nullptr, run_.state().blocks,
                     run_.Stream()),
          "fill kernel");
    timer_.Record(Mark::kStop);
  }

  double Verify(Round round) override {
    timer_.Await(Mark::kStop, Wait::kSleep);
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kStop));
    run_.CheckHostDestination(dst_, held_, round, "what the kernel wrote");
    return timer_.Seconds(Mark::kStart, Mark::kStop);
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  HostBuffer& dst_;
  std::uint64_t held_ = 0;
};

}  // namespace

std::unique_ptr<TransferProbe> MakeZeroCopyProbe(ProbeRun& run) {
  if (run.spec().direction == Direction::kH2D) return std::make_unique<ZeroCopyRead>(run);
  return std::make_unique<ZeroCopyWrite>(run);
}

}  // namespace xferd::probes::cuda
