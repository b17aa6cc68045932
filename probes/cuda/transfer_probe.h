// A probe of one mode in one direction, shaped as nvbandwidth's and nvbench's testcases
// are: prepare, the timed section, verify. And the one loop that runs a probe's warm-ups and
// timed transfers. No CUDA header here: the loop runs on any probe, a test's fake too.
#pragma once

#include <stop_token>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

// Which transfer of the probe this is: the warm-ups come first, from 0. The last transfer
// is checked in full; the others sparsely (host destinations) or in full (device ones).
struct Round {
  int index = 0;
  bool last = false;
};

// Transfers finished so far, warm-ups included: a timeout says how far the probe got.
struct Progress {
  int done = 0;
};

// One transfer is Prepare, Timed, Verify, called in that order with nothing in between, so
// the CUDA calls a transfer makes are the same whatever step they belong to.
class TransferProbe {
 public:
  virtual ~TransferProbe() = default;

  // Untimed: the source holds the pattern, the destination is poisoned, the checksum slot
  // is zeroed; the transfer's first event (kBegin) comes before any of it on the device.
  virtual void Prepare(Round round) = 0;
  // The measured transfer: between the timer's start and stop events on the probe's
  // streams, or the wall clock around a call that is synchronous.
  virtual void Timed(Round round) = 0;
  // Untimed: waits for the transfer, adds its device time to the sample, then checks what
  // arrived (ProbeAbort "corrupted transfer: ..." if it is wrong). Returns the duration of
  // the timed section in seconds.
  virtual double Verify(Round round) = 0;
  // After the last transfer: what else the mode measures (pinned_async: the overlap of
  // copies with compute). Returns how many more copies of the size crossed the link.
  virtual int Finish(ProbeSample& sample) {
    (void)sample;
    return 0;
  }
};

// Runs spec.warmup + spec.iterations transfers of `probe`, keeps the durations of the timed
// ones, lets the probe finish, and sets the bytes that crossed the link each way. A stop
// request ends the probe before its next transfer (ProbeAbort kError "cancelled").
void RunTransfers(TransferProbe& probe, const ProbeSpec& spec, const std::stop_token& stop,
                  Progress& progress, ProbeSample& sample);

// The managed modes' first use on a device: untimed rounds until the driver's migration
// path has settled, so no probe's figure depends on how many transfers it ran. The unified
// memory driver's first migrations of a buffer pay for what later ones reuse (GPU chunks,
// page tables, host pages): a probe of few transfers read 8.3 GB/s where one of 20 read
// 10.9 on the H200 (docs/probe.md, "Warm-up"). Rounds run until the last kSteadyRounds
// durations lie within kSteadySpread of each other, at least kSteadyRounds and at most
// kMaxFirstUseRounds; stop ends them early.
inline constexpr int kSteadyRounds = 3;
inline constexpr double kSteadySpread = 0.05;
inline constexpr int kMaxFirstUseRounds = 24;
// Whether `durations` (in the order run) end in a steady stretch by that rule.
bool Steady(const std::vector<double>& durations);
// Runs `probe` until Steady or kMaxFirstUseRounds; the rounds' durations, in order.
std::vector<double> WarmUntilSteady(TransferProbe& probe, const std::stop_token& stop,
                                    Progress& progress);

}  // namespace xferd::probes::cuda
