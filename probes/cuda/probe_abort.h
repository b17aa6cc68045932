// How a probe ends early: with the status and message its sample gets. No CUDA header here.
#pragma once

#include <string>

#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

// Thrown by any step of a probe; CudaBackend::Run turns it into the sample's status and
// message and drains what the probe may have left enqueued.
struct ProbeAbort {
  ProbeStatus status;
  std::string message;
};

}  // namespace xferd::probes::cuda
