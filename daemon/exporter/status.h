// The status API, GET /api/v1/status: per GPU its verdict, each series against its band and
// baseline, the causes with their advice, the link and its errors, the contention state,
// when each probe last ran; and the incident log. One versioned JSON document, described
// field by field in docs/http.md ("The status API").
//
// One source, two views: the service hands the board the very values it hands Metrics (each
// probe's sample, each GPU's link path and health), in the same callbacks, so the document
// and /metrics cannot disagree (tests/integration/test_status_api.py compares every field).
//
// The document is assembled from one table of fields per object (status.cc), the tables of
// docs/http.md in code; the status page (status_page.h) and `xferd status` are views of the
// document's text, never a second source.
//
// Use (the service):
//   StatusBoard board(incidents);  board.SetDevice(dev);
//   on each probe: metrics.RecordSample(...); board.RecordSample(dev, sample);
//   on each cycle, per GPU: board.RecordHealth(health, verdict, busy);
//   on the config's load and each reload: board.RecordConfigLoad(...)
//   on a request: board.Render(daemon_status, now)
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/cycle_pipeline.h"
#include "core/freshness.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"
#include "core/link_errors.h"
#include "core/scheduler.h"
#include "exporter/metrics.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::exporter {

// The document's "version": a change that removes or renames a field, or changes what one
// means, takes a new version (and a new path, /api/v2/status); new fields do not.
inline constexpr int kStatusVersion = 1;

// The readings each series keeps for its `recent` list (the status page plots them): the
// last kRecentReadings judged readings, each its time and value (16 bytes), in a ring per
// series that holds no more: 512 bytes per series, ~7 KB per GPU with the shipped plan's
// 13 series, and a ring of a series the plan dropped goes with it.
inline constexpr std::size_t kRecentReadings = 32;

// The configuration's last load: at the start, or the last reload (SIGHUP).
struct ConfigLoad {
  bool successful = true;
  std::chrono::system_clock::time_point time;
  int reloads = 0;    // reloads asked since the start (0: the configuration is the start's)
  std::string error;  // why the last reload failed, as the log says it; "" when it did not
};

// One error counter on a GPU's PCIe path (the kernel's AER counters of each device, NVML's
// replay counter), as the status document lists it. Until the service hands a GPU's reading
// over (RecordLinkErrors), its "link.errors" says the counters are not read.
struct LinkErrorCounter {
  std::string device;  // the PCI address on the path it was read from (the GPU's for replays)
  std::string
      counter;  // e.g. "aer_dev_correctable", "aer_rootport_total_err_fatal", "nvml_pcie_replay"
  std::string source;     // "aer" or "nvml_replay", as xferd_pcie_error_source_readable says
  std::string aer_class;  // "correctable", "nonfatal", "fatal"; "" for replays
  bool readable = false;  // the source was read and trusted this cycle
  std::optional<std::uint64_t> value;  // the count as read, as the counter series shows it
  std::string reason;                  // why not readable: "no AER counters in sysfs", ...
};

// An evidence record kept for a GPU (core/evidence.h), as the status document links it.
struct EvidenceLink {
  std::string record;  // its file name in the evidence directory
  std::string path;    // where it is
  std::chrono::system_clock::time_point incident_time;
  std::size_t bytes = 0;
};

// The evidence records as a whole: where, how many are kept, what became of them.
struct EvidenceSummary {
  std::string dir;
  std::size_t keep = 0;
  std::uint64_t written = 0, dropped = 0;
  std::string last_problem;
};

// What the service knows of itself when a request comes in.
struct DaemonStatus {
  bool healthy = true;
  std::string reason;  // as /healthz says it
  std::uint64_t cycles = 0;
  std::optional<double> last_cycle_age_s;  // nullopt before the first cycle ended
  double uptime_s = 0;                     // since the service started, on its clock
  double stale_after_s = 0;                // /healthz calls the loop stale past this age
  double interval_s = 0;
  int consecutive_bad = 0;
  std::string summary;  // HealthTracker::Summary, the STATUS line
  // The daemon's clock now: what the readings' ages and the series' next runs are counted
  // on (nullopt: not shown), and how long a reading counts (core/freshness.h).
  std::optional<core::SteadyTime> now;
  core::FreshnessBounds freshness;
  EvidenceSummary evidence;
};

// One GPU's schedule after a cycle (core::DeviceCycle): its allowance and, per planned
// series, why it runs, whether the allowance held it back and when it runs next.
struct GpuSchedule {
  double allowance_s = 0, capacity_s = 0, reserve_s = 0, duty_cycle = 0;
  int held_back = 0;
  std::vector<core::DeviceCycle::Outlook> series;
};

// A series' last judged readings: kRecentReadings at most, the oldest dropped first.
class RecentReadings {
 public:
  struct Reading {
    core::SteadyTime at;
    double bytes_per_s = 0;
  };
  // A reading taken at `at`; one at the time of the last is the same reading, not added.
  void Add(core::SteadyTime at, double bytes_per_s);
  std::size_t size() const { return count_; }
  const Reading& operator[](std::size_t i) const {  // 0: the oldest kept
    return ring_[(next_ + kRecentReadings - count_ + i) % kRecentReadings];
  }

