// pageable and pinned: cudaMemcpy(Async) between a host buffer and the device, each way,
// and pinned both ways at once.
#include <algorithm>
#include <memory>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/event_timed_probe.h"

namespace xferd::probes::cuda {
namespace {

// pageable host to device: plain cudaMemcpy timed by the wall clock. The call is
// synchronous for pageable memory (the runtime stages it through its own pinned buffer), so
// call-to-data-on-the-device is what an application waits for, and events would miss the
// CPU copy into the staging buffer. It runs on the legacy default stream, which the probe's
// non-blocking streams never wait for. The device checksums what arrived.
class PageableToDevice final : public TransferProbe {
 public:
  explicit PageableToDevice(ProbeRun& run)
      : run_(run),
        timer_(run.timer()),
        src_(run.state().pageable),
        dst_(run.state().device_destination.ptr()) {}

  void Prepare(Round) override {
    run_.EnsureHostPattern(src_);
    timer_.Record(Mark::kBegin);
    run_.PoisonDevice(dst_);
    run_.ZeroChecksum();
  }

  void Timed(Round) override {
    timer_.Record(Mark::kStart);
    timer_.Await(Mark::kStart, Wait::kSpin);  // the poison is done: the copy is timed alone
    const auto t0 = ProbeTimer::Now();
    Check(cudaMemcpy(dst_, src_.ptr(), run_.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    // cudaMemcpy may return with the last staged chunk still in flight: wait for it.
    timer_.RecordOnLegacyStream(Mark::kStop);
    timer_.Await(Mark::kStop, Wait::kSpin);
    wall_s_ = ProbeTimer::SecondsSince(t0);
    timer_.StreamWaits(0, Mark::kStop);
  }

  double Verify(Round round) override {
    run_.DamageOnDevice(dst_);
    run_.EnqueueDeviceCheck(dst_, false);
    run_.FetchChecksum();
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kEnd));
    run_.ExpectDeviceChecksum(run_.StaticChecksum(), "the device copy", round);
    return wall_s_;
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  HostBuffer& src_;
  void* const dst_;
  double wall_s_ = 0;
};

// pageable device to host, timed by the wall clock as PageableToDevice is; the host checks
// what arrived.
class PageableToHost final : public TransferProbe {
 public:
  explicit PageableToHost(ProbeRun& run)
      : run_(run),
        timer_(run.timer()),
        src_(run.state().device_source),
        dst_(run.state().pageable) {}

  void Prepare(Round round) override {
    run_.EnsureDevicePattern(src_);
    held_ = run_.StartWriting(dst_);
    run_.PoisonHost(dst_.ptr(), round);
    timer_.Record(Mark::kBegin);
  }

  void Timed(Round) override {
    timer_.Record(Mark::kStart);
    timer_.Await(Mark::kStart, Wait::kSpin);  // the source is ready: the copy is timed alone
    const auto t0 = ProbeTimer::Now();
    Check(cudaMemcpy(dst_.ptr(), src_.ptr(), run_.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    wall_s_ = ProbeTimer::SecondsSince(t0);
  }

  double Verify(Round round) override {
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kStart) + wall_s_);
    run_.CheckHostDestination(dst_, held_, round, "the host copy");
    return wall_s_;
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  DeviceBuffer& src_;
  HostBuffer& dst_;
  std::uint64_t held_ = 0;
  double wall_s_ = 0;
};

// pinned, each way: cudaMemcpyAsync on the probe stream, timed by events
// (event_timed_probe.h); the device checksums what arrived on it, the host what arrived in
// host memory.
std::unique_ptr<TransferProbe> MakePinnedCopy(ProbeRun& run) {
  DeviceState& s = run.state();
  if (run.spec().direction == Direction::kH2D) {
    void* const dst = s.device_destination.ptr();
    return MakeEventTimedProbe(run, LandsOnDevice{s.pinned, dst, "the device copy"},
                               [&run, &s, dst] {
                                 Check(cudaMemcpyAsync(dst, s.pinned.ptr(), run.size(),
                                                       cudaMemcpyHostToDevice, run.Stream()),
                                       "cudaMemcpyAsync");
                               });
  }
  return MakeEventTimedProbe(
      run, LandsOnHost{&s.device_source, s.pinned, "the host copy"}, [&run, &s] {
        Check(cudaMemcpyAsync(s.pinned.ptr(), s.device_source.ptr(), run.size(),
                              cudaMemcpyDeviceToHost, run.Stream()),
              "cudaMemcpyAsync");
      });
}

// pinned both ways at once: host->device on the probe stream, device->host on a second;
// the transfer lasts until both are done, and moves 2 x size bytes.
class CopyBothWays final : public TransferProbe {
 public:
  explicit CopyBothWays(ProbeRun& run)
      : run_(run),
        timer_(run.timer()),
        host_src_(run.state().pinned),
        dev_src_(run.state().device_source),
        host_dst_(run.state().pinned_second),
        dev_dst_(run.state().device_destination.ptr()) {}

  void Prepare(Round round) override {
    run_.EnsureHostPattern(host_src_);
    run_.EnsureDevicePattern(dev_src_);
    held_ = run_.StartWriting(host_dst_);
    run_.PoisonHost(host_dst_.ptr(), round);
    timer_.Record(Mark::kBegin);
    run_.PoisonDevice(dev_dst_);
    run_.ZeroChecksum();
  }

  void Timed(Round) override {
    const std::uint64_t n = run_.size();
    timer_.Record(Mark::kStart);
    timer_.Fork(2);
    Check(cudaMemcpyAsync(dev_dst_, host_src_.ptr(), n, cudaMemcpyHostToDevice, run_.Stream(0)),
          "cudaMemcpyAsync (h2d)");
    Check(
        cudaMemcpyAsync(host_dst_.ptr(), dev_src_.ptr(), n, cudaMemcpyDeviceToHost, run_.Stream(1)),
        "cudaMemcpyAsync (d2h)");
    timer_.Record(Mark::kStop, 0);
    timer_.Record(Mark::kSecond, 1);
    timer_.StreamWaits(0, Mark::kSecond);
  }

  double Verify(Round round) override {
    run_.DamageOnDevice(dev_dst_);
    run_.EnqueueDeviceCheck(dev_dst_, false);
    run_.FetchChecksum();
    const double duration = std::max(timer_.Seconds(Mark::kStart, Mark::kStop),
                                     timer_.Seconds(Mark::kStart, Mark::kSecond));
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kEnd));
    run_.ExpectDeviceChecksum(run_.StaticChecksum(), "the device copy (host->device half)", round);
    run_.CheckHostDestination(host_dst_, held_, round, "the host copy (device->host half)");
    return duration;
  }

 private:
  ProbeRun& run_;
  ProbeTimer& timer_;
  HostBuffer& host_src_;
  DeviceBuffer& dev_src_;
  HostBuffer& host_dst_;
  void* const dev_dst_;
  std::uint64_t held_ = 0;
};

}  // namespace

std::unique_ptr<TransferProbe> MakeCopyProbe(ProbeRun& run) {
  const Direction direction = run.spec().direction;
  if (direction == Direction::kBidirectional) return std::make_unique<CopyBothWays>(run);
  if (run.spec().mode == TransferMode::kPinned) return MakePinnedCopy(run);
  if (direction == Direction::kH2D) return std::make_unique<PageableToDevice>(run);
  return std::make_unique<PageableToHost>(run);
}

}  // namespace xferd::probes::cuda
