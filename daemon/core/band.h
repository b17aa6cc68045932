// The expected band of a GPU and the rule that holds a result to it: the one place both
// `xferd probe` (its verdict column) and `xferd run` (below_band, the verdict, the
// diagnosis) take them from.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/settings.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// Smaller transfers are dominated by their fixed latency (a few us), not the link: they are
// judged against their baseline only. At 4 MiB the floor costs under 5% even on Gen5 x16.
inline constexpr std::uint64_t kBandMinSizeBytes = 4ull << 20;

// What each (mode, direction) reaches on healthy hardware, in one table: how far the band
// holds it, and how fast it moves data for a cost estimate. Figures: docs/health.md
// ("Per-mode bands") and docs/gpu-results.md.
struct ModeProfile {
  // The share of the GPU's band (the band of pinned copies) a link-bound mode is held to:
  // 1 = the band as it is. managed_prefetch h2d reads 62-71 % of the link on healthy
  // H200s against pinned's 87 %, so the band's 0.63 would sit on its normal spread.
  double band_scale = 1.0;
  // A conservative share of the link's current rate it moves data at, warm-up, page
  // migrations and checks included: an unmeasured probe's device time is estimated from
  // it, so the allowance saves up enough before running it for the first time.
  double cost_fraction = 0.05;
  // The smallest transfer the band holds this mode at: kBandMinSizeBytes, or more where
  // the mode's share of the link was only measured at larger sizes. managed_prefetch h2d
  // read 27.8-36.0 GB/s at 16 MiB on a healthy H200 (44-57 % of the link, under its band)
  // and 38.9-45.0 at 64 MiB: smaller sizes are held to their baseline only.
  std::uint64_t band_min_size_bytes = kBandMinSizeBytes;
};
const ModeProfile& ProfileOf(probes::TransferMode mode, probes::Direction direction);

// The band `mode` and `direction` are held to: `band` scaled by its profile's band_scale.
probes::ExpectedBand ModeBand(const probes::ExpectedBand& band, probes::TransferMode mode,
                              probes::Direction direction);

// The expected band of one GPU: a [[health.band]] naming it (by index or UUID, any case),
// else the band of its narrowest PCIe link with the settings' fractions. It is the band of
// pinned copies; ModeBand gives each mode's.
probes::ExpectedBand ResolveBand(const Settings& settings, const probes::DeviceInfo& device,
                                 const probes::LinkPath& path);

// What the band (per direction) is compared with: both directions at once count the bytes
// of both, so half of them.
double PerDirection(probes::Direction direction, double bytes_per_s);

enum class BandVerdict {
  kOk,            // at or above the band's lower bound
  kBelowBand,     // under it: a bad cycle for the verdict
  kNotLinkBound,  // the mode is bounded by staging or page faults, not the link
  kNoBand,        // no band is known for this GPU
  kLatencyBound,  // smaller than the mode's band_min_size_bytes
};
// "ok", "below band", "n/a (not link-bound)", "n/a (no expected band)",
// "n/a (under the band's size)": the words of `xferd probe`'s verdict column.
std::string_view ToString(BandVerdict verdict);

// Whether a result of this (mode, direction, size) is held to the band at all: link-bound
// (probes::IsLinkBound) and at least its profile's band_min_size_bytes.
bool HeldToBand(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes);

// The band rule for a result of `median_bytes_per_s`: link-bound (mode, direction) only
// (probes::IsLinkBound), sizes of at least band_min_size_bytes, compared per direction with
// the lower bound of the mode's band (ModeBand of the GPU's `band`).
BandVerdict JudgeBand(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes, double median_bytes_per_s,
                      const probes::ExpectedBand& band);

}  // namespace xferd::core
