// The timed section the event-timed probes share (pinned, pinned_async and zero_copy, each
// way): one piece of work enqueued between the timer's kStart and kStop events on the
// probe's streams, and the untimed steps around it, which depend only on where the data
// lands. Names CUDA runtime types (through probe_run.h): private to probes/cuda.
#pragma once

#include <functional>
#include <memory>

#include "probes/cuda/probe_run.h"

namespace xferd::probes::cuda {

// The data lands on the device: the host source holds the pattern, the device destination
// is poisoned before the transfer, and a kernel checksums what arrived.
struct LandsOnDevice {
  HostBuffer& source;
  // nullptr: the timed work checksums the data itself as it reads it (zero_copy's read
  // kernel); the corrupt_transfers hook then damages the source instead.
  void* destination;
  const char* what;  // for the corruption message: "the device copy"
};

// The data lands in host memory: the device source holds the pattern, the host destination
// is poisoned before the transfer, and the host checks what arrived.
struct LandsOnHost {
  DeviceBuffer* source;  // nullptr: the timed work writes the pattern itself (a fill kernel)
  HostBuffer& destination;
  const char* what;
};

// Enqueues the timed work on the probe's streams (stream 0 last, joined if it forks).
using TimedWork = std::function<void()>;
// TransferProbe::Finish: what else the mode measures after the last transfer.
using FinishWork = std::function<int(ProbeSample&)>;

std::unique_ptr<TransferProbe> MakeEventTimedProbe(ProbeRun& run, LandsOnDevice lands,
                                                   TimedWork timed, FinishWork finish = {});
std::unique_ptr<TransferProbe> MakeEventTimedProbe(ProbeRun& run, LandsOnHost lands,
                                                   TimedWork timed, FinishWork finish = {});

}  // namespace xferd::probes::cuda
