// What `xferd run` writes to disk after each cycle, as a consumer of the core::CyclePipeline:
// the state file (the baselines and the incident log, atomically) and, when configured, the
// node_exporter textfile. A failing write is said when it starts and when it stops failing,
// and counted (xferd_state_write_errors_total, xferd_textfile_write_errors_total).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include "config/config.h"
#include "core/cycle_pipeline.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"
#include "core/state_file.h"
#include "exporter/metrics.h"

namespace xferd::cmd {

class Persistence final : public core::CycleConsumer {
 public:
  // Each must outlive it; `config` gives the configuration in force (the textfile's path).
  Persistence(core::StateFile& state, const core::HealthTracker& health,
              const core::IncidentLog& incidents, exporter::Metrics& metrics,
              std::function<std::shared_ptr<const config::Config>()> config);

  // After every cycle and confirmation round (the probe thread).
  void OnCycleEnd(const core::CycleReport& report, const core::Settings& settings) override;

 private:
  void SaveState();
  void WriteTextfile(const config::Config& config);

  core::StateFile& state_;
  const core::HealthTracker& health_;
  const core::IncidentLog& incidents_;
  exporter::Metrics& metrics_;
  std::function<std::shared_ptr<const config::Config>()> config_;
  bool state_write_failing_ = false, textfile_failing_ = false;
  std::filesystem::path textfile_swept_;  // leftovers removed beside this one
};

}  // namespace xferd::cmd
