#include "cmd/band_output.h"

#include <fmt/format.h>

namespace xferd::cmd {

std::string Gbps(double bytes_per_s) {
  return fmt::format("{:.2f}", bytes_per_s / 1e9);
}

std::string BandText(const core::ExpectedBand& band) {
  if (!band.Known()) return band.source;
  return fmt::format("{}-{} GB/s per direction ({})", Gbps(band.lower_bytes_per_s),
                     Gbps(band.upper_bytes_per_s), band.source);
}

nlohmann::json BandJson(const core::ExpectedBand& band) {
  return {{"lower_bytes_per_s", band.lower_bytes_per_s},
          {"upper_bytes_per_s", band.upper_bytes_per_s},
          {"source", band.source}};
}

nlohmann::json ModeHoldJson(const core::ExpectedBand& band, probes::TransferMode mode,
                            probes::Direction direction, std::uint64_t size_bytes) {
  const core::BandHold hold = core::HoldOf(mode, direction, size_bytes, band);
  const bool held = hold == core::BandHold::kHeld && band.Known();
  const core::ExpectedBand mode_band = core::ModeBand(band, mode, direction);
  const double share = core::ExpectedLinkShare(mode, direction, band);
  return {{"hold", core::ToString(hold)},
          {"lower_bytes_per_s", held ? nlohmann::json(mode_band.lower_bytes_per_s) : nullptr},
          {"upper_bytes_per_s", held ? nlohmann::json(mode_band.upper_bytes_per_s) : nullptr},
          {"expected_link_share", share > 0 ? nlohmann::json(share) : nullptr}};
}

}  // namespace xferd::cmd
