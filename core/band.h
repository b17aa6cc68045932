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

// The expected band of one GPU: a [[health.band]] naming it (by index or UUID, any case),
// else the band of its narrowest PCIe link with the settings' fractions.
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
  kLatencyBound,  // smaller than kBandMinSizeBytes
};
// "ok", "below band", "n/a (not link-bound)", "n/a (no expected band)",
// "n/a (latency-bound size)": the words of `xferd probe`'s verdict column.
std::string_view ToString(BandVerdict verdict);

// Whether a result of this (mode, direction, size) is held to the band at all: link-bound
// (probes::IsLinkBound) and at least kBandMinSizeBytes.
bool HeldToBand(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes);

// The band rule for a result of `median_bytes_per_s`: link-bound (mode, direction) only
// (probes::IsLinkBound), sizes of at least kBandMinSizeBytes, compared per direction with
// the band's lower bound.
BandVerdict JudgeBand(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes, double median_bytes_per_s,
                      const probes::ExpectedBand& band);

}  // namespace xferd::core
