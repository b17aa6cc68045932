#include "cmd/service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <optional>
#include <thread>

#include "cmd/backend.h"
#include "cmd/band_output.h"
#include "exporter/http_metrics.h"
#include "platform/abandonable_call.h"
#include "platform/build_info.h"
#include "platform/command.h"
#include "platform/exit_codes.h"
#include "platform/files.h"
#include "platform/logging.h"
#include "platform/printable.h"
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

// SIGTERM must end the process within 2 s even mid-cycle; this is how long the probe
// thread gets to notice the stop before the process leaves without it.
constexpr auto kProbeStopWait = 1500ms;
// How often the main thread looks at the watchdog and the probe loop (signals wake it at
// once): every kTick while a reload is being read or before the first cycle has made the
// service ready, every kIdleTick otherwise. Ten wakeups a second were most of an idle
// daemon's CPU (docs/performance.md); a hung probe, a failed probe loop or a finished cycle
// are seen within a second, well inside their deadlines.
constexpr auto kTick = 100ms;
constexpr auto kIdleTick = 1000ms;

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
  if (running.HealthSocket() != next.HealthSocket()) warn("web.health_socket");
  if (running.simulate != next.simulate) warn("simulate.enabled");
  if (running.gpus != next.gpus) warn("probe.gpus");
  if (running.simulate && next.simulate &&
      (running.sim.devices != next.sim.devices || running.sim.seed != next.sim.seed ||
       running.sim.link_gen != next.sim.link_gen || running.sim.link_width != next.sim.link_width ||
       running.sim.idle_link_gen != next.sim.idle_link_gen ||
       running.sim.time_scale != next.sim.time_scale ||
       running.sim.integrated != next.sim.integrated ||
       running.sim.sysfs_root != next.sim.sysfs_root ||
       running.sim.gpus_per_switch != next.sim.gpus_per_switch ||
       running.sim.uplink_gen != next.sim.uplink_gen ||
       running.sim.uplink_width != next.sim.uplink_width ||
       running.sim.numa_nodes != next.sim.numa_nodes || running.sim_speedup != next.sim_speedup)) {
    warn(
        "the simulated device (devices, seed, link, time_scale, speedup, integrated, its "
        "topology)");
  }
  if (running.simulate && next.simulate &&
      running.sim_pcie_bytes_per_s != next.sim_pcie_bytes_per_s) {
    warn(
        "simulate.pcie_bytes_per_second (for the link watch's simulated traffic; the busy check "
        "follows it now)");
  }
}

}  // namespace

Service::Service(Config config, probes::TransferBackend& backend,
                 std::vector<probes::DeviceInfo> devices, ServiceSeams seams)
    : config_(std::make_shared<const Config>(std::move(config))),
      backend_(backend),
      devices_(std::move(devices)),
      seams_(std::move(seams)),
      registry_(std::make_shared<prometheus::Registry>()),
      process_metrics_(std::make_shared<ProcessMetrics>()),
      metrics_(*registry_),
      health_(*config_),
      status_board_(incidents_),
      state_(config_->state_dir),
      cycle_log_(health_, *seams_.clock),
      persistence_(state_, health_, incidents_, metrics_, [this] { return CurrentConfig(); }),
      pipeline_(health_, incidents_, backend_, *seams_.clock),
      started_(seams_.clock->Now()) {
  EvidenceOptions evidence;
  evidence.dir = config_->state_dir / "evidence";
  evidence.lspci = FindProgram({"/usr/bin/lspci", "/usr/sbin/lspci", "/sbin/lspci", "/bin/lspci"});
  if (seams_.evidence_options) seams_.evidence_options(evidence);
  evidence_ = std::make_unique<EvidenceKeeper>(std::move(evidence),
                                               [this](const EvidenceWritten& w) { OnEvidence(w); });
}

Service::~Service() {
  // Before the members the servers' threads read (a Run that threw leaves them serving).
  StopServing();
}

