// Probes as `xferd probe` runs them once: on their own thread, asked to stop when they
// overrun their deadline (a hung driver call must not hang the command).
#pragma once

#include <vector>

#include "xferd/probes/backend.h"

namespace xferd::cmd {

// One probe. While it runs, `link` (if given) is read again and again and the widest
// reading kept: idle links train down, so a path read with no traffic would understate it.
probes::ProbeSample RunWatched(probes::TransferBackend& backend, int device,
                               const probes::ProbeSpec& spec, probes::LinkPath* link = nullptr);

// One spec on every device of `devices` at once (TransferBackend::RunConcurrent).
std::vector<probes::ProbeSample> RunConcurrentWatched(probes::TransferBackend& backend,
                                                      const std::vector<int>& devices,
                                                      const probes::ProbeSpec& spec);

}  // namespace xferd::cmd
