// zero_copy: the transfer is a kernel reading or writing mapped host memory over the link
// with 16-byte accesses, timed by events (event_timed_probe.h).
#include <memory>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/event_timed_probe.h"
#include "probes/cuda/kernels.h"

namespace xferd::probes::cuda {

std::unique_ptr<TransferProbe> MakeZeroCopyProbe(ProbeRun& run) {
  HostBuffer& mapped = run.state().mapped;
  if (run.spec().direction == Direction::kH2D) {
    // Host to device: a kernel reads the mapped buffer uncached; the checksum it computes on
    // the way is the correctness check.
    return MakeEventTimedProbe(
        run, LandsOnDevice{mapped, nullptr, "what the kernel read"},
        [&run, &mapped] { run.EnqueueDeviceCheck(mapped.device_ptr, true); });
  }
  // Device to host: a kernel writes the pattern into the mapped buffer; the host checks it.
  return MakeEventTimedProbe(run, LandsOnHost{nullptr, mapped, "what the kernel wrote"},
                             [&run, &mapped] {
                               Check(LaunchFill(mapped.device_ptr, run.size(), kStaticSalt, nullptr,
                                                run.state().blocks, run.Stream()),
                                     "fill kernel");
                             });
}

}  // namespace xferd::probes::cuda
