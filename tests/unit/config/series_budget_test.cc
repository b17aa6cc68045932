// The series budget config holds a file to (config::EstimateSeries, docs/metrics.md) is the
// count of what the exporter really exports: real cycles on the simulated device, counted in
// the exposition, for several plans. A family added or changed in exporter/metrics.cc fails
// this until the arithmetic counts it.
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>

#include "config/config.h"
#include "core/contention.h"
#include "core/health_tracker.h"
#include "core/link_errors.h"
#include "core/link_watch.h"
#include "core/plan.h"
#include "exporter/metrics.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/link_errors.h"
#include "xferd/probes/link_watch.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::exporter {
namespace {

// On `tree` (a typical path: a GPU behind a switch below a root port) or the built-in host
// (the GPU and its switch's port).
std::size_t SeriesOfGpu0(const core::Settings& settings, const std::string& tree = "hgx-8gpu") {
  prometheus::Registry registry;
  Metrics metrics(registry);
  probes::SimOptions options;
  options.time_scale = 0;
  if (!tree.empty())
    options.sysfs_root = std::filesystem::path(XFERD_TEST_DATA_DIR) / "sysfs" / tree;
  probes::SimBackend sim(options);
  const probes::DeviceInfo dev = sim.Devices().at(0);
  metrics.SetDevice(dev);
  metrics.SetPlan(settings);  // as the service does at the start
  core::HealthTracker health(settings);
  core::LinkErrorTracker errors;
  // Each probe inside its link-traffic window, as the scheduler runs it (the link readable).
  const auto load = probes::MakeSimGpuLoadReader(0, 0, &sim);
  const auto error_reader = probes::MakeSimLinkErrorReader(sim);
  // The link watch, polled between the cycles as its thread does.
  const auto link_reader = probes::MakeSimLinkStateReader(sim, 0);
  core::SteadyClock clock;
  core::LinkWatcher watch(*link_reader, {dev}, settings, clock, {});
  watch.SetPath(dev, sim.ReadLinkPath(dev.index));
  for (int cycle = 0; cycle < 3; ++cycle) {
    core::CycleObservation obs;
    obs.device = dev;
    obs.link_path = sim.ReadLinkPath(dev.index);
    metrics.RecordLinkPath(dev.index, obs.link_path);
    watch.Poll();
    obs.link_watch = watch.State(dev.uuid);
    metrics.RecordLinkWatch(dev.index, obs.link_watch);
    metrics.RecordLinkErrors(dev, errors.Observe(dev, error_reader->Read(dev, obs.link_path),
                                                 core::SteadyTime{} + std::chrono::minutes(cycle)));
    for (probes::ProbeSpec spec : core::PlanProbes(settings)) {
      spec.iterations = 4;
      load->BeginWindow(dev);
      probes::ProbeSample s = sim.Run(dev.index, spec);
      s.traffic = load->EndWindow(dev);
      s.contention = core::JudgeContention(s, {});
      metrics.RecordSample(dev, s);
      obs.samples.push_back(std::move(s));
    }
    metrics.RecordHealth(health.Observe(obs));
    metrics.RecordCycle(0.1, CycleResult::kOk);
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  std::istringstream lines(out.str());
  std::size_t count = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#' && line.find("gpu=\"0\"") != std::string::npos) ++count;
  }
  return count;
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
}

}  // namespace
}  // namespace xferd::exporter
