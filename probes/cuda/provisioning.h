// What a probe needs before its first transfer: the CUDA context, the probe's streams
// (lowest priority), its events, and the buffers of its mode, allocated on first use and
// kept; host memory on the GPU's NUMA node, pinned memory within probe.pinned_cap. And where
// the host buffers landed. No CUDA header here.
#pragma once

#include "xferd/probes/cuda_backend.h"
#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

struct DeviceState;

// Allocates what `spec` needs and `state` does not hold yet; ProbeAbort kError with the
// fix when memory runs out or the pinned cap would be passed. Call with the GPU current.
void Provision(DeviceState& state, const CudaOptions& options, const ProbeSpec& spec);

// The NUMA node of the mode's host buffer into sample.host_numa_node and, when it is not on
// the GPU's node, why into sample.host_placement.
void ReportPlacement(const DeviceState& state, TransferMode mode, ProbeSample& sample);

}  // namespace xferd::probes::cuda
