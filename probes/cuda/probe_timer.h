// The one timer of a probe: CUDA events recorded on the probe's own streams (lowest
// priority, non-blocking) and read once the device has passed them, and the wall clock for
// calls that are synchronous. Every wait is bounded by the probe's deadline and ends on a
// stop request. No CUDA header here.
#pragma once

#include <chrono>
#include <stop_token>

#include "probes/cuda/transfer_probe.h"
#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

struct DeviceState;

// The events a transfer records, by role. Each probe uses the ones it needs.
enum class Mark {
  kBegin,   // before the transfer's first device work (its preparation): device time
  kStart,   // the timed section starts
  kStop,    // the timed section ends (on stream 0)
  kSecond,  // a second mark: the second stream's stop, or the bound of an untimed setup
  kEnd,     // after the checksum reached the host: device time
};
inline constexpr int kMarkCount = 5;

// How to wait for an event: spin where the wall clock is the measurement; otherwise the
// events carry the timing and a short sleep keeps the probe off the CPU.
enum class Wait { kSpin, kSleep };

class ProbeTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // The deadline runs from now: make the timer right before the first transfer.
  ProbeTimer(DeviceState& state, const ProbeSpec& spec, std::stop_token stop,
             const Progress& progress);

  // Records `mark` on one of the probe's streams (0: its own).
  void Record(Mark mark, int stream = 0);
  // Records `mark` on the legacy default stream, where synchronous pageable copies run.
  void RecordOnLegacyStream(Mark mark);
  // `stream` waits, on the device, until `mark` has passed.
  void StreamWaits(int stream, Mark mark);
  // Streams 1 .. streams-1 start where stream 0 recorded kStart.
  void Fork(int streams);
  // Stream 0 waits for what streams 1 .. streams-1 have enqueued so far.
  void Join(int streams);
  // Until the device has passed `mark`: ProbeAbort kTimeout past the deadline (saying how
  // many transfers were done), kError "cancelled" on a stop request.
  void Await(Mark mark, Wait wait);
  // Device time between two marks that have passed.
  double Seconds(Mark from, Mark to);

  // The wall clock, for synchronous calls: Now() before, SecondsSince() after.
  static Clock::time_point Now() { return Clock::now(); }
  static double SecondsSince(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  DeviceState& state_;
  const ProbeSpec& spec_;
  std::stop_token stop_;
  const Progress& progress_;
  Clock::time_point deadline_;
};

}  // namespace xferd::probes::cuda