std::shared_ptr<const Config> Service::CurrentConfig() const {
  std::lock_guard lock(config_mutex_);
  return config_;
}

HealthState Service::Healthz() const {
  if (stalled_) {
    return {false, "a probe is hung in a device call past its deadline (see the log)"};
  }
  const auto config = CurrentConfig();
  const auto stale_after = 3 * config->interval + config->cycle_budget;
  const auto last = scheduler_->LastCycleEnd();
  const SteadyTime since = last.value_or(started_);
  const auto age = seams_.clock->Now() - since;
  if (age > stale_after) {
    return {false, fmt::format("no probe cycle finished for {} (interval {}, stale after {})",
                               FormatSeconds(duration<double>(age).count(), 0),
                               FormatSeconds(duration<double>(config->interval).count(), 0),
                               FormatSeconds(duration<double>(stale_after).count(), 0))};
  }
  return {true, last ? "ok" : "starting: first probe cycle running"};
}

std::string Service::StatusDocument() const {
  const auto config = CurrentConfig();
  const HealthState health = Healthz();
  DaemonStatus daemon;
  daemon.healthy = health.healthy;
  daemon.reason = health.reason;
  daemon.cycles = scheduler_->CyclesCompleted();
  if (const auto last = scheduler_->LastCycleEnd()) {
    daemon.last_cycle_age_s = duration<double>(seams_.clock->Now() - *last).count();
  }
  daemon.stale_after_s = duration<double>(3 * config->interval + config->cycle_budget).count();
  daemon.interval_s = duration<double>(config->interval).count();
  daemon.consecutive_bad = config->consecutive_bad;
  daemon.summary = health_.Summary();
  daemon.now = seams_.clock->Now();
  daemon.uptime_s = duration<double>(*daemon.now - started_).count();
  daemon.freshness = FreshnessOf(*config);
  const EvidenceKeeper::Stats evidence = evidence_->GetStats();
  daemon.evidence = {evidence_->dir().string(), evidence_->keep(), evidence.written,
                     evidence.dropped, evidence.last_problem};
  return status_board_.Render(daemon, std::chrono::system_clock::now());
}

// The evidence writer's thread, after each record: the incident links it, the status API
// shows it, the log and the counter say what became of it.
void Service::OnEvidence(const EvidenceWritten& w) {
  metrics_.RecordEvidence(w.ok);
  ScopedLogFields fields(std::to_string(w.gpu), "");
  const std::string verdict = fmt::format("{}{}{}", w.code.empty() ? "DEGRADED" : w.code,
                                          w.cause.empty() ? "" : " ", w.cause);
  if (!w.ok) {
    spdlog::error(
        "evidence: gpu {}: the record of its DEGRADED verdict ({}) is dropped: {}; the daemon "
        "goes on (xferd_evidence_records_total{{result=\"dropped\"}} counts it)",
        w.gpu, verdict, w.problem);
    return;
  }
  incidents_.AttachEvidence(w.uuid, w.incident_time, w.name);
  status_board_.RecordEvidence(w.gpu, {w.name, w.path.string(), w.incident_time, w.bytes});
  spdlog::info(
      "evidence: gpu {}: kept {} ({} bytes) for its DEGRADED verdict ({}); `xferd "
      "evidence {}` prints it{}",
      w.gpu, platform::PrintablePath(w.path.string()), w.bytes, verdict, w.gpu,
      w.pruned.empty() ? std::string()
                       : fmt::format(" ({} older record{} removed, {} are kept)", w.pruned.size(),
                                     w.pruned.size() == 1 ? "" : "s", evidence_->keep()));
}
void Service::CheckStall() {
  const auto stall = scheduler_->CheckStall(seams_.clock->Now());
  stalled_ = stall.has_value();
  if (stall && stall->first_report) {
    const auto& s = stall->spec;
    ScopedLogFields fields(std::to_string(stall->device), std::string(probes::ToString(s.mode)));
    metrics_.RecordSkipped(stall->device, s.mode, ProbeResult::kTimeout);
    status_board_.RecordSkipped(stall->device, s, ProbeResult::kTimeout);
    spdlog::error(
        "gpu {} {} {} {}: probe hung: no answer after {:.1f} s (deadline {}); watchdog "
        "pings stop so systemd restarts xferd; check the GPU (nvidia-smi, dmesg for Xid)",
        stall->device, probes::ToString(s.mode), probes::ToString(s.direction),
        probes::FormatSize(s.size_bytes), stall->running_for.count() / 1e3,
        FormatSeconds(duration<double>(s.deadline).count()));
    seams_.notifier->Status(fmt::format(
        "HUNG: gpu {} {} {} probe not answering for {:.0f} s", stall->device,
        probes::ToString(s.mode), probes::ToString(s.direction), stall->running_for.count() / 1e3));
  }
}

