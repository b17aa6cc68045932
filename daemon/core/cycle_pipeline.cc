#include "core/cycle_pipeline.h"

#include <chrono>
#include <utility>

namespace xferd::core {

CyclePipeline::CyclePipeline(HealthTracker& health, IncidentLog& incidents,
                             probes::TransferBackend& backend, Clock& clock)
    : health_(health), incidents_(incidents), backend_(backend), clock_(clock) {}

void CyclePipeline::SetLinkErrorReader(std::shared_ptr<probes::LinkErrorReader> reader) {
  link_error_reader_ = std::move(reader);
}

void CyclePipeline::SetLinkWatch(LinkWatcher* watch) {
  link_watch_ = watch;
}

void CyclePipeline::Add(CycleConsumer& consumer) {
  consumers_.push_back(&consumer);
}

probes::DeviceInfo CyclePipeline::Shaped(const probes::DeviceInfo& device,
                                         const std::vector<probes::DeviceInfo>& now) {
  probes::DeviceInfo shaped = device;
  for (const probes::DeviceInfo& d : now) {
    if (d.index != device.index) continue;
    shaped.cc = d.cc;
    shaped.mig = d.mig;
  }
  return shaped;
}

void CyclePipeline::ReadLinkErrors(const DeviceCycle& dc, CycleObservation& obs) {
  if (!link_error_reader_) return;
  // A busy cycle read no path: the counters are read on the path as it stands.
  const probes::LinkPath path =
      dc.link_read ? dc.link_path : backend_.ReadLinkPath(dc.device.index);
  const LinkErrorReading reading =
      link_errors_.Observe(dc.device, link_error_reader_->Read(dc.device, path), clock_.Now());
  for (CycleConsumer* c : consumers_) c->OnLinkErrors(dc.device, reading);
  obs.link_errors = link_errors_.Growth(dc.device.uuid);
  obs.link_error_reading = reading;
}

void CyclePipeline::Fold(const CycleReport& report, const Settings& settings) {
  std::lock_guard lock(judging_);
  // Concurrent runs first: the causes they show are part of each GPU's health below.
  for (const GroupRun& run : report.concurrent) {
    health_.ObserveConcurrent(run);
    const ExpectedBand band = GroupBand(run.group, settings);
    for (CycleConsumer* c : consumers_) c->OnConcurrent(run, band);
  }
  const std::vector<probes::DeviceInfo> devices = backend_.Devices();
  for (const DeviceCycle& dc : report.devices) {
    CycleObservation obs;
    obs.device = Shaped(dc.device, devices);
    obs.link_path = dc.link_path;
    obs.samples = dc.samples;
    obs.busy = dc.skipped_busy;
    ReadLinkErrors(dc, obs);
    obs.at = clock_.Now();
    obs.at_wall = std::chrono::system_clock::now();
    obs.confirmation = report.confirmation;
    for (const DeviceCycle::Outlook& o : dc.outlook) obs.planned.push_back(o.spec);
    if (link_watch_ != nullptr) {
      // The capability of each link as read while probing; and what the watch saw since.
      if (dc.link_read) link_watch_->SetPath(dc.device, dc.link_path);
      obs.link_watch = link_watch_->State(dc.device.uuid);
      for (CycleConsumer* c : consumers_) c->OnLinkWatch(dc.device, obs.link_watch);
    }
    const DeviceHealth health = health_.Observe(obs);
    std::optional<Incident> logged;
    const DeviceVerdict verdict =
        incidents_.Observe(health, obs.busy, settings.consecutive_bad, obs.at_wall, &logged);
    const GpuJudgement judged{.device = obs.device,
                              .observation = &obs,
                              .cycle = &dc,
                              .health = health,
                              .verdict = verdict,
                              .busy = obs.busy,
                              .confirmation = report.confirmation,
                              .settings = settings,
                              .logged = logged ? &*logged : nullptr};
    for (CycleConsumer* c : consumers_) c->OnJudged(judged);
  }
  for (CycleConsumer* c : consumers_) c->OnCycleEnd(report, settings);
}

void CyclePipeline::Expire(const Settings& settings) {
  std::lock_guard lock(judging_);
  const std::vector<DeviceHealth> expired = health_.Expire(clock_.Now());
  if (expired.empty()) return;
  const std::vector<probes::DeviceInfo> devices = backend_.Devices();
  for (const DeviceHealth& health : expired) {
    // Nothing was judged, time passed: it counts as no judgement (as a busy cycle).
    const DeviceVerdict verdict = incidents_.Observe(
        health, /*busy=*/true, settings.consecutive_bad, std::chrono::system_clock::now());
    probes::DeviceInfo device;
    for (const probes::DeviceInfo& d : devices) {
      if (d.uuid == health.uuid) device = d;
    }
    const GpuJudgement judged{.device = device,
                              .observation = nullptr,
                              .cycle = nullptr,
                              .health = health,
                              .verdict = verdict,
                              .busy = false,
                              .confirmation = false,
                              .settings = settings};
    for (CycleConsumer* c : consumers_) c->OnJudged(judged);
  }
}

void CyclePipeline::LinkWatchChanged(const probes::DeviceInfo& device,
                                     const LinkWatchState& state) {
  for (CycleConsumer* c : consumers_) c->OnLinkWatch(device, state);
}

}  // namespace xferd::core
