// One cycle's report, judged once and handed to everything that shows or keeps it, in one
// pass (docs/architecture.md, "How a probe result flows in xferd run"). The scheduler says
// what ran; the pipeline reads what the cycle needs besides (the link's error counters, the
// link watch's counts, each GPU's shape as the backend has it now), judges each GPU
// (HealthTracker::Observe, the one judgement `xferd probe` makes too through DiagnoseOnce)
// and its verdict for those who act on it (IncidentLog::Observe), and hands every part to
// each consumer in turn: the metrics, the status board, the state file and textfile, the
// log. A consumer is a view; none judges again.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/band.h"
#include "core/clock.h"
#include "core/diagnosis.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"
#include "core/link_errors.h"
#include "core/link_watch.h"
#include "core/scheduler.h"
#include "core/settings.h"
#include "xferd/probes/backend.h"
#include "xferd/probes/link_errors.h"

namespace xferd::core {

// What one GPU came to after a cycle, a confirmation round or an expiry.
struct GpuJudgement {
  const probes::DeviceInfo& device;  // its shape as the backend has it now
  // What the cycle saw, and the scheduler's account of it (its allowance, what it held
  // back, when each series runs next); both null for an expiry: time passed, nothing was
  // measured, a verdict lapsed.
  const CycleObservation* observation = nullptr;
  const DeviceCycle* cycle = nullptr;
  const DeviceHealth& health;
  DeviceVerdict verdict = DeviceVerdict::kPending;
  bool busy = false;          // the busy detector skipped it this cycle: nothing ran
  bool confirmation = false;  // a fast-confirmation round's, which is no cycle
  const Settings& settings;   // the configuration in force
  // The incident IncidentLog::Observe logged for this judgement (a verdict changed); null
  // when none.
  const Incident* logged = nullptr;
};

// What takes a cycle's report. Each consumer gets every part of it once, in this order:
// the concurrent runs, then per GPU its link errors, its link watch and its judgement, then
// the end of the cycle. Called from the probe thread (OnLinkWatch also from the link
// watch's, when its counts change between cycles).
class CycleConsumer {
 public:
  virtual ~CycleConsumer() = default;
  virtual void OnConcurrent(const GroupRun& run, const ExpectedBand& band) {
    (void)run, (void)band;
  }
  virtual void OnLinkErrors(const probes::DeviceInfo& device, const LinkErrorReading& reading) {
    (void)device, (void)reading;
  }
  virtual void OnLinkWatch(const probes::DeviceInfo& device, const LinkWatchState& state) {
    (void)device, (void)state;
  }
  virtual void OnJudged(const GpuJudgement& judgement) { (void)judgement; }
  // After every GPU of a cycle or confirmation round (not after an expiry).
  virtual void OnCycleEnd(const CycleReport& report, const Settings& settings) {
    (void)report, (void)settings;
  }
};

class CyclePipeline {
 public:
  // `health`, `incidents`, `backend` and `clock` must outlive the pipeline.
  CyclePipeline(HealthTracker& health, IncidentLog& incidents, probes::TransferBackend& backend,
                Clock& clock);

  // Where the link's error counters are read after each cycle; none: not read.
  void SetLinkErrorReader(std::shared_ptr<probes::LinkErrorReader> reader);
  // The link watch whose counts go into each GPU's observation; none: not watched.
  void SetLinkWatch(LinkWatcher* watch);
  // In the order they are handed each part; before the first cycle.
  void Add(CycleConsumer& consumer);

  // A cycle or confirmation round (the scheduler's on_cycle). Fold and Expire may come from
  // any thread, one at a time.
  void Fold(const CycleReport& report, const Settings& settings);
  // Between cycles: the verdicts whose readings grew too old (HealthTracker::Expire).
  void Expire(const Settings& settings);
  // The link watch's counts of one GPU, as they change (its on_change hook, and once at the
  // start so its counters exist from the first scrape).
  void LinkWatchChanged(const probes::DeviceInfo& device, const LinkWatchState& state);

 private:
  // `device` with its CC and MIG shape as the backend has it now (start, reload).
  // `now`: the backend's devices, read once per cycle (each a copy of every GPU's info).
  static probes::DeviceInfo Shaped(const probes::DeviceInfo& device,
                                   const std::vector<probes::DeviceInfo>& now);
  void ReadLinkErrors(const DeviceCycle& cycle, CycleObservation& observation);

  HealthTracker& health_;
  IncidentLog& incidents_;
  probes::TransferBackend& backend_;
  Clock& clock_;
  std::shared_ptr<probes::LinkErrorReader> link_error_reader_;
  LinkErrorTracker link_errors_;
  LinkWatcher* link_watch_ = nullptr;
  std::vector<CycleConsumer*> consumers_;
  // One judgement at a time (Fold, Expire), so an older never overwrites a newer.
  std::mutex judging_;
};

}  // namespace xferd::core
