// The series budget config holds a file to (config::EstimateSeries, docs/metrics.md) is the
// count of what the exporter really exports: real cycles on the simulated device, counted in
// the exposition, for several plans and both metrics profiles. A family added or changed in
// exporter/families.def fails this until the arithmetic counts it.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "config/config.h"
#include "exporter/metrics.h"
#include "unit/config/config_testing.h"
#include "unit/exporter/recorded_host.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::exporter {
namespace {

// Sample lines of `text` labelled gpu="`gpu`".
std::size_t SeriesOfGpu(const std::string& text, int gpu) {
  const std::string needle = "gpu=\"" + std::to_string(gpu) + "\"";
  std::istringstream lines(text);
  std::size_t count = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#' && line.find(needle) != std::string::npos) ++count;
  }
  return count;
}

using recording::RecordedHost;
using recording::SimHost;

// `cycles` cycles of every GPU of `options`' host as the service runs them, and with
// `groups` every concurrent group probed after each; the exposition of the profile
// settings.metrics_profile names (what /metrics serves).
std::string Exposition(const core::Settings& settings, const probes::SimOptions& options,
                       int cycles = 3, bool groups = false) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  metrics.SetBuildInfo();
  RecordedHost host(options, settings, metrics);
  for (int cycle = 0; cycle < cycles; ++cycle) {
    host.Cycle();
    if (groups) host.Groups();
  }
  return recording::Render(*metrics.Exposition());
}

// On `tree` (a typical path: a GPU behind a switch below a root port) or the built-in host
// (the GPU and its switch's port).
std::size_t SeriesOfGpu0(const core::Settings& settings, const std::string& tree = "hgx-8gpu") {
  return SeriesOfGpu(Exposition(settings, SimHost(tree)), 0);
}

TEST(SeriesBudget, TheEstimateIsWhatTheExporterExports) {
  using probes::TransferMode;
  std::vector<core::Settings> plans(7);
  plans[1].sizes = {1 << 20, 4 << 20, 16 << 20};
  plans[2].modes = {TransferMode::kPinned, TransferMode::kPageable};
  plans[2].bidirectional = false;
  plans[3].modes = {TransferMode::kPinnedAsync};
  plans[4].modes = {TransferMode::kZeroCopy, TransferMode::kPinned};
  plans[4].sizes = {4096, 1 << 20};
  // Only what is probed has series: no run counters or band of the modes left out.
  plans[5].modes = {TransferMode::kPinned};
  plans[6].modes = {TransferMode::kManagedPrefetch};
  plans[6].sizes = {16 << 20, 64 << 20};
  for (const core::Settings& settings : plans) {
    EXPECT_EQ(config::EstimateSeries(settings).per_gpu, SeriesOfGpu0(settings))
        << settings.modes.size() << " modes, " << settings.sizes.size() << " sizes";
  }
  // Other paths: the link-error series follow the devices on them.
  EXPECT_EQ(config::EstimateSeries({}, {.devices = 2, .root_port = false}).per_gpu,
            SeriesOfGpu0({}, ""));
  EXPECT_EQ(config::EstimateSeries({}, {.devices = 4, .root_port = true}).per_gpu,
            SeriesOfGpu0({}, "igx-dgpu"));
  // The same plans in the fleet profile.
  for (core::Settings settings : plans) {
    settings.metrics_profile = core::Settings::MetricsProfile::kFleet;
    EXPECT_EQ(config::EstimateSeries(settings).per_gpu, SeriesOfGpu0(settings))
        << "fleet: " << settings.modes.size() << " modes, " << settings.sizes.size() << " sizes";
  }
  core::Settings fleet;
  fleet.metrics_profile = core::Settings::MetricsProfile::kFleet;
  EXPECT_EQ(config::EstimateSeries(fleet, {.devices = 2, .root_port = false}).per_gpu,
            SeriesOfGpu0(fleet, ""));
}

// The shipped config (deploy/xferd.toml) with its [metrics] profile set to `profile`.
config::Config Shipped(const std::string& profile) {
  std::string text = config::ReadAll(config::kExample);
  const std::string shipped = "\nprofile = \"full\"\n";
  const std::size_t at = text.find(shipped);
  EXPECT_NE(at, std::string::npos) << "deploy/xferd.toml: no [metrics] profile = \"full\"";
  if (at != std::string::npos)
    text.replace(at, shipped.size(), "\nprofile = \"" + profile + "\"\n");
  return config::ParseConfig(text, config::kExample);
}

// The figure: at most 60 series a GPU in the fleet profile, with the shipped config,
// on one simulated GPU and on 8 (the built-in host, each GPU alone, and the HGX node: 4
// switches of 2 GPUs), concurrent groups probed; the full profile within its 300.
TEST(SeriesBudget, TheFleetProfileStaysWithinSixtyPerGpuOnOneAndEightGpus) {
  const config::Config fleet = Shipped("fleet");
  const config::Config full = Shipped("full");
  ASSERT_EQ(fleet.metrics_profile, core::Settings::MetricsProfile::kFleet);
  struct Case {
    const char* host;
    probes::SimOptions options;
    int gpus;
  };
  const Case cases[] = {{"built-in, 1 GPU", SimHost(""), 1},
                        {"built-in, 8 GPUs", SimHost("", 8), 8},
                        {"HGX node, 8 GPUs", SimHost("hgx-8gpu"), 8}};
  for (const Case& c : cases) {
    const std::string fleet_text = Exposition(fleet, c.options, 2, true);
    const std::string full_text = Exposition(full, c.options, 2, true);
    for (int gpu = 0; gpu < c.gpus; ++gpu) {
      EXPECT_LE(SeriesOfGpu(fleet_text, gpu), 60u) << c.host << ", gpu " << gpu;
      EXPECT_LE(SeriesOfGpu(full_text, gpu), 300u) << c.host << ", gpu " << gpu;
    }
    std::printf("%s: %zu series for gpu 0 in the fleet profile, %zu in the full one\n", c.host,
                SeriesOfGpu(fleet_text, 0), SeriesOfGpu(full_text, 0));
  }
}

// A degraded GPU in the fleet profile shows the pairs that are degraded, each within what
// the estimate allows a degraded pair; the healthy GPU beside it shows none of them.
TEST(SeriesBudget, ADegradedGpuAddsItsDegradedPairsOnly) {
  core::Settings settings;
  settings.metrics_profile = core::Settings::MetricsProfile::kFleet;
  settings.consecutive_bad = 1;
  probes::SimOptions options = SimHost("", 2);
  probes::SimFault fault;
  fault.kind = probes::SimFault::Kind::kDegrade;
  fault.device = 1;
  fault.factor = 0.3;
  options.faults.push_back(fault);
  const std::string text = Exposition(settings, options, 3);
  const config::SeriesEstimate e =
      config::EstimateSeries(settings, {.devices = 2, .root_port = false});
  EXPECT_EQ(SeriesOfGpu(text, 0), e.per_gpu) << text;
  const std::size_t pairs = probes::AllModeDirections().size();
  const std::size_t headline = 2;
  EXPECT_GT(SeriesOfGpu(text, 1), e.per_gpu) << text;
  EXPECT_LE(SeriesOfGpu(text, 1), e.per_gpu + (pairs - headline) * e.per_degraded_pair) << text;
}

}  // namespace
}  // namespace xferd::exporter
