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

std::string ShapeText(const probes::DeviceInfo& device) {
  const probes::ConfidentialComputing& cc = device.cc;
  std::string text = "confidential computing " + std::string(probes::ToString(cc.state));
  std::string detail = cc.state == probes::CcState::kUnknown ? cc.problem : cc.detail;
  if (cc.gpus_ready) {
    detail += std::string(detail.empty() ? "" : ", ") +
              (*cc.gpus_ready ? "GPUs ready" : "GPUs NOT ready for work");
  }
  if (!detail.empty()) text += " (" + detail + ")";
  const probes::MigState& mig = device.mig;
  text += "; MIG " + std::string(probes::ToString(mig.mode));
  if (mig.Enabled()) {
    if (mig.instances.empty()) {
      text += ": no GPU instance";
    } else {
      text += fmt::format(": {} instance{} (", mig.instances.size(),
                          mig.instances.size() == 1 ? "" : "s");
      for (std::size_t i = 0; i < mig.instances.size(); ++i) {
        const probes::MigInstance& m = mig.instances[i];
        text += fmt::format("{}GPU_I_ID {} {}{}", i ? ", " : "", m.gpu_instance_id,
                            m.profile.empty() ? "profile unknown" : m.profile,
                            m.reachable ? "" : " not reachable until restart");
      }
      text += ")";
    }
  }
  if (!mig.problem.empty()) text += " (" + mig.problem + ")";
  return text;
}

nlohmann::json CcJson(const probes::ConfidentialComputing& cc) {
  return {{"state", probes::ToString(cc.state)},
          {"gpus_ready", cc.gpus_ready ? nlohmann::json(*cc.gpus_ready) : nlohmann::json()},
          {"detail", cc.detail},
          {"problem", cc.problem}};
}

nlohmann::json ShapeJson(const probes::DeviceInfo& device) {
  nlohmann::json instances = nlohmann::json::array();
  for (const probes::MigInstance& m : device.mig.instances) {
    instances.push_back(
        {{"gpu_instance_id", m.gpu_instance_id},
         {"compute_instance_id", m.compute_instance_id},
         {"profile", m.profile},
         {"uuid", m.uuid},
         {"copy_engines", m.copy_engines > 0 ? nlohmann::json(m.copy_engines) : nlohmann::json()},
         {"reachable", m.reachable}});
  }
  return {{"confidential_computing", CcJson(device.cc)},
          {"mig",
           {{"mode", probes::ToString(device.mig.mode)},
            {"whole_gpu_copy_engines", device.mig.whole_gpu_copy_engines > 0
                                           ? nlohmann::json(device.mig.whole_gpu_copy_engines)
                                           : nlohmann::json()},
            {"instances", instances},
            {"problem", device.mig.problem}}}};
}

}  // namespace xferd::cmd
