// Did another process share the link while a probe ran? The one judgement of a probe's
// link-traffic window (probes::LinkTraffic): what the driver counted on the link, minus
// what the probe itself moved, is foreign traffic. A contended reading measures the
// neighbour, not the hardware: it is neither judged against the band nor learned into a
// baseline (docs/health.md, "Contended samples").
#pragma once

#include <optional>

#include "core/settings.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// Link counters count headers, framing and flow control on top of the payload: 55 GB/s of
// copies on a PCIe Gen5 x16 H200 read as ~59 GB/s (7 %), and smaller packets cost more.
// So a probe's own bytes are expected at up to this much in their direction ...
inline constexpr double kOwnTrafficOverhead = 1.10;
// ... and up to this share of them the other way (read requests for host-to-device DMA,
// acknowledgements).
inline constexpr double kOwnTrafficReverse = 0.20;
// Foreign traffic below this share of the probe's own rate is within the counters' noise.
inline constexpr double kForeignNoiseShare = 0.10;
// Counters that saw less than this share of the probe's own bytes in a direction it moved
// them do not count this link (a direction stuck at 0, a value the driver had not
// refreshed): the window is no reading, and contention unknown rather than clear.
inline constexpr double kOwnTrafficMinSeen = 0.5;

struct ContentionThresholds {
  // Foreign traffic (both directions summed) at or above this is contention; the busy
  // check's PCIe threshold ([busy] pcie_bytes_per_second).
  double foreign_bytes_per_s = 2e9;
};

// The thresholds `settings` set ([busy] pcie_bytes_per_second).
ContentionThresholds ContentionThresholdsOf(const Settings& settings);

// The foreign traffic (bytes/s, both directions summed) at which a probe moving
// `own_bytes_per_s` of its own counts as contended: the threshold, or the counters' noise
// on the probe's own rate where that is more. After the probe has ended its own rate is 0.
double ForeignTrafficLimit(const ContentionThresholds& thresholds, double own_bytes_per_s);

// Judge `sample`'s traffic window: kUnknown without one (no NVML, unsupported GPU), for
// a probe that did not finish (its own bytes are not known), or when the counted window
// missed most of the probe's own bytes (kOwnTrafficMinSeen); else kContended when the
// foreign traffic over the window, or in the reading right after it, reaches its
// ForeignTrafficLimit, kClear otherwise. The foreign
// rates are filled in either way.
probes::Contention JudgeContention(const probes::ProbeSample& sample,
                                   const ContentionThresholds& thresholds);

}  // namespace xferd::core