 private:
  std::array<Reading, kRecentReadings> ring_{};
  std::size_t next_ = 0, count_ = 0;
};

// What the board holds of one GPU: each record as the service handed it over (status.cc's
// tables make the document of it).
struct GpuRecord {
  using ProbeKey = std::tuple<probes::TransferMode, probes::Direction, std::uint64_t>;
  struct ProbeRecord {
    std::chrono::system_clock::time_point last_run;
    ProbeResult result = ProbeResult::kOk;
    std::string message;
    std::optional<std::chrono::system_clock::time_point> last_success;
  };
  probes::DeviceInfo info;
  std::optional<probes::LinkPath> path;
  std::optional<core::DeviceHealth> health;
  core::DeviceVerdict verdict = core::DeviceVerdict::kPending;
  bool busy = false;
  std::map<ProbeKey, ProbeRecord> probes;
  // Contention, as the last ok probe saw it (what xferd_gpu_load_readable and
  // xferd_foreign_traffic_bytes_per_second show).
  std::optional<bool> traffic_readable;
  std::optional<double> foreign_h2d, foreign_d2h;
  std::optional<probes::ProbeSpec> last_probe;
  probes::ContentionState last_contention = probes::ContentionState::kUnknown;
  std::optional<std::vector<LinkErrorCounter>> link_errors;
  std::optional<GpuSchedule> schedule;
  std::optional<core::LinkWatchState> link_watch;
  int probed_through = -1;                    // the MIG GPU instance id the last probe went through
  std::optional<EvidenceLink> evidence;       // the newest evidence record kept
  std::map<ProbeKey, RecentReadings> recent;  // of the series `health` names, no others
};

// The document's fields, each as a path ("gpus[].series[].recent"): what docs/http.md
// must name (a unit test holds it to that).
std::vector<std::string> StatusFieldNames();

// Thread-safe: the Record* methods from the probe thread, Render from the HTTP threads.
// What a cycle came to reaches it as a consumer of the core::CyclePipeline, as it reaches
// Metrics: the board shows what the metrics export.
class StatusBoard final : public core::CycleConsumer {
 public:
  explicit StatusBoard(const core::IncidentLog& incidents);

  // From the pipeline: each GPU's health and verdict and, after a cycle, its schedule; the
  // link's errors and watch.
  void OnLinkErrors(const probes::DeviceInfo& device,
                    const core::LinkErrorReading& reading) override;
  void OnLinkWatch(const probes::DeviceInfo& device, const core::LinkWatchState& state) override;
  void OnJudged(const core::GpuJudgement& judgement) override;

  void SetDevice(const probes::DeviceInfo& device);
  void RecordLinkPath(int gpu, const probes::LinkPath& path);
  void RecordSample(const probes::DeviceInfo& device, const probes::ProbeSample& sample);
  // A probe that did not run (busy) or never answered (a hung probe: kTimeout).
  void RecordSkipped(int gpu, const probes::ProbeSpec& spec, ProbeResult result);
  // After each cycle: the GPU's health, its verdict (IncidentLog::Observe) and whether the
  // busy detector skipped it.
  void RecordHealth(const core::DeviceHealth& health, core::DeviceVerdict verdict, bool busy);
  // After each cycle: the GPU's allowance and the schedule of its series.
  void RecordSchedule(int gpu, GpuSchedule schedule);
  // The link error counters of one GPU's path as judged this cycle (the reading
  // Metrics::RecordLinkErrors publishes), replacing the last ones.
  void RecordLinkErrors(const probes::DeviceInfo& device, const core::LinkErrorReading& reading);
  // The link watch's counts of one GPU, as Metrics::RecordLinkWatch is handed them (any
  // thread). Until the first, its "link.watch" says the links are not watched.
  void RecordLinkWatch(int gpu, const core::LinkWatchState& state);
  // The configuration as loaded at the start (reload = false) or by a reload, as
  // Metrics::RecordConfigReload is told: applied, or refused with `error`.
  void RecordConfigLoad(bool reload, bool successful, std::chrono::system_clock::time_point time,
                        const std::string& error);
  // The newest evidence record kept for a GPU (from the evidence writer's thread).
  void RecordEvidence(int gpu, EvidenceLink link);

  // The document (JSON text, one line). `now` stamps it.
  std::string Render(const DaemonStatus& daemon, std::chrono::system_clock::time_point now) const;

  // Moves with every Record* and SetDevice (under the lock that Render reads under): a
  // document rendered at one generation holds every record made before it.
  std::uint64_t Generation() const { return generation_; }

 private:
  const core::IncidentLog& incidents_;
  mutable std::mutex mutex_;
  std::map<int, GpuRecord> devices_;  // by GPU index
  ConfigLoad config_load_;
  std::atomic<std::uint64_t> generation_{0};
  mutable std::size_t last_size_ = 0;  // the last document's text, with mutex_ held
};

}  // namespace xferd::exporter
