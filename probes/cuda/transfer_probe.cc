#include "probes/cuda/transfer_probe.h"

#include <cstdint>

#include "probes/cuda/probe_abort.h"

namespace xferd::probes::cuda {

void RunTransfers(TransferProbe& probe, const ProbeSpec& spec, const std::stop_token& stop,
                  Progress& progress, ProbeSample& sample) {
  const int total = spec.warmup + spec.iterations;
  sample.durations_s.reserve(spec.iterations);
  for (int i = 0; i < total; ++i) {
    if (stop.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    const Round round{i, i == total - 1};
    probe.Prepare(round);
    probe.Timed(round);
    const double d = probe.Verify(round);
    ++progress.done;
    if (i >= spec.warmup) sample.durations_s.push_back(d);
  }
  const int copies = total + probe.Finish(sample);
  // What crossed the link, for the contention judgement: managed memory migrates its pages
  // both ways each transfer (home first, then where the transfer takes them).
  const bool both = spec.direction == Direction::kBidirectional ||
                    spec.mode == TransferMode::kManaged ||
                    spec.mode == TransferMode::kManagedPrefetch;
  const std::uint64_t bytes = spec.size_bytes * static_cast<std::uint64_t>(copies);
  sample.link_h2d_bytes = both || spec.direction == Direction::kH2D ? bytes : 0;
  sample.link_d2h_bytes = both || spec.direction == Direction::kD2H ? bytes : 0;
}

}  // namespace xferd::probes::cuda