struct Service::PendingReload {
  bool announced = false;  // RELOADING sent: READY follows it (main thread only)
  std::mutex mutex;
  bool done = false;
  std::optional<Config> config;
  std::exception_ptr error;
};

void Service::StartReload() {
  // Before READY (a reload asked during the start) systemd hears nothing of it: READY
  // comes after the first cycle, whatever reloads come first.
  auto pending = std::make_shared<PendingReload>();
  pending->announced = ready_;
  if (pending->announced) seams_.notifier->Reloading();
  reload_ = pending;
  // The thread holds its own copy of the reload function and the result; it may outlive
  // the service when the daemon stops meanwhile (Run then ends the process).
  std::thread([pending, reload = seams_.reload] {
    std::optional<Config> config;
    std::exception_ptr error;
    try {
      config = reload();
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
  const std::shared_ptr<PendingReload> pending = std::move(reload_);
  reload_.reset();
  const auto running = CurrentConfig();
  const auto now = std::chrono::system_clock::now();
  const double now_s = duration<double>(now.time_since_epoch()).count();
  try {
    if (pending->error) std::rethrow_exception(pending->error);
    Config next = std::move(*pending->config);
    SelectConfigured(backend_.Devices(), next);  // an unknown GPU is a bad config
    CheckReloadKeepsProtection(*running, next);  // TLS or auth never dropped by accident
    WarnRestartOnly(*running, next);
    if (!running->textfile_path.empty() && next.textfile_path != running->textfile_path) {
      // Not removed: it may not be ours alone to remove; but not left to look current either.
      spdlog::warn(
          "reload: the textfile {} is no longer written ({}); node_exporter exports "
          "its last values until it is removed",
          running->textfile_path.string(),
          next.textfile_path.empty() ? "textfile_path is now unset"
                                     : "now " + next.textfile_path.string());
    }
    // What cannot change keeps its running value, so health and the scheduler stay
    // consistent with what is actually served and probed.
    next.listen_address = running->listen_address;
    next.health_socket = running->health_socket;
    next.telemetry_path = running->telemetry_path;
    next.state_dir = running->state_dir;
    next.simulate = running->simulate;
    next.gpus = running->gpus;
    SetLogLevel(next.log_level);
    if (seams_.on_reload) seams_.on_reload(next);
    {
      // CC and MIG as the driver says them now; each GPU's said when it changed.
      std::vector<std::string> before;
      for (const probes::DeviceInfo& d : backend_.Devices()) before.push_back(ShapeText(d));
      backend_.RefreshShape();
      const std::vector<probes::DeviceInfo> after = backend_.Devices();
      for (std::size_t i = 0; i < after.size(); ++i) {
        const std::string now = ShapeText(after[i]);
        if (i >= before.size() || before[i] != now) {
          spdlog::info("reload: gpu {}: {}", after[i].index, now);
        }
      }
    }
    if (next.web.basic_auth_users != running->web.basic_auth_users) {
      http_->SetBasicAuthUsers(next.web.basic_auth_users);
    }
    next.web.tls = running->web.tls;
    auto busy = seams_.make_busy(next);
    if (busy->Describe() != busy_description_) {
      busy_description_ = busy->Describe();
      spdlog::info("busy detection: {}", busy_description_);
    }
    metrics_.SetPlan(next);
    if (next.baseline_window < running->baseline_window) {
      // A shorter window drops the oldest values at the next write: the file keeps them.
      const std::string kept = state_.KeepBeforeTrimming(
          health_.Snapshot(), static_cast<std::size_t>(next.baseline_window));
      if (!kept.empty()) spdlog::warn("state: {}", kept);
    }
    health_.Reconfigure(next);
    scheduler_->Reconfigure(next, std::move(busy));
    if (link_watch_) link_watch_->Reconfigure(next);
    {
      std::lock_guard lock(config_mutex_);
      config_ = std::make_shared<const Config>(std::move(next));
    }
    metrics_.RecordConfigReload(true, now_s);
    status_board_.RecordConfigLoad(true, true, now, "");
    spdlog::info("reload: configuration {} applied from the next cycle", seams_.config_name);
  } catch (const platform::Error& e) {
    // ConfigError (exit 78 at start) and the rest: the file, its line and the fix.
    metrics_.RecordConfigReload(false, now_s);
    status_board_.RecordConfigLoad(true, false, now, e.what());
    spdlog::error("reload failed, keeping the running configuration: {}",
                  platform::Printable(e.what(), 2000));
  } catch (const std::exception& e) {
    metrics_.RecordConfigReload(false, now_s);
    status_board_.RecordConfigLoad(true, false, now, std::string("internal error: ") + e.what());
    spdlog::error("reload failed (internal error), keeping the running configuration: {}",
                  platform::Printable(e.what(), 2000));
  }
  if (!pending->announced) return;
  seams_.notifier->Ready();
  if (const std::string status = cycle_log_.Status(); !status.empty()) {
    seams_.notifier->Status(status);
  }
}

void Service::StartServing(const Config& config) {
  ExporterRoutes routes;
  routes.telemetry_path = config.telemetry_path;
  // Only metrics_ writes the registry, and it changes once per probe, not per scrape: its
  // text is rendered once per change (Metrics::Generation); process_* is read per scrape.
  routes.cached_collectables = {metrics_.Exposition()};
  routes.generation = [this] { return metrics_.Generation(); };
  // What the servers refused (read per scrape: a flood changes it all the time).
  refusal_metrics_ = std::make_shared<exporter::HttpRefusalMetrics>([this] {
    web::HttpRefusals sum;
    std::lock_guard lock(servers_mutex_);
    for (const web::HttpServer* server : {http_.get(), health_socket_.get()}) {
      if (server == nullptr) continue;
      const web::HttpRefusals r = server->Refusals();
      for (std::size_t i = 0; i < sum.count.size(); ++i) sum.count[i] += r.count[i];
    }
    return sum;
  });
  routes.collectables = {process_metrics_, refusal_metrics_};
  routes.health = [this] { return Healthz(); };
  routes.status_line = [this] { return health_.Summary(); };
  routes.status = [this] { return StatusDocument(); };
  // Every value the document shows is handed to metrics_ or the board as it changes.
  routes.status_generation = [this] { return metrics_.Generation() + status_board_.Generation(); };
  routes.version = kVersion;
  HttpServerOptions http_options;
  http_options.listen_address = config.listen_address;
  http_options.web = config.web;
  const HttpServer::Handler handler = MakeExporterHandler(std::move(routes));
  try {
    auto server = std::make_unique<HttpServer>(http_options, handler);
    std::lock_guard lock(servers_mutex_);
    http_ = std::move(server);
  } catch (const HttpError& e) {
    spdlog::critical("cannot serve metrics: {}", e.what());
    throw platform::Error(platform::Failure::kOsError,
                          "cannot serve metrics: " + std::string(e.what()));
  }
  spdlog::info("serving {}{} (and /, /healthz, {})", http_->url(), config.telemetry_path,
               kStatusPath);
  StartHealthSocket(config, handler);
}

// The health socket (docs/http.md): the status document and /healthz, for `xferd health` on
// this host, over a unix-domain socket only xferd's user and group (and root) may connect
// to, so no other local user can crowd it out as idle sockets can crowd the HTTP port. No
// TLS and no login: the file's permissions are its protection. Not having it is no reason
// to stop: the HTTP port still serves the same.
void Service::StartHealthSocket(const Config& config, const HttpServer::Handler& handler) {
  const std::filesystem::path path = config.HealthSocket();
  if (path.empty()) return;
  HttpServerOptions options;
  options.unix_socket = path;
  options.unix_socket_mode = 0660;
  options.threads = 1;
  options.connection_limit = 64;
  try {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    auto server = std::make_unique<HttpServer>(options, [handler](const HttpRequest& r) {
      if (r.path == kStatusPath || r.path == kHealthPath) return handler(r);
      return HttpResponse{404,
                          "text/plain; charset=utf-8",
                          "Not Found: the health socket serves /api/v1/status and /healthz\n",
                          {}};
    });
    std::lock_guard lock(servers_mutex_);
    health_socket_ = std::move(server);
    spdlog::info("health socket {} (mode 0660): {} and {} for xferd health on this host",
                 platform::PrintablePath(path.string()), kStatusPath, kHealthPath);
  } catch (const HttpError& e) {
    spdlog::warn("no health socket: {}; xferd health asks over HTTP meanwhile", e.what());
  }
}

void Service::Prepare(const Config& config) {
  metrics_.SetBuildInfo();
  for (const auto& d : devices_) {
    metrics_.SetDevice(d);
    status_board_.SetDevice(d);
  }
  metrics_.SetPlan(config);
  const auto loaded_at = std::chrono::system_clock::now();
  metrics_.RecordConfigReload(true, duration<double>(loaded_at.time_since_epoch()).count());
  status_board_.RecordConfigLoad(false, true, loaded_at, "");

  // Read where a hung file system cannot keep SIGTERM from stopping the daemon.
  StateLoad loaded;
  bool reload_asked = seams_.reload_at_start;
  if (const auto stop = CallUnlessStopped(
          [this, &loaded, window = config.baseline_window] {
            loaded =
                state_.Load(std::chrono::system_clock::now(), static_cast<std::size_t>(window));
          },
          *seams_.signals, &reload_asked)) {
    spdlog::warn("{} while reading the state file {}: stopping without it", stop->name,
                 state_.path().string());
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    _exit(kExitOk);
  }
  if (!loaded.message.empty()) spdlog::warn("state: {}", loaded.message);
  if (loaded.temp_files_removed > 0) {
    spdlog::info("state: removed {} temporary file(s) that writes interrupted by a crash left",
                 loaded.temp_files_removed);
  }
  if (reload_asked) {
    // The files may have changed after they were read: the reload is done once serving.
    spdlog::info("SIGHUP during the start: reloading the configuration once started");
    reload_again_ = true;
  }
  health_.Restore(loaded.baselines);
  if (!loaded.incidents_message.empty()) spdlog::warn("{}", loaded.incidents_message);
  incidents_.Restore(std::move(loaded.incidents));
  std::size_t series = 0;
  for (const auto& [uuid, s] : loaded.baselines) series += s.size();
  spdlog::info("state: {} ({} learned series)", state_.path().string(), series);
  if (const std::size_t removed = evidence_->Start()) {
    spdlog::info(
        "evidence: removed {} temporary file(s) in {} that writes interrupted by a crash left",
        removed, platform::PrintablePath(evidence_->dir().string()));
  }

  auto busy = seams_.make_busy(config);
  busy_description_ = busy->Describe();
  spdlog::info("busy detection: {}", busy_description_);
  if (seams_.link_errors) spdlog::info("link errors: {}", seams_.link_errors->Describe());

  SchedulerCallbacks callbacks;
  callbacks.on_probe = [this](const probes::DeviceInfo& d, const probes::ProbeSample& s) {
    metrics_.RecordSample(
        d, s, health_.Baseline(d.uuid, s.spec.mode, s.spec.direction, s.spec.size_bytes),
        KeepsHistogram(s.spec, *CurrentConfig()));
    status_board_.RecordSample(d, s);
  };
  callbacks.on_skipped_busy = [this](const probes::DeviceInfo& d, const probes::ProbeSpec& s) {
    metrics_.RecordSkipped(d.index, s.mode, ProbeResult::kSkippedBusy);
    status_board_.RecordSkipped(d.index, s, ProbeResult::kSkippedBusy);
  };
  callbacks.on_link_path = [this](const probes::DeviceInfo& d, const probes::LinkPath& p) {
    metrics_.RecordLinkPath(d.index, p);
    status_board_.RecordLinkPath(d.index, p);
  };
  // What a cycle came to, judged once and handed to every surface in one pass.
  pipeline_.SetLinkErrorReader(seams_.link_errors);
  pipeline_.Add(metrics_);
  pipeline_.Add(status_board_);
  pipeline_.Add(*evidence_);
  pipeline_.Add(persistence_);
  pipeline_.Add(cycle_log_);
  callbacks.on_cycle = [this](const CycleReport& r) { pipeline_.Fold(r, *CurrentConfig()); };
  callbacks.next_expiry = [this] { return health_.NextExpiry(); };
  callbacks.on_expiry = [this] { pipeline_.Expire(*CurrentConfig()); };
  callbacks.flip_ahead = [this](const probes::DeviceInfo& d, const probes::LinkPath& path,
                                const probes::ProbeSample& s) {
    return health_.ReadingsToFlip(d, path, s);
  };
  scheduler_ = std::make_unique<Scheduler>(backend_, devices_, config, std::move(busy),
                                           *seams_.clock, seams_.jitter_seed, std::move(callbacks));

  if (seams_.link_state) {
    LinkWatchHooks hooks;
    hooks.probing_since = [this](int device) { return scheduler_->ProbingSince(device); };
    hooks.on_change = [this](const probes::DeviceInfo& d, const LinkWatchState& state) {
      pipeline_.LinkWatchChanged(d, state);
    };
    link_watch_ = std::make_unique<LinkWatcher>(*seams_.link_state, devices_, config, *seams_.clock,
                                                std::move(hooks));
    // What each link can train to, from the path as it reads now (idle speeds do not
    // matter: the maxima do); each cycle's reading while probing replaces it.
    for (const auto& d : devices_) {
      link_watch_->SetPath(d, backend_.ReadLinkPath(d.index));
      // Its counters at 0 from the first scrape, where it has links to read.
      pipeline_.LinkWatchChanged(d, link_watch_->State(d.uuid));
    }
    pipeline_.SetLinkWatch(link_watch_.get());
    spdlog::info("link watch: {}", link_watch_->Describe());
  }
}

// The probe thread, and how it ended.
class Service::ProbeThread {
 public:
  explicit ProbeThread(Scheduler& scheduler)
      : thread_([this, &scheduler](std::stop_token stop) {
          try {
            scheduler.Run(stop);
          } catch (const std::exception& e) {
            spdlog::critical("probe loop failed: {}", e.what());
            failed_ = true;
          }
          std::lock_guard lock(mutex_);
          done_ = true;
          done_cv_.notify_all();
        }) {}

  bool failed() const { return failed_; }

  // Asks the loop to stop and waits up to `wait` for it; false when it has not returned.
  bool Stop(std::chrono::milliseconds wait) {
    thread_.request_stop();
    std::unique_lock lock(mutex_);
    if (!done_cv_.wait_for(lock, wait, [&] { return done_; })) return false;
    lock.unlock();
    thread_.join();
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::atomic<bool> failed_{false};
  std::jthread thread_;  // last: it starts once the members it uses exist
};

int Service::Supervise(ProbeThread& probe) {
  const auto watchdog = seams_.notifier->WatchdogInterval();
  if (watchdog) {
    spdlog::info("systemd watchdog: pinging every {:.1f} s while the probe loop progresses",
                 watchdog->count() / 2e6);
  }
  auto next_ping = std::chrono::steady_clock::now();
  std::uint64_t cycles_seen = 0;
  for (;;) {
    auto wait = reload_ || !ready_ ? std::chrono::milliseconds(kTick) : kIdleTick;
    if (watchdog) {
      const auto to_ping = duration_cast<std::chrono::milliseconds>(
          next_ping - std::chrono::steady_clock::now());
      wait = std::clamp(to_ping, std::chrono::milliseconds(0), wait);
    }
    const platform::Signal signal = seams_.signals->Wait(wait);
    if (signal.kind == platform::Signal::Kind::kStop) {
      spdlog::info("{}: stopping", signal.name);
      return kExitOk;
    }
    if (signal.kind == platform::Signal::Kind::kReload) {
      if (reload_) {
        spdlog::info("{}: a reload is still reading its files; another follows it", signal.name);
        reload_again_ = true;
      } else {
        spdlog::info("{}: reloading the configuration", signal.name);
        StartReload();
      }
    }
    if (ReloadReady()) FinishReload();
    if (reload_again_ && !reload_) {
      reload_again_ = false;
      StartReload();
    }
    if (probe.failed()) return kExitSoftware;
    const std::uint64_t cycles = scheduler_->CyclesCompleted();
    if (cycles != cycles_seen) {
      cycles_seen = cycles;
      if (!ready_) {
        // Serving and one cycle done: what "started" means for a Type=notify service.
        seams_.notifier->Ready();
        ready_ = true;
        spdlog::info("ready: first probe cycle done");
      }
      seams_.notifier->Status(cycle_log_.Status());
    }
    CheckStall();
    const auto now = std::chrono::steady_clock::now();
    if (watchdog && now >= next_ping) {
      // A probe stuck in a device call starves systemd of pings: it restarts the service.
      if (!stalled_) seams_.notifier->Watchdog();
      next_ping = now + duration_cast<std::chrono::steady_clock::duration>(*watchdog / 2);
    }
  }
}

// The servers stop outside the lock that the refusal metrics read them under: a scrape in
// flight finishes (its server's stop waits for it) without ever seeing one half destroyed.
void Service::StopServing() {
  std::unique_ptr<HttpServer> http, socket;
  {
    std::lock_guard lock(servers_mutex_);
    http = std::move(http_);
    socket = std::move(health_socket_);
  }
  http.reset();
  socket.reset();
}

int Service::Run() {
  const auto config = CurrentConfig();
  Prepare(*config);
  StartServing(*config);
  ProbeThread probe(*scheduler_);
  if (link_watch_) link_watch_->Start();
  const int exit_code = Supervise(probe);
  if (link_watch_) link_watch_->Stop();  // a poll takes microseconds: no wait to bound

  seams_.notifier->Stopping();
  if (!probe.Stop(kProbeStopWait)) {
    // A device call that ignores cancellation (a hung driver) cannot be waited for: the
    // state was saved after the last cycle, so leaving now loses nothing.
    spdlog::error("stopping without the probe thread: a device call did not return within {:.1f} s",
                  duration<double>(kProbeStopWait).count());
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    _exit(exit_code);
  }
  if (reload_ && !ReloadReady()) {
    // A reload still reading (a hung file system): its thread cannot be waited for, and
    // the process must not run its exit handlers under it. Nothing of it is needed now.
    StopServing();
    spdlog::warn("stopped while a reload was still reading its files; it is abandoned");
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    _exit(exit_code);
  }
  StopServing();
  spdlog::info("stopped");
  spdlog::default_logger()->flush();
  return exit_code;
}

}  // namespace xferd::cmd
