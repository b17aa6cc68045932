// A simulated host whose cycles are recorded into a Metrics as the service records them:
// each planned probe inside its link-traffic window and judged for contention, the path's
// link errors, the link watch's counts (polled once before each cycle, as its thread polls
// between them), the health verdicts, the cycle; the concurrent groups at the group cadence.
// Shared by the exporter's tests and the series budget's (tests/unit/config).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/contention.h"
#include "core/health_tracker.h"
#include "core/host_groups.h"
#include "core/link_errors.h"
#include "core/link_watch.h"
#include "core/plan.h"
#include "exporter/metrics.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/link_errors.h"
#include "xferd/probes/link_watch.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::exporter::recording {

// The simulated HGX node of tests/data/sysfs/hgx-8gpu: 8 GPUs, each behind a PCIe switch (its
// two ports) below a root port, 2 GPUs a switch; or another tree of tests/data/sysfs; "" the
// built-in host of `devices` GPUs (the GPU and its switch's port). No real time passes.
inline probes::SimOptions SimHost(const std::string& tree = "hgx-8gpu", int devices = 1) {
  probes::SimOptions options;
  options.time_scale = 0;
  options.devices = devices;
  if (!tree.empty()) {
    options.sysfs_root = std::filesystem::path(XFERD_TEST_DATA_DIR) / "sysfs" / tree;
  }
  return options;
}

// The exposition of a collectable (the registry, or what Metrics::Exposition serves).
inline std::string Render(const prometheus::Collectable& collectable) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, collectable.Collect());
  return out.str();
}

class RecordedHost {
 public:
  // Every GPU of `options` made known to `metrics` (SetDevice), then the plan (SetPlan).
  RecordedHost(probes::SimOptions options, core::Settings settings, Metrics& metrics)
      : settings_(std::move(settings)),
        sim_(std::move(options)),
        metrics_(metrics),
        health_(settings_),
        link_reader_(probes::MakeSimLinkStateReader(sim_, 0)),
        watch_(*link_reader_, sim_.Devices(), settings_, clock_, {}) {
    for (const probes::DeviceInfo& dev : sim_.Devices()) {
      metrics_.SetDevice(dev);
      watch_.SetPath(dev, sim_.ReadLinkPath(dev.index));
    }
    metrics_.SetPlan(settings_);
  }

  // One cycle on every GPU: each planned probe with `iterations` transfers.
  void Cycle(int iterations = 4) {
    const auto load = probes::MakeSimGpuLoadReader(0, 0, &sim_);
    const auto reader = probes::MakeSimLinkErrorReader(sim_);
    now_ += std::chrono::minutes(1);
    watch_.Poll();
    for (const probes::DeviceInfo& dev : sim_.Devices()) {
      core::CycleObservation obs;
      obs.device = dev;
      obs.link_path = sim_.ReadLinkPath(dev.index);
      metrics_.RecordLinkPath(dev.index, obs.link_path);
      obs.link_watch = watch_.State(dev.uuid);
      metrics_.RecordLinkWatch(dev.index, obs.link_watch);
      metrics_.RecordLinkErrors(dev, errors_.Observe(dev, reader->Read(dev, obs.link_path), now_));
      obs.link_errors = errors_.Growth(dev.uuid);
      for (probes::ProbeSpec spec : core::PlanProbes(settings_)) {
        spec.iterations = iterations;
        load->BeginWindow(dev);
        probes::ProbeSample s = sim_.Run(dev.index, spec);
        s.traffic = load->EndWindow(dev);
        s.contention = core::JudgeContention(s, {});
        metrics_.RecordSample(dev, s, 0, core::KeepsHistogram(spec, settings_));
        obs.samples.push_back(std::move(s));
      }
      metrics_.RecordHealth(health_.Observe(obs));
      metrics_.RecordSchedule(dev.index, 1.0, 0);  // as the service does after each cycle
    }
    metrics_.RecordCycle(0.1, CycleResult::kOk);
  }

  // Every concurrent group of the host probed at once, each planned direction.
  void Groups(int iterations = 4) {
    std::vector<probes::LinkPath> paths;
    for (const auto& dev : sim_.Devices()) paths.push_back(sim_.ReadLinkPath(dev.index));
    for (const core::HostGroup& group : core::FindGroups(sim_.Devices(), paths)) {
      for (probes::ProbeSpec spec : core::PlanConcurrent(settings_)) {
        spec.iterations = iterations;
        core::GroupRun run;
        run.group = group;
        run.spec = spec;
        for (int gpu : group.gpus) run.devices.push_back(sim_.Devices().at(gpu));
        run.samples = sim_.RunConcurrent(group.gpus, spec);
        metrics_.RecordConcurrent(run, core::GroupBand(group, settings_));
      }
    }
  }

  // A reload to other settings (the profile, the plan), as the service applies one.
  void Reload(core::Settings settings) {
    settings_ = std::move(settings);
    health_.Reconfigure(settings_);
    metrics_.SetPlan(settings_);
  }

  probes::SimBackend& sim() { return sim_; }
  const core::Settings& settings() const { return settings_; }

 private:
  core::Settings settings_;
  probes::SimBackend sim_;
  Metrics& metrics_;
  core::HealthTracker health_;
  core::LinkErrorTracker errors_;
  core::SteadyTime now_{};
  core::SteadyClock clock_;  // the link watch's (no thread: Cycle polls it)
  std::unique_ptr<probes::LinkStateReader> link_reader_;
  core::LinkWatcher watch_;
};

}  // namespace xferd::exporter::recording
