#include "cmd/cycle_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "core/band.h"
#include "core/freshness.h"
#include "platform/logging.h"

namespace xferd::cmd {

using namespace xferd::core;
using std::chrono::duration;

CycleLog::CycleLog(const HealthTracker& health, Clock& clock) : health_(health), clock_(clock) {}

std::string CycleLog::Status() const {
  std::lock_guard lock(status_mutex_);
  return status_;
}

void CycleLog::OnConcurrent(const GroupRun& run, const ExpectedBand& band) {
  std::string members;
  for (std::size_t i = 0; i < run.samples.size() && i < run.devices.size(); ++i) {
    const probes::ProbeSample& s = run.samples[i];
    members += fmt::format("{}{} {}", members.empty() ? "" : ", ", run.devices[i].index,
                           s.status == probes::ProbeStatus::kOk
                               ? fmt::format("{:.2f}", s.MedianBandwidth() / 1e9)
                               : std::string(probes::ToString(s.status)));
  }
  spdlog::info("concurrent {} pinned {}: GPUs {} GB/s; together {}{}", run.group.name,
               probes::ToString(run.spec.direction), members,
               run.AllOk() ? fmt::format("{:.2f} GB/s", run.Aggregate() / 1e9) : "n/a",
               band.Known() && AggregateHeldToBand(run.spec.direction)
                   ? fmt::format(" (expected {:.2f}-{:.2f})", band.lower_bytes_per_s / 1e9,
                                 band.upper_bytes_per_s / 1e9)
                   : "");
}

void CycleLog::OnJudged(const GpuJudgement& j) {
  LogVerdictChanges(j.health);
  LogStaleChange(j.health, j.verdict == DeviceVerdict::kStale, j.settings);
}

void CycleLog::LogVerdictChanges(const DeviceHealth& health) {
  for (const PairVerdict& v : health.verdicts) {
    if (!v.changed) continue;
    platform::ScopedLogFields fields(std::to_string(health.gpu),
                                     std::string(probes::ToString(v.mode)));
    // Each size's reading as the band sees it: per direction (both ways at once: half the
    // total, the total beside it), against the band of its own mode, where one holds it.
    const bool both = v.direction == probes::Direction::kBidirectional;
    std::string figures;
    bool held = false;
    for (const SeriesHealth& s : health.series) {
      if (s.mode != v.mode || s.direction != v.direction) continue;
      held = held || HeldToBand(s.mode, s.direction, s.size_bytes, health.band);
      figures += fmt::format(
          "{}{} {:.2f} GB/s{}{}{}{}", figures.empty() ? "" : ", ", probes::FormatSize(s.size_bytes),
          PerDirection(s.direction, s.median_bytes_per_s) / 1e9,
          both ? fmt::format(" per direction ({:.2f} both ways)", s.median_bytes_per_s / 1e9) : "",
          s.BaselineReference() > 0
              ? fmt::format(" ({}baseline {:.2f}{})",
                            s.peer_baseline_bytes_per_s > 0 ? "peers' " : "",
                            s.BaselineReference() / 1e9, both ? " both ways" : "")
              : "",
          s.Bad() ? " low" : "", s.stale ? " stale" : "");
    }
    if (health.band.Known() && held) {
      const ExpectedBand band = ModeBand(health.band, v.mode, v.direction);
      figures += fmt::format("; band {:.2f}-{:.2f} GB/s per direction",
                             band.lower_bytes_per_s / 1e9, band.upper_bytes_per_s / 1e9);
    }
    std::string causes;
    for (const Diagnosis& d : health.diagnoses) {
      causes += fmt::format("; likely {} ({}): {}", ToString(d.cause), d.detail, d.advice);
    }
    spdlog::log(v.degraded ? spdlog::level::warn : spdlog::level::info,
                "gpu {} {} {}: verdict {} ({}){}", health.gpu, probes::ToString(v.mode),
                probes::ToString(v.direction),
                v.degraded ? "DEGRADED"
                : v.stale  ? "stale (its DEGRADED rested on a reading too old; not measured since)"
                           : "back to ok",
                figures, causes);
  }
}

void CycleLog::LogStaleChange(const DeviceHealth& health, bool stale, const Settings& settings) {
  bool& was = stale_said_[health.gpu];
  if (stale == was) return;
  was = stale;
  platform::ScopedLogFields fields(std::to_string(health.gpu), "");
  if (stale) {
    spdlog::warn(
        "gpu {}: verdict STALE: its headline probes (pinned h2d and d2h) have no reading "
        "younger than {} ({} of its series stale): the GPU went unmeasured (busy, the cycle "
        "budget, failing probes: see the lines above); xferd health answers unknown until it "
        "is measured again",
        health.gpu, FormatSeconds(FreshnessOf(settings).headline_s, 0), health.StaleSeries());
  } else {
    spdlog::info("gpu {}: measured again: its verdict is current ({})", health.gpu,
                 health.Degraded() ? "DEGRADED" : "ok");
  }
}

void CycleLog::OnCycleEnd(const CycleReport& report, const Settings& settings) {
  (void)settings;
  const std::string summary = health_.Summary();
  if (report.confirmation) {
    std::string ran;
    for (const DeviceCycle& dc : report.devices) {
      for (const probes::ProbeSample& s : dc.samples) {
        ran +=
            fmt::format("{}gpu{} {} {} {:.2f} GB/s{}{}", ran.empty() ? "" : ", ", dc.device.index,
                        probes::ToString(s.spec.mode), probes::ToString(s.spec.direction),
                        s.MedianBandwidth() / 1e9,
                        s.spec.direction == probes::Direction::kBidirectional ? " both ways" : "",
                        s.Contended() ? " (contended)" : "");
      }
    }
    spdlog::info("cycle {} confirmation: {} ({:.3f} s device); {}", report.number,
                 ran.empty() ? "nothing ran" : ran, report.device_s, summary);
    std::lock_guard lock(status_mutex_);
    status_ = fmt::format("cycle {}: {}", report.number, summary);
    return;
  }
  const double duty = report.wall_s + report.next_in.count() / 1e3 > 0
                          ? report.device_s / (report.wall_s + report.next_in.count() / 1e3)
                          : 0;
  // What the allowance held back, and when the stalest of it is due, per GPU.
  std::string held;
  for (const DeviceCycle& dc : report.devices) {
    if (dc.held_back == 0) continue;
    std::optional<SteadyTime> latest;
    bool never = false;
    for (const DeviceCycle::Outlook& o : dc.outlook) {
      if (!o.held_back) continue;
      if (!o.next_run) never = true;
      if (o.next_run && (!latest || *o.next_run > *latest)) latest = o.next_run;
    }
    held += fmt::format(
        "{}gpu {}: {}{}", held.empty() ? "; " : ", ", dc.device.index, dc.held_back,
        never    ? ", some not within 2 h"
        : latest ? fmt::format(", all by {}",
                               FormatSeconds(duration<double>(*latest - clock_.Now()).count(), 0))
                 : "");
  }
  spdlog::info(
      "cycle {}: {} ok, {} contended, {} error, {} timeout, {} unsupported, {} skipped busy, "
      "{} over budget, {} held back (allowance{}); {:.3f} s wall, {:.3f} s device, duty {:.4f}; "
      "next in {:.1f} s; {}",
      report.number, report.ok - report.contended, report.contended, report.errors, report.timeouts,
      report.unsupported, report.skipped_busy, report.skipped_budget, report.held_back, held,
      report.wall_s, report.device_s, duty, report.next_in.count() / 1e3, summary);
  std::lock_guard lock(status_mutex_);
  status_ = fmt::format("cycle {}: {}", report.number, summary);
}

}  // namespace xferd::cmd
