// `xferd check-config FILE`: validate without running, for CI and before a reload; with
// --json, the plan the file resolves to, from the same core functions `xferd run` and
// `xferd probe` use.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cmd/backend.h"
#include "cmd/band_output.h"
#include "cmd/commands.h"
#include "config/config.h"
#include "core/band.h"
#include "core/plan.h"
#include "xferd/probes/nvml.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::core;

namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

const char* ProfileName(const Config& c) {
  return c.metrics_profile == Settings::MetricsProfile::kFleet ? "fleet" : "full";
}

// Confidential computing on this host as the daemon would read it: NVML's, or the
// simulated host's.
probes::ConfidentialComputing HostCc(const Config& c, bool simulate) {
  if (c.simulate || simulate) {
    probes::ConfidentialComputing cc;
    cc.state = c.sim.confidential_computing ? probes::CcState::kOn : probes::CcState::kOff;
    if (c.sim.confidential_computing) cc.gpus_ready = c.sim.cc_ready;
    cc.detail = c.sim.confidential_computing ? "simulated" : "";
    return cc;
  }
  return probes::ReadConfidentialComputing(*probes::OpenNvml());
}

void PrintSummary(const std::string& file, const Config& c) {
  std::printf("%s: OK\n", file.c_str());
  std::printf("  listen:     %s%s (TLS %s, basic auth %s)\n", c.listen_address.c_str(),
              c.telemetry_path.c_str(), c.web.TlsEnabled() ? "on" : "off",
              c.web.AuthEnabled() ? "on" : "off");
  if (!c.web_config_file.empty()) std::printf("  web config: %s\n", c.web_config_file.c_str());
  std::printf("  state dir:  %s\n", c.state_dir.c_str());
  if (!c.textfile_path.empty()) std::printf("  textfile:   %s\n", c.textfile_path.c_str());
  std::printf(
      "  interval:   %s (jitter %.0f%%), cycle budget %s, probe deadline %s, duty cycle <= %g%%\n",
      FormatDuration(c.interval).c_str(), c.jitter * 100, FormatDuration(c.cycle_budget).c_str(),
      FormatDuration(c.probe_deadline).c_str(), c.max_duty_cycle * 100);
  std::vector<std::string> modes;
  for (probes::TransferMode mode : c.modes) modes.emplace_back(probes::ToString(mode));
  const bool bidirectional =
      c.bidirectional &&
      std::find(c.modes.begin(), c.modes.end(), probes::TransferMode::kPinned) != c.modes.end();
  std::printf("  modes:      %s%s\n", Join(modes).c_str(),
              bidirectional ? " (+ pinned bidirectional)" : "");
  std::vector<std::string> sizes;
  for (std::uint64_t size : c.sizes) sizes.push_back(probes::FormatSize(size));
  std::printf("  sizes:      %s, %d iterations after %d warm-up\n", Join(sizes).c_str(),
              c.iterations, c.warmup);
  std::printf("  gpus:       %s\n", c.gpus.empty() ? "all" : Join(c.gpus).c_str());
  for (const BandOverride& band : c.bands) {
    std::printf("  band:       gpu %s %s .. %s\n", band.gpu.c_str(),
                FormatBandwidth(band.lower_bytes_per_s).c_str(),
                FormatBandwidth(band.upper_bytes_per_s).c_str());
  }
  const SeriesEstimate series = EstimateSeries(c);
  const std::string degraded = series.per_degraded_pair > 0
                                   ? ", at most +" + std::to_string(series.per_degraded_pair) +
                                         " per degraded mode and direction"
                                   : "";
  std::printf(
      "  metrics:    %s profile, %zu series per GPU on a typical path (+%zu on a "
      "multi-GPU host)%s\n",
      ProfileName(c), series.per_gpu, series.concurrent_per_gpu, degraded.c_str());
  if (c.simulate) {
    std::printf("  simulate:   %d device(s), gen%dx%d, %zu fault(s)\n", c.sim.devices,
                c.sim.link_gen, c.sim.link_width, c.sim.faults.size());
  }
  probes::DeviceInfo host;
  host.cc = HostCc(c, false);
  host.mig.mode = probes::MigMode::kUnknown;  // per GPU: `xferd probe` reads it
  const std::string shape = ShapeText(host);
  std::printf("  shape:      %s\n", shape.substr(0, shape.find("; MIG")).c_str());
}

