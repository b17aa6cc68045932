// `xferd check-config FILE`: validate without running, for CI and before a reload.
#include <cstdio>
#include <string>

#include "cmd/commands.h"
#include "config/config.h"
#include "platform/exit_codes.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::core;
using namespace xferd::web;
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
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
  std::printf("  modes:      %s%s\n", Join(modes).c_str(),
              c.bidirectional ? " (+ pinned bidirectional)" : "");
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
  if (c.simulate) {
    std::printf("  simulate:   %d device(s), gen%dx%d, %zu fault(s)\n", c.sim.devices,
                c.sim.link_gen, c.sim.link_width, c.sim.faults.size());
  }
}

}  // namespace

int CheckConfigCommand(const std::string& file) {
  try {
    const Config config = LoadConfig(file);
    PrintSummary(file, config);
    return kExitOk;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitConfig;
  }
}

}  // namespace xferd::cmd
