#include "probes/cuda/transfer_probe.h"

#include <algorithm>
#include <cstdint>

#include "probes/cuda/probe_abort.h"

namespace xferd::probes::cuda {

void RunTransfers(TransferProbe& probe, const ProbeSpec& spec, const std::stop_token& stop,
                  Progress& progress, ProbeSample& sample) {
  sample.durations_s.reserve(static_cast<std::size_t>(std::max(1, spec.iterations)));
  // The device time the sample books (what the probe costs), and the last transfer's share.
  double previous = 0;
  int total = 0;
  for (int i = 0;; ++i) {
    if (stop.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    // Decided before the transfer, so the last one is checked in full (IsLastTransfer).
    const double before = sample.device_time_s;
    const Round round{i, IsLastTransfer(spec, i, before, previous)};
    probe.Prepare(round);
    probe.Timed(round);
    const double d = probe.Verify(round);
    ++progress.done;
    previous = sample.device_time_s - before;
    if (i >= spec.warmup) sample.durations_s.push_back(d);
    if (round.last) {
      total = i + 1;
      break;
    }
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

bool Steady(const std::vector<double>& durations) {
  if (durations.size() < static_cast<std::size_t>(kSteadyRounds)) return false;
  const auto tail = durations.end() - kSteadyRounds;
  const auto [lo, hi] = std::minmax_element(tail, durations.end());
  return *lo > 0 && *hi <= *lo * (1.0 + kSteadySpread);
}

std::vector<double> WarmUntilSteady(TransferProbe& probe, const std::stop_token& stop,
                                    Progress& progress) {
  // Round indexes of their own, so no timed round's pattern repeats a warm-up's.
  constexpr int kFirstIndex = 1 << 20;
  std::vector<double> durations;
  while (!Steady(durations) && static_cast<int>(durations.size()) < kMaxFirstUseRounds) {
    if (stop.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    const Round round{kFirstIndex + static_cast<int>(durations.size()), false};
    probe.Prepare(round);
    probe.Timed(round);
    durations.push_back(probe.Verify(round));
    ++progress.done;
  }
  return durations;
}

}  // namespace xferd::probes::cuda
