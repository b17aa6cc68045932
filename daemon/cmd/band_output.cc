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

}  // namespace xferd::cmd