// The GPUs the simulated device offers that the config selects, with their bands.
std::vector<std::pair<probes::DeviceInfo, ExpectedBand>> SimulatedBands(Config config) {
  config.simulate = true;
  const Backend made = MakeBackend(config, "check-config");
  std::vector<std::pair<probes::DeviceInfo, ExpectedBand>> bands;
  for (const probes::DeviceInfo& d : SelectConfigured(made.backend->Devices(), config)) {
    bands.emplace_back(d, ResolveBand(config, d, made.backend->ReadLinkPath(d.index)));
  }
  return bands;
}

void PrintPlan(const Config& c, bool simulate) {
  // Which probes the band holds depends on each GPU's link (core::HoldOf): on the simulated
  // GPUs, held where every one holds it; without them, by what the config alone says.
  std::vector<std::pair<probes::DeviceInfo, ExpectedBand>> simulated;
  if (c.simulate || simulate) simulated = SimulatedBands(c);
  ExpectedBand linkless;
  linkless.chunk_bytes = c.chunk_bytes;
  nlohmann::json probes = nlohmann::json::array();
  for (const probes::ProbeSpec& spec : PlanProbes(c)) {
    bool held = HeldToBand(spec.mode, spec.direction, spec.size_bytes, linkless);
    for (const auto& [device, band] : simulated) {
      held = held && HeldToBand(spec.mode, spec.direction, spec.size_bytes, band);
    }
    probes.push_back({{"mode", probes::ToString(spec.mode)},
                      {"direction", probes::ToString(spec.direction)},
                      {"size_bytes", spec.size_bytes},
                      {"deadline_s", spec.deadline.count() / 1e3},
                      {"headline", IsHeadline(spec, c)},
                      {"held_to_band", held}});
  }
  nlohmann::json bands = nlohmann::json::array();
  for (const BandOverride& b : c.bands) {
    bands.push_back({{"gpu", b.gpu},
                     {"lower_bytes_per_s", b.lower_bytes_per_s},
                     {"upper_bytes_per_s", b.upper_bytes_per_s}});
  }
  nlohmann::json doc{{"file", c.source.string()},
                     {"simulate", c.simulate || simulate},
                     {"gpus", c.gpus},
                     {"probes", probes},
                     {"bands", bands},
                     {"verdict",
                      {{"band_min_size_bytes", kBandMinSizeBytes},
                       {"band_lower_fraction", c.band_lower_fraction},
                       {"band_upper_fraction", c.band_upper_fraction},
                       {"consecutive_bad", c.consecutive_bad},
                       {"drift_fraction", c.drift_fraction}}}};
  // What the file costs a Prometheus: docs/metrics.md, "Series budget" and "Profiles".
  const SeriesEstimate series = EstimateSeries(c);
  doc["series"] = {{"profile", ProfileName(c)},
                   {"per_gpu", series.per_gpu},
                   {"concurrent_per_gpu", series.concurrent_per_gpu},
                   {"per_degraded_pair", series.per_degraded_pair}};
  if (c.simulate || simulate) {
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& [device, band] : simulated) {
      devices.push_back({{"index", device.index},
                         {"uuid", device.uuid},
                         {"shape", ShapeJson(device)},
                         {"expected_band", BandJson(band)}});
    }
    doc["devices"] = std::move(devices);
  }
  doc["confidential_computing"] = CcJson(HostCc(c, simulate));
  std::printf("%s\n", doc.dump(2).c_str());
}

}  // namespace

int CheckConfigCommand(const CheckConfigOptions& options) {
  const Config config = LoadConfig(options.file);
  if (options.json) {
    PrintPlan(config, options.simulate);
  } else {
    PrintSummary(options.file, config);
  }
  return kExitOk;
}

}  // namespace xferd::cmd
