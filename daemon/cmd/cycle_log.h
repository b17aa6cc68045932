// What `xferd run` logs of each cycle, as a consumer of the core::CyclePipeline: a line per
// (mode, direction) whose verdict flipped, with its figures and causes; a GPU whose verdict
// went stale and back; each concurrent run; the cycle line (or the confirmation round's)
// with the STATUS text systemd is sent.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "core/clock.h"
#include "core/cycle_pipeline.h"
#include "core/health_tracker.h"

namespace xferd::cmd {

class CycleLog final : public core::CycleConsumer {
 public:
  // `health` (for the STATUS text) and `clock` must outlive it.
  CycleLog(const core::HealthTracker& health, core::Clock& clock);

  void OnConcurrent(const core::GroupRun& run, const core::ExpectedBand& band) override;
  void OnJudged(const core::GpuJudgement& judgement) override;
  void OnCycleEnd(const core::CycleReport& report, const core::Settings& settings) override;

  // "cycle 12: ok: 13/13 within band": the STATUS text after the last cycle ("" before the
  // first). Any thread.
  std::string Status() const;

 private:
  // One line per (mode, direction) whose verdict flipped: the figures that made it flip and
  // the likely causes with their advice, so the log says what to check, not only that.
  void LogVerdictChanges(const core::DeviceHealth& health);
  // A GPU whose verdict went stale (its headline series unmeasured past their bound) and
  // back.
  void LogStaleChange(const core::DeviceHealth& health, bool stale, const core::Settings& settings);

  const core::HealthTracker& health_;
  core::Clock& clock_;
  std::map<int, bool> stale_said_;  // per GPU: its STALE line was said (the probe thread)
  mutable std::mutex status_mutex_;
  std::string status_;
};

}  // namespace xferd::cmd
