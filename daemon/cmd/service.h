// The daemon once it is configured: everything that lives from start to stop. The main
// thread (Run) owns signals, sd_notify and the watchdog; one probe thread runs the
// scheduler's cycles; the HTTP server serves from its own threads. How a probe result
// flows from the backend to /metrics, the verdict and the log: docs/architecture.md.
//
// The seams (time, the backend, busy detection, systemd, signals, reloading the config
// and what else follows a reload) are injected, so tests drive a whole service in-process
// (tests/unit/cmd/service_test.cc).
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cmd/cycle_log.h"
#include "cmd/persistence.h"
#include "config/config.h"
#include "core/busy_detector.h"
#include "core/clock.h"
#include "core/cycle_pipeline.h"
#include "core/evidence.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"
#include "core/link_errors.h"
#include "core/link_watch.h"
#include "core/scheduler.h"
#include "core/state_file.h"
#include "exporter/metrics.h"
#include "exporter/process_metrics.h"
#include "exporter/routes.h"
#include "exporter/status.h"
#include "platform/signals.h"
#include "platform/systemd_notifier.h"
#include "web/http_server.h"
#include "xferd/probes/backend.h"
#include "xferd/probes/link_errors.h"
#include "xferd/probes/link_watch.h"

namespace xferd::cmd {

struct ServiceSeams {
  core::Clock* clock = nullptr;  // the scheduler's time and the stall check's
  platform::Notifier* notifier = nullptr;
  platform::SignalSource* signals = nullptr;
  // The configuration again, for a reload (SIGHUP). Throws ConfigError or another
  // platform::Error for a bad file or flag: the running configuration is then kept.
  std::function<config::Config()> reload;
  // The busy detector for a configuration (at start and on each reload).
  std::function<std::unique_ptr<core::BusyDetector>(const config::Config&)> make_busy;
  // Called on the main thread with a reloaded configuration that is about to apply, before
  // the probe loop sees it: what else follows the file (the simulated device its faults).
  std::function<void(const config::Config&)> on_reload;
  // The link's error counters on each GPU's path, read after every cycle; none: not read.
  std::shared_ptr<probes::LinkErrorReader> link_errors;
  // The links of each GPU's path, read between probes by the link watch ([health]
  // link_watch_interval); none: not watched.
  std::shared_ptr<probes::LinkStateReader> link_state;
  std::uint64_t jitter_seed = 1;
  std::string config_name = "(defaults)";  // for the log
  // A reload (SIGHUP) came while the configuration was read at start: the file may have
  // changed after it was read, so the service reloads once it serves.
  bool reload_at_start = false;
  // Changes to how evidence records are kept (tests: a disk that fills up, another lspci).
  std::function<void(core::EvidenceOptions&)> evidence_options;
};

class Service {
 public:
  // `backend` must outlive the service; `devices` are the GPUs it probes.
  Service(config::Config config, probes::TransferBackend& backend,
          std::vector<probes::DeviceInfo> devices, ServiceSeams seams);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Serves and probes until a stop signal; returns the exit code (0, or 70 when the probe
  // loop failed). Throws platform::Error (EX_OSERR) when the endpoint cannot be served. A
  // probe thread stuck in a device call past the stop bound ends the process (_exit): the
  // state was saved after the last cycle, so nothing is lost. So does a stop while the
  // state file or a reloaded config is still being read (a hung file system).
  int Run();

  // What /metrics serves besides the process metrics: for tests and the textfile.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The status document (/api/v1/status) as it would be served now. Thread-safe.
  std::string StatusDocument() const;

 private:
  std::shared_ptr<const config::Config> CurrentConfig() const;
  void StartReload();                                     // main thread
  bool ReloadReady() const;                               // main thread
  void FinishReload();                                    // main thread
  exporter::HealthState Healthz() const;                  // HTTP threads
  void CheckStall();                                      // main thread
  void StartServing(const config::Config& config);        // main thread
  void StopServing();                                     // main thread
  void OnEvidence(const core::EvidenceWritten& written);  // the evidence writer's thread
  void StartHealthSocket(const config::Config& config,
                         const web::HttpServer::Handler& handler);  // main thread
  void Prepare(const config::Config& config);                       // main thread, first
  class ProbeThread;
  int Supervise(ProbeThread& probe);  // main thread: signals, READY, STATUS, watchdog

  mutable std::mutex config_mutex_;
  std::shared_ptr<const config::Config> config_;
  probes::TransferBackend& backend_;
  std::vector<probes::DeviceInfo> devices_;
  ServiceSeams seams_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<exporter::ProcessMetrics> process_metrics_;
  // xferd_http_refusals_total, read from http_ and health_socket_ at each scrape (routes
  // hold collectables weakly: this keeps it).
  std::shared_ptr<prometheus::Collectable> refusal_metrics_;
  exporter::Metrics metrics_;
  core::HealthTracker health_;
  core::IncidentLog incidents_;
  // The status API: fed the values metrics_ is fed, in the same callbacks.
  exporter::StatusBoard status_board_;
  // Evidence kept when a GPU turns DEGRADED (its writer thread reports to OnEvidence, which
  // uses the members above: declared after them, so it stops first).
  std::unique_ptr<core::EvidenceKeeper> evidence_;
  core::StateFile state_;
  CycleLog cycle_log_;       // the log lines of each cycle and the STATUS text
  Persistence persistence_;  // the state file and the textfile, after each cycle
  // Each cycle's report judged once and handed to metrics_, status_board_, evidence_,
  // persistence_ and cycle_log_ in that order (Prepare adds them).
  core::CyclePipeline pipeline_;
  std::unique_ptr<core::Scheduler> scheduler_;
  mutable std::mutex servers_mutex_;  // http_ and health_socket_ as refusal_metrics_ reads them
  std::unique_ptr<core::LinkWatcher> link_watch_;  // with seams_.link_state
  std::unique_ptr<web::HttpServer> http_;
  std::unique_ptr<web::HttpServer> health_socket_;  // none when off or not possible
  std::string busy_description_;

  const core::SteadyTime started_;
  std::atomic<bool> stalled_{false};

  // A reload reads its files on a thread of its own, so that a file on a hung file system
  // cannot keep the main thread from SIGTERM and the watchdog; the main thread applies the
  // result. One at a time: a SIGHUP meanwhile asks for another once it is done.
  struct PendingReload;
  std::shared_ptr<PendingReload> reload_;  // main thread only
  bool reload_again_ = false;
  bool ready_ = false;  // main thread: READY sent (after the first cycle)
};

}  // namespace xferd::cmd
