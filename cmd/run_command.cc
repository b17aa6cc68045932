// `xferd run`: the daemon. The main thread owns signals, sd_notify and the watchdog; one
// probe thread runs the scheduler's cycles; the HTTP server serves from its own threads.
#include <fmt/format.h>
#include <prometheus/registry.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "cmd/backend.h"
#include "cmd/commands.h"
#include "config/config.h"
#include "core/busy_detector.h"
#include "core/health_tracker.h"
#include "core/plan.h"
#include "core/scheduler.h"
#include "exporter/exposition.h"
#include "exporter/metrics.h"
#include "exporter/process_metrics.h"
#include "exporter/routes.h"
#include "exporter/textfile.h"
#include "platform/abandonable_call.h"
#include "platform/build_info.h"
#include "platform/exit_codes.h"
#include "platform/files.h"
#include "platform/logging.h"
#include "platform/systemd_notifier.h"
#include "web/http_server.h"
#include "web/listen_address.h"
#include "web/paths.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::core;
using namespace xferd::exporter;
using namespace xferd::platform;
using namespace xferd::web;
namespace {

using namespace std::chrono_literals;
using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

// SIGTERM must end the process within 2 s even mid-cycle; this is how long the probe
// thread gets to notice the stop before the process leaves without it.
constexpr auto kProbeStopWait = 1500ms;
// How often the main thread looks at signals, the watchdog and the probe loop.
constexpr auto kTick = 100ms;

// Flags win over the file. Throws ConfigError (exit 78) for what the file or the web
// config says, UsageError (exit 64) for a bad flag; flags are checked by the same
// functions as the file's keys.
Config EffectiveConfig(const RunCommandOptions& options) {
  Config config = options.config_file.empty() ? Config{} : LoadConfig(options.config_file);
  if (options.simulate) config.simulate = true;
  if (options.listen_address) {
    try {
      ParseListenAddress(*options.listen_address);
    } catch (const HttpError& e) {
      throw UsageError("--web.listen-address: " + std::string(e.what()));
    }
    config.listen_address = *options.listen_address;
  }
  if (options.telemetry_path) {
    try {
      CheckTelemetryPath(*options.telemetry_path);
    } catch (const HttpError& e) {
      throw UsageError("--web.telemetry-path: " + std::string(e.what()));
    }
    config.telemetry_path = *options.telemetry_path;
  }
  if (options.state_dir) config.state_dir = *options.state_dir;
  if (options.log_level) {
    if (!ParseLogLevel(*options.log_level)) {
      throw UsageError(fmt::format("--log.level \"{}\": unknown level; use one of {}",
                                   *options.log_level, kLogLevelNames));
    }
    config.log_level = *options.log_level;
  }
  if (options.web_config_file) {
    config.web_config_file = *options.web_config_file;
    config.web =
        config.web_config_file.empty() ? WebConfig{} : LoadWebConfig(config.web_config_file);
  }
  return config;
}

// The devices `config` selects; a GPU it names that is not here is a mistake in the file.
std::vector<probes::DeviceInfo> SelectConfigured(const std::vector<probes::DeviceInfo>& all,
                                                 const Config& config) {
  try {
    return SelectDevices(all, config.gpus);
  } catch (const UnknownGpuError& e) {
    throw ConfigError(config.source.string(), 0, "probe.gpus", e.what(),
                      "name GPUs by index or UUID as listed, or leave gpus empty for all");
  }
}

std::unique_ptr<BusyDetector> MakeBusyDetector(const Config& config) {
  const BusyThresholds thresholds{config.busy_gpu_utilization_percent,
                                  config.busy_pcie_bytes_per_s};
  if (!config.busy_detection) return MakeDisabledBusyDetector("off (busy.enabled = false)");
  if (config.simulate) {
    return MakeBusyDetector(probes::MakeSimGpuLoadReader(config.sim_gpu_utilization_percent,
                                                         config.sim_pcie_bytes_per_s),
                            thresholds);
  }
  return MakeBusyDetector(probes::MakeNvmlGpuLoadReader(), thresholds);
}

// Different on every machine and every start, so a fleet booted together spreads out.
std::uint64_t JitterSeed() {
  std::uint64_t seed = std::random_device{}();
  seed = (seed << 32) ^ std::random_device{}();
  if (const auto id = TryReadFileBounded("/etc/machine-id", 4096)) {
    seed ^= std::hash<std::string>{}(*id);
  }
  return seed;
}

CycleResult ResultOfCycle(const CycleReport& r) {
  bool all_busy = !r.devices.empty();
  for (const auto& d : r.devices) all_busy = all_busy && d.skipped_busy;
  if (all_busy) return CycleResult::kSkippedBusy;
  if (r.over_budget) return CycleResult::kOverBudget;
  if (r.errors > 0 || r.timeouts > 0 || r.skipped_busy > 0) return CycleResult::kPartial;
  return CycleResult::kOk;
}

// What a reload cannot change in a running process; said in the log so nobody waits for it.
void WarnRestartOnly(const Config& running, const Config& next) {
  auto warn = [](const char* what) {
    spdlog::warn("reload: {} changed; that takes effect only after a restart", what);
  };
  if (running.listen_address != next.listen_address) warn("web.listen_address");
  if (running.telemetry_path != next.telemetry_path) warn("web.telemetry_path");
  const auto tls_files = [](const WebConfig& web) {
    return web.tls ? std::make_pair(web.tls->cert_file, web.tls->key_file)
                   : std::pair<std::filesystem::path, std::filesystem::path>();
  };
  if (tls_files(running.web) != tls_files(next.web)) {
    warn("the TLS certificate or key");
  }
  if (running.state_dir != next.state_dir) warn("daemon.state_dir");
  if (running.simulate != next.simulate) warn("simulate.enabled");
  if (running.gpus != next.gpus) warn("probe.gpus");
  if (running.simulate && next.simulate &&
      (running.sim.devices != next.sim.devices || running.sim.seed != next.sim.seed ||
       running.sim.link_gen != next.sim.link_gen || running.sim.link_width != next.sim.link_width ||
       running.sim.time_scale != next.sim.time_scale ||
       running.sim.integrated != next.sim.integrated)) {
    warn("the simulated device (devices, seed, link, time_scale, integrated)");
  }
}

// The daemon once it is configured: everything that lives from start to stop.
class Service {
 public:
  Service(const RunCommandOptions& options, Config config,
          std::unique_ptr<probes::TransferBackend> backend, probes::SimBackend* sim,
          std::vector<probes::DeviceInfo> devices, std::unique_ptr<Notifier> notifier)
      : options_(options),
        config_(std::make_shared<const Config>(std::move(config))),
        backend_(std::move(backend)),
        sim_(sim),
        devices_(std::move(devices)),
        notifier_(std::move(notifier)),
        registry_(std::make_shared<prometheus::Registry>()),
        process_metrics_(std::make_shared<ProcessMetrics>()),
        metrics_(*registry_),
        health_(*config_),
        state_(config_->state_dir) {}

