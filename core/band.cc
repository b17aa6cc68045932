#include "core/band.h"

#include "core/plan.h"

namespace xferd::core {

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
    case BandVerdict::kLatencyBound: return "n/a (latency-bound size)";
  }
  return "unknown";
}

bool HeldToBand(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes) {
  return probes::IsLinkBound(mode, direction) && size_bytes >= kBandMinSizeBytes;
}

BandVerdict JudgeBand(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes, double median_bytes_per_s,
                      const probes::ExpectedBand& band) {
  if (!probes::IsLinkBound(mode, direction)) return BandVerdict::kNotLinkBound;
  if (!band.Known()) return BandVerdict::kNoBand;
  if (!HeldToBand(mode, direction, size_bytes)) return BandVerdict::kLatencyBound;
  if (PerDirection(direction, median_bytes_per_s) < band.lower_bytes_per_s) {
    return BandVerdict::kBelowBand;
  }
  return BandVerdict::kOk;
}

}  // namespace xferd::core
