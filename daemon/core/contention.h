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

// A neighbour moving N bytes/s over a link the probe keeps full takes about N from the
// probe's reading. A healthy reading sits well inside the band (pinned copies read 0.80-0.87
// of the link, the band's lower edge is 0.63 of it), so a neighbour of more than
// (1 - band_lower_fraction) of the link pushes even a perfect reading below the band, and
// the room a healthy reading has is about half that. A quarter of it is the neighbour that
// counts: smaller ones cannot move a healthy reading out of the band.
inline constexpr double kNeighbourShareOfHeadroom = 0.25;

struct ContentionThresholds {
  // Foreign traffic (both directions summed) at or above this is contention wherever the
  // link's own threshold is higher: the busy check's PCIe threshold ([busy]
  // pcie_bytes_per_second), the figure on fast links (x16, NVLink-C2C).
  double foreign_bytes_per_s = 2e9;
  // What the GPU's path carries per direction when healthy (HostLinkRate, the narrowest
  // link's capability); 0 = unknown, the figure above alone.
  double link_bytes_per_s = 0;
  double band_lower_fraction = 0.63;
};

// The thresholds `settings` set ([busy] pcie_bytes_per_second, [health]
// band_lower_fraction) on a path carrying `link_bytes_per_s` (HostLinkRate; 0 = unknown).
ContentionThresholds ContentionThresholdsOf(const Settings& settings, double link_bytes_per_s);

// The neighbour that can move a healthy reading below the band on a link that carries
// `link_bytes_per_s` per direction: kNeighbourShareOfHeadroom x (1 - band_lower_fraction)
// x the link; 0 when the link is unknown.
double LinkForeignThreshold(double link_bytes_per_s, double band_lower_fraction);

// The foreign traffic (bytes/s, both directions summed) at which a probe moving
// `own_bytes_per_s` of its own counts as contended: the lower of the configured figure
// and the link's own threshold (LinkForeignThreshold), or the counters' noise on the
// probe's own rate where that is more. After the probe has ended its own rate is 0.
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
