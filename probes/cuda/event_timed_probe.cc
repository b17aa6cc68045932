#include "probes/cuda/event_timed_probe.h"

#include <utility>

namespace xferd::probes::cuda {
namespace {

// The shape both share: the timed section between kStart and kStop, and what Finish adds.
class EventTimedProbe : public TransferProbe {
 public:
  EventTimedProbe(ProbeRun& run, TimedWork timed, FinishWork finish)
      : run_(run), timer_(run.timer()), timed_(std::move(timed)), finish_(std::move(finish)) {}

  void Timed(Round) final {
    timer_.Record(Mark::kStart);
    timed_();
    timer_.Record(Mark::kStop);
  }

  int Finish(ProbeSample& sample) final { return finish_ ? finish_(sample) : 0; }

 protected:
  ProbeRun& run_;
  ProbeTimer& timer_;

 private:
  const TimedWork timed_;
  const FinishWork finish_;
};

class ToDevice final : public EventTimedProbe {
 public:
  ToDevice(ProbeRun& run, LandsOnDevice lands, TimedWork timed, FinishWork finish)
      : EventTimedProbe(run, std::move(timed), std::move(finish)), lands_(lands) {}

  void Prepare(Round) override {
    run_.EnsureHostPattern(lands_.source);
    if (lands_.destination == nullptr && run_.options().corrupt_transfers) {
      static_cast<unsigned char*>(lands_.source.ptr())[run_.size() / 2] ^= 0xFF;
      lands_.source.pattern_bytes = 0;
    }
    timer_.Record(Mark::kBegin);
    if (lands_.destination != nullptr) run_.PoisonDevice(lands_.destination);
    run_.ZeroChecksum();
  }

  double Verify(Round round) override {
    if (lands_.destination != nullptr) {
      run_.DamageOnDevice(lands_.destination);
      run_.EnqueueDeviceCheck(lands_.destination, false);
    }
    run_.FetchChecksum();
    const double duration = timer_.Seconds(Mark::kStart, Mark::kStop);
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kEnd));
    run_.ExpectDeviceChecksum(run_.StaticChecksum(), lands_.what, round);
    return duration;
  }

 private:
  const LandsOnDevice lands_;
};

class ToHost final : public EventTimedProbe {
 public:
  ToHost(ProbeRun& run, LandsOnHost lands, TimedWork timed, FinishWork finish)
      : EventTimedProbe(run, std::move(timed), std::move(finish)), lands_(lands) {}

  void Prepare(Round round) override {
    if (lands_.source != nullptr) run_.EnsureDevicePattern(*lands_.source);
    held_ = run_.StartWriting(lands_.destination);
    run_.PoisonHost(lands_.destination.ptr(), round);
    timer_.Record(Mark::kBegin);
  }

  double Verify(Round round) override {
    timer_.Await(Mark::kStop, Wait::kSleep);
    const double duration = timer_.Seconds(Mark::kStart, Mark::kStop);
    run_.AddDeviceTime(timer_.Seconds(Mark::kBegin, Mark::kStop));
    run_.CheckHostDestination(lands_.destination, held_, round, lands_.what);
    return duration;
  }

 private:
  const LandsOnHost lands_;
  std::uint64_t held_ = 0;
};

}  // namespace

std::unique_ptr<TransferProbe> MakeEventTimedProbe(ProbeRun& run, LandsOnDevice lands,
                                                   TimedWork timed, FinishWork finish) {
  return std::make_unique<ToDevice>(run, lands, std::move(timed), std::move(finish));
}

std::unique_ptr<TransferProbe> MakeEventTimedProbe(ProbeRun& run, LandsOnHost lands,
                                                   TimedWork timed, FinishWork finish) {
  return std::make_unique<ToHost>(run, lands, std::move(timed), std::move(finish));
}

}  // namespace xferd::probes::cuda
