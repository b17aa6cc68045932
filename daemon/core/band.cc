#include "core/band.h"

#include <fmt/format.h>

#include "core/plan.h"

namespace xferd::core {

const ModeProfile& ProfileOf(probes::TransferMode mode, probes::Direction direction) {
  using probes::Direction;
  using probes::TransferMode;
  const bool h2d = direction != Direction::kD2H;
  // cost_fraction: about 0.7 x what each reached of a Gen5 x16 link (63 GB/s) in the
  // probe's device time on a healthy H200 (docs/gpu-results.md, 64 MiB, 22 transfers).
  static const ModeProfile kPageableH2D{1.0, 0.07}, kPageableD2H{1.0, 0.14};
  static const ModeProfile kPinned{1.0, 0.60}, kPinnedBoth{1.0, 0.50};
  static const ModeProfile kPinnedAsync{1.0, 0.40}, kZeroCopy{1.0, 0.60};
  static const ModeProfile kManagedH2D{1.0, 0.04}, kManagedD2H{1.0, 0.035};
  static const ModeProfile kPrefetchH2D{0.8, 0.09, 64ull << 20}, kPrefetchD2H{1.0, 0.08};
  switch (mode) {
    case TransferMode::kPageable: return h2d ? kPageableH2D : kPageableD2H;
    case TransferMode::kPinned:
      return direction == Direction::kBidirectional ? kPinnedBoth : kPinned;
    case TransferMode::kPinnedAsync: return kPinnedAsync;
    case TransferMode::kZeroCopy: return kZeroCopy;
    case TransferMode::kManaged: return h2d ? kManagedH2D : kManagedD2H;
    case TransferMode::kManagedPrefetch: return h2d ? kPrefetchH2D : kPrefetchD2H;
  }
  static const ModeProfile kOther;
  return kOther;
}

probes::ExpectedBand ModeBand(const probes::ExpectedBand& band, probes::TransferMode mode,
                              probes::Direction direction) {
  const double scale = ProfileOf(mode, direction).band_scale;
  if (scale == 1.0 || !band.Known()) return band;
  probes::ExpectedBand scaled = band;
  scaled.lower_bytes_per_s *= scale;
  scaled.upper_bytes_per_s *= scale;
  scaled.source = band.source + fmt::format(", x {:g} for {} {}", scale, probes::ToString(mode),
                                            probes::ToString(direction));
  return scaled;
}

probes::ExpectedBand ResolveBand(const Settings& settings, const probes::DeviceInfo& device,
                                 const probes::LinkPath& path) {
  for (const BandOverride& o : settings.bands) {
    if (NamesDevice(o.gpu, device)) return {o.lower_bytes_per_s, o.upper_bytes_per_s, "config"};
  }
  return probes::BandFromPath(path, settings.band_lower_fraction, settings.band_upper_fraction);
}

double PerDirection(probes::Direction direction, double bytes_per_s) {
  return direction == probes::Direction::kBidirectional ? bytes_per_s / 2 : bytes_per_s;
}

std::string_view ToString(BandVerdict verdict) {
  switch (verdict) {
    case BandVerdict::kOk: return "ok";
    case BandVerdict::kBelowBand: return "below band";
    case BandVerdict::kNotLinkBound: return "n/a (not link-bound)";
    case BandVerdict::kNoBand: return "n/a (no expected band)";
    case BandVerdict::kLatencyBound: return "n/a (under the band's size)";
  }
  return "unknown";
}

bool HeldToBand(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes) {
  return probes::IsLinkBound(mode, direction) &&
         size_bytes >= ProfileOf(mode, direction).band_min_size_bytes;
}

BandVerdict JudgeBand(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes, double median_bytes_per_s,
                      const probes::ExpectedBand& band) {
  if (!probes::IsLinkBound(mode, direction)) return BandVerdict::kNotLinkBound;
  if (!band.Known()) return BandVerdict::kNoBand;
  if (!HeldToBand(mode, direction, size_bytes)) return BandVerdict::kLatencyBound;
  if (PerDirection(direction, median_bytes_per_s) <
      ModeBand(band, mode, direction).lower_bytes_per_s) {
    return BandVerdict::kBelowBand;
  }
  return BandVerdict::kOk;
}

}  // namespace xferd::core