  int Run(const sigset_t& signals);

 private:
  std::shared_ptr<const Config> CurrentConfig() const {
    std::lock_guard lock(config_mutex_);
    return config_;
  }
  void OnCycle(const CycleReport& report);             // probe thread
  void LogVerdictChanges(const DeviceHealth& health);  // probe thread
  void StartReload();                                  // main thread
  bool ReloadReady() const;                            // main thread
  void FinishReload();                                 // main thread
  HealthState Healthz() const;                         // HTTP threads
  void CheckStall();                                   // main thread

  const RunCommandOptions& options_;
  mutable std::mutex config_mutex_;
  std::shared_ptr<const Config> config_;
  std::unique_ptr<probes::TransferBackend> backend_;
  probes::SimBackend* sim_;  // the backend when simulated, for fault changes on reload
  std::vector<probes::DeviceInfo> devices_;
  std::unique_ptr<Notifier> notifier_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ProcessMetrics> process_metrics_;
  Metrics metrics_;
  HealthTracker health_;
  StateFile state_;
  SteadyClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> http_;
  std::string busy_description_;

  const SteadyTime started_ = std::chrono::steady_clock::now();
  std::atomic<bool> stalled_{false};
  mutable std::mutex status_mutex_;
  std::string status_;  // the STATUS line of the last cycle
  bool state_write_failing_ = false, textfile_failing_ = false;  // probe thread only

  // A reload reads its files on a thread of its own, so that a file on a hung file system
  // cannot keep the main thread from SIGTERM and the watchdog; the main thread applies the
  // result. One at a time: a SIGHUP meanwhile asks for another once it is done.
  struct PendingReload {
    std::mutex mutex;
    bool done = false;
    std::optional<Config> config;
    std::exception_ptr error;
  };
  std::shared_ptr<PendingReload> reload_;  // main thread only
  bool reload_again_ = false;
};

HealthState Service::Healthz() const {
  if (stalled_) {
    return {false, "a probe is hung in a device call past its deadline (see the log)"};
  }
  const auto config = CurrentConfig();
  const auto stale_after = 3 * config->interval + config->cycle_budget;
  const auto last = scheduler_->LastCycleEnd();
  const SteadyTime since = last.value_or(started_);
  const auto age = std::chrono::steady_clock::now() - since;
  if (age > stale_after) {
    return {false,
            fmt::format("no probe cycle finished for {:.0f} s (interval {:.0f} s, "
                        "stale after {:.0f} s)",
                        duration<double>(age).count(), duration<double>(config->interval).count(),
                        duration<double>(stale_after).count())};
  }
  return {true, last ? "ok" : "starting: first probe cycle running"};
}

// One line per (mode, direction) whose verdict flipped: the figures that made it flip and
// the likely causes with their advice, so the log says what to check, not only that.
void Service::LogVerdictChanges(const DeviceHealth& health) {
  for (const PairVerdict& v : health.verdicts) {
    if (!v.changed) continue;
    ScopedLogFields fields(std::to_string(health.gpu), std::string(probes::ToString(v.mode)));
    std::string figures;
    for (const SeriesHealth& s : health.series) {
      if (s.mode != v.mode || s.direction != v.direction) continue;
      figures += fmt::format("{}{} {:.2f} GB/s{}{}", figures.empty() ? "" : ", ",
                             probes::FormatSize(s.size_bytes), s.median_bytes_per_s / 1e9,
                             s.baseline_bytes_per_s > 0
                                 ? fmt::format(" (baseline {:.2f})", s.baseline_bytes_per_s / 1e9)
                                 : "",
                             s.Bad() ? " low" : "");
    }
    if (health.band.Known()) {
      figures +=
          fmt::format("; band {:.2f}-{:.2f} GB/s per direction",
                      health.band.lower_bytes_per_s / 1e9, health.band.upper_bytes_per_s / 1e9);
    }
    std::string causes;
    for (const Diagnosis& d : health.diagnoses) {
      causes += fmt::format("; likely {} ({}): {}", ToString(d.cause), d.detail, d.advice);
    }
    spdlog::log(v.degraded ? spdlog::level::warn : spdlog::level::info,
                "gpu {} {} {}: verdict {} ({}){}", health.gpu, probes::ToString(v.mode),
                probes::ToString(v.direction), v.degraded ? "DEGRADED" : "back to ok", figures,
                causes);
  }
}

void Service::OnCycle(const CycleReport& report) {
  const auto config = CurrentConfig();
  for (const DeviceCycle& dc : report.devices) {
    CycleObservation obs;
    obs.device = dc.device;
    obs.link_path = dc.link_path;
    obs.samples = dc.samples;
    obs.busy = dc.skipped_busy;
    const DeviceHealth health = health_.Observe(obs);
    metrics_.RecordHealth(health);
    LogVerdictChanges(health);
  }
  metrics_.RecordCycle(report.wall_s, ResultOfCycle(report));

  const StateWrite w = state_.Save(health_.Snapshot());
  if (!w.skipped) {
    metrics_.RecordStateWrite(w.ok);
    // Said when it starts and stops failing, not every cycle (intervals can be short).
    if (!w.ok && !state_write_failing_) {
      spdlog::error("state: {} (said once; xferd_state_write_errors_total counts each failure)",
                    w.error);
    } else if (w.ok && state_write_failing_) {
      spdlog::info("state: writing {} works again", state_.path().string());
    }
    state_write_failing_ = !w.ok;
  }

  if (!config->textfile_path.empty()) {
    try {
      WriteTextfile(config->textfile_path, RenderExposition(Collectables{registry_}, "xferd_"));
      if (textfile_failing_)
        spdlog::info("textfile: writing {} works again", config->textfile_path.string());
      textfile_failing_ = false;
    } catch (const std::exception& e) {
      metrics_.RecordTextfileWrite(false);
      if (!textfile_failing_) spdlog::error("textfile: {}", e.what());
      textfile_failing_ = true;
    }
  }

  const std::string summary = health_.Summary();
  const double duty = report.wall_s + report.next_in.count() / 1e3 > 0
                          ? report.device_s / (report.wall_s + report.next_in.count() / 1e3)
                          : 0;
  spdlog::info(
      "cycle {}: {} ok, {} error, {} timeout, {} unsupported, {} skipped busy, {} over "
      "budget, {} held back (allowance); {:.3f} s wall, {:.3f} s device, duty {:.4f}; "
      "next in {:.1f} s; {}",
      report.number, report.ok, report.errors, report.timeouts, report.unsupported,
      report.skipped_busy, report.skipped_budget, report.held_back, report.wall_s, report.device_s,
      duty, report.next_in.count() / 1e3, summary);
  std::lock_guard lock(status_mutex_);
  status_ = fmt::format("cycle {}: {}", report.number, summary);
}

void Service::CheckStall() {
  const auto stall = scheduler_->CheckStall(std::chrono::steady_clock::now());
  stalled_ = stall.has_value();
  if (stall && stall->first_report) {
    const auto& s = stall->spec;
    ScopedLogFields fields(std::to_string(stall->device), std::string(probes::ToString(s.mode)));
    metrics_.RecordSkipped(stall->device, s.mode, ProbeResult::kTimeout);
    spdlog::error(
        "gpu {} {} {} {}: probe hung: no answer after {:.1f} s (deadline {:.1f} s); watchdog "
        "pings stop so systemd restarts xferd; check the GPU (nvidia-smi, dmesg for Xid)",
        stall->device, probes::ToString(s.mode), probes::ToString(s.direction),
        probes::FormatSize(s.size_bytes), stall->running_for.count() / 1e3,
        duration<double>(s.deadline).count());
    notifier_->Status(fmt::format("HUNG: gpu {} {} {} probe not answering for {:.0f} s",
                                  stall->device, probes::ToString(s.mode),
                                  probes::ToString(s.direction), stall->running_for.count() / 1e3));
  }
}

void Service::StartReload() {
  notifier_->Reloading();
  auto pending = std::make_shared<PendingReload>();
  reload_ = pending;
  // Copies only: the thread may outlive this object if the daemon stops meanwhile.
  std::thread([pending, options = options_] {
    std::optional<Config> config;
    std::exception_ptr error;
    try {
      config = EffectiveConfig(options);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(pending->mutex);
    pending->config = std::move(config);
    pending->error = error;
    pending->done = true;
  }).detach();
}

bool Service::ReloadReady() const {
  if (!reload_) return false;
  std::lock_guard lock(reload_->mutex);
  return reload_->done;
}

void Service::FinishReload() {
  const auto pending = std::move(reload_);
  reload_.reset();
  const auto running = CurrentConfig();
  const double now_s =
      duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  try {
    if (pending->error) std::rethrow_exception(pending->error);
    Config next = std::move(*pending->config);
    SelectConfigured(backend_->Devices(), next);  // an unknown GPU is a bad config
    WarnRestartOnly(*running, next);
    // What cannot change keeps its running value, so health and the scheduler stay
    // consistent with what is actually served and probed.
    next.listen_address = running->listen_address;
    next.telemetry_path = running->telemetry_path;
    next.state_dir = running->state_dir;
    next.simulate = running->simulate;
    next.gpus = running->gpus;
    SetLogLevel(next.log_level);
    if (sim_ != nullptr) sim_->SetFaults(next.sim.faults);
    if (next.web.basic_auth_users != running->web.basic_auth_users) {
      http_->SetBasicAuthUsers(next.web.basic_auth_users);
    }
    next.web.tls = running->web.tls;
    auto busy = MakeBusyDetector(next);
    if (busy->Describe() != busy_description_) {
      busy_description_ = busy->Describe();
      spdlog::info("busy detection: {}", busy_description_);
    }
    health_.Reconfigure(next);
    scheduler_->Reconfigure(next, std::move(busy));
    {
      std::lock_guard lock(config_mutex_);
      config_ = std::make_shared<const Config>(std::move(next));
    }
    metrics_.RecordConfigReload(true, now_s);
    spdlog::info("reload: configuration {} applied from the next cycle",
                 options_.config_file.empty() ? "(defaults and flags)" : options_.config_file);
  } catch (const platform::Error& e) {
    // ConfigError (exit 78 at start) and the rest: the file, its line and the fix.
    metrics_.RecordConfigReload(false, now_s);
    spdlog::error("reload failed, keeping the running configuration: {}", e.what());
  } catch (const std::exception& e) {
    metrics_.RecordConfigReload(false, now_s);
    spdlog::error("reload failed (internal error), keeping the running configuration: {}",
                  e.what());
  }
  notifier_->Ready();
  std::lock_guard lock(status_mutex_);
  if (!status_.empty()) notifier_->Status(status_);
}

int Service::Run(const sigset_t& signals) {
  const auto config = CurrentConfig();
  metrics_.SetBuildInfo();
  for (const auto& d : devices_) metrics_.SetDevice(d);
  metrics_.RecordConfigReload(
      true, duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());

  // Read where a hung file system cannot keep SIGTERM from stopping the daemon.
  StateLoad loaded;
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  int stopped_by = 0;
  if (!CallUnlessStopped([this, &loaded] { loaded = state_.Load(); }, stop_signals, &stopped_by)) {
    spdlog::warn("{} while reading the state file {}: stopping without it",
                 stopped_by == SIGTERM ? "SIGTERM" : "SIGINT", state_.path().string());
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    _exit(kExitOk);
  }
  if (!loaded.message.empty()) spdlog::warn("state: {}", loaded.message);
  health_.Restore(loaded.baselines);
  std::size_t series = 0;
  for (const auto& [uuid, s] : loaded.baselines) series += s.size();
  spdlog::info("state: {} ({} learned series)", state_.path().string(), series);

  auto busy = MakeBusyDetector(*config);
  busy_description_ = busy->Describe();
  spdlog::info("busy detection: {}", busy_description_);

  SchedulerCallbacks callbacks;
  callbacks.on_probe = [this](const probes::DeviceInfo& d, const probes::ProbeSample& s) {
    metrics_.RecordSample(
        d, s, health_.Baseline(d.uuid, s.spec.mode, s.spec.direction, s.spec.size_bytes));
  };
  callbacks.on_skipped_busy = [this](const probes::DeviceInfo& d, const probes::ProbeSpec& s) {
    metrics_.RecordSkipped(d.index, s.mode, ProbeResult::kSkippedBusy);
  };
  callbacks.on_link_path = [this](const probes::DeviceInfo& d, const probes::LinkPath& p) {
    metrics_.RecordLinkPath(d.index, p);
  };
  callbacks.on_cycle = [this](const CycleReport& r) { OnCycle(r); };
  scheduler_ = std::make_unique<Scheduler>(*backend_, devices_, *config, std::move(busy), clock_,
                                           JitterSeed(), std::move(callbacks));

  ExporterRoutes routes;
  routes.telemetry_path = config->telemetry_path;
  // Only metrics_ writes the registry, and it changes once per probe, not per scrape: its
  // text is rendered once per change (Metrics::Generation); process_* is read per scrape.
  routes.cached_collectables = {registry_};
  routes.generation = [this] { return metrics_.Generation(); };
  routes.collectables = {process_metrics_};
  routes.health = [this] { return Healthz(); };
  routes.status_line = [this] { return health_.Summary(); };
  routes.version = kVersion;
  HttpServerOptions http_options;
  http_options.listen_address = config->listen_address;
  http_options.web = config->web;
  try {
    http_ = std::make_unique<HttpServer>(http_options, MakeExporterHandler(std::move(routes)));
  } catch (const HttpError& e) {
    spdlog::critical("cannot serve metrics: {}", e.what());
    throw platform::Error(platform::Failure::kOsError,
                          "cannot serve metrics: " + std::string(e.what()));
  }
  spdlog::info("serving {}{} (and /, /healthz)", http_->url(), config->telemetry_path);

  // The probe thread; `probe_done` tells the main thread it has left Run().
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool probe_done = false;
  std::atomic<bool> probe_failed{false};
  auto probe_thread = std::make_unique<std::jthread>([&](std::stop_token stop) {
    try {
      scheduler_->Run(stop);
    } catch (const std::exception& e) {
      spdlog::critical("probe loop failed: {}", e.what());
      probe_failed = true;
    }
    std::lock_guard lock(done_mutex);
    probe_done = true;
    done_cv.notify_all();
  });

  const auto watchdog = notifier_->WatchdogInterval();
  if (watchdog) {
    spdlog::info("systemd watchdog: pinging every {:.1f} s while the probe loop progresses",
                 watchdog->count() / 2e6);
  }
  auto next_ping = std::chrono::steady_clock::now();
  std::uint64_t cycles_seen = 0;
  bool ready = false;
  int exit_code = kExitOk;
  for (;;) {
    timespec wait{0, duration_cast<std::chrono::nanoseconds>(kTick).count()};
    siginfo_t info{};
    const int sig = sigtimedwait(&signals, &info, &wait);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("{}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    if (sig == SIGHUP) {
      if (reload_) {
        spdlog::info("SIGHUP: a reload is still reading its files; another follows it");
        reload_again_ = true;
      } else {
        spdlog::info("SIGHUP: reloading the configuration");
        StartReload();
      }
    }
    if (ReloadReady()) FinishReload();
    if (reload_again_ && !reload_) {
      reload_again_ = false;
      StartReload();
    }
    if (probe_failed) {
      exit_code = kExitSoftware;
      break;
    }
    const std::uint64_t cycles = scheduler_->CyclesCompleted();
    if (cycles != cycles_seen) {
      cycles_seen = cycles;
      if (!ready) {
        // Serving and one cycle done: what "started" means for a Type=notify service.
        notifier_->Ready();
        ready = true;
        spdlog::info("ready: first probe cycle done");
      }
      std::lock_guard lock(status_mutex_);
      notifier_->Status(status_);
    }
    CheckStall();
    const auto now = std::chrono::steady_clock::now();
    if (watchdog && now >= next_ping) {
      // A probe stuck in a device call starves systemd of pings: it restarts the service.
      if (!stalled_) notifier_->Watchdog();
      next_ping = now + duration_cast<std::chrono::steady_clock::duration>(*watchdog / 2);
    }
  }

  notifier_->Stopping();
  probe_thread->request_stop();
  bool joined = false;
  {
    std::unique_lock lock(done_mutex);
    joined = done_cv.wait_for(lock, kProbeStopWait, [&] { return probe_done; });
  }
  if (!joined) {
    // A device call that ignores cancellation (a hung driver) cannot be waited for: the
    // state was saved after the last cycle, so leaving now loses nothing.
    spdlog::error(
        "stopping without the probe thread: a device call did not return within "
        "{:.1f} s",
        duration<double>(kProbeStopWait).count());
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    _exit(exit_code);
  }
  if (reload_ && !ReloadReady()) {
    // A reload still reading (a hung file system): its thread cannot be waited for, and
    // the process must not run its exit handlers under it. Nothing of it is needed now.
    http_.reset();
    spdlog::warn("stopping while a reload was still reading its files; it is abandoned");
    spdlog::info("stopped");
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    _exit(exit_code);
  }
  probe_thread.reset();
  http_.reset();
  spdlog::info("stopped");
  spdlog::default_logger()->flush();
  return exit_code;
}

}  // namespace

int RunDaemonCommand(const RunCommandOptions& options) {
  // Signals are taken synchronously by the main thread; every thread started from here on
  // inherits the mask, so none of them is picked to run a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A scraper that hangs up mid-response must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);

  // Read on a thread of its own: a file on a hung file system must not keep SIGTERM from
  // stopping xferd (a FIFO or a device is refused at once by the bounded reader).
  Config config;
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  int stopped_by = 0;
  if (!CallUnlessStopped([&] { config = EffectiveConfig(options); }, stop_signals, &stopped_by)) {
    std::fprintf(stderr, "xferd: %s while reading the configuration: stopping\n",
                 stopped_by == SIGTERM ? "SIGTERM" : "SIGINT");
    std::fflush(nullptr);
    _exit(kExitOk);
  }
  const LogTarget target = SetUpLogging(config.log_level);
  spdlog::info("xferd {} starting; config {}; logging to {}", kVersion,
               options.config_file.empty() ? "(defaults)" : options.config_file,
               target == LogTarget::kJournal ? "the journal" : "stderr");

  Backend made = MakeBackend(config, "run");
  const std::vector<probes::DeviceInfo> devices = SelectConfigured(made.backend->Devices(), config);
  if (devices.empty()) {
    throw probes::NoDeviceError("the " + made.backend->Name() +
                                " backend found no device to probe");
  }
  for (const auto& d : devices) {
    spdlog::info("gpu {}: {} {} {}{}", d.index, d.name, d.uuid, d.pci_bus_id,
                 d.simulated ? " (SIMULATED device: not real hardware)" : "");
  }

  Service service(options, std::move(config), std::move(made.backend), made.sim, devices,
                  MakeSystemdNotifier());
  return service.Run(signals);
}

}  // namespace xferd::cmd
