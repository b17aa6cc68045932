// `xferd run`: the daemon. Reads the flags and the config, takes the process signals, picks
// the backend and its devices, and runs the Service (cmd/service.h) until stopped.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include "cmd/backend.h"
#include "cmd/commands.h"
#include "cmd/service.h"
#include "config/config.h"
#include "platform/abandonable_call.h"
#include "platform/build_info.h"
#include "platform/files.h"
#include "platform/logging.h"
#include "platform/signals.h"
#include "platform/systemd_notifier.h"
#include "web/listen_address.h"
#include "web/paths.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::platform;
using namespace xferd::web;

namespace {

// Flags win over the file. Throws ConfigError (exit 78) for what the file or the web
// config says, UsageError (exit 64) for a bad flag; flags are checked by the same
// functions as the file's keys.
// `value` of `flag` after `check` (a web:: check that throws HttpError) passed it.
template <typename Check>
std::string CheckedFlag(const char* flag, const std::string& value, Check check) {
  try {
    check(value);
  } catch (const HttpError& e) {
    throw UsageError(std::string(flag) + ": " + e.what());
  }
  return value;
}

Config EffectiveConfig(const RunCommandOptions& options) {
  Config config = options.config_file.empty() ? Config{} : LoadConfig(options.config_file);
  if (options.simulate) config.simulate = true;
  if (options.sysfs_root) config.sim.sysfs_root = *options.sysfs_root;
  if (options.listen_address) {
    config.listen_address = CheckedFlag("--web.listen-address", *options.listen_address,
                                        [](const std::string& a) { ParseListenAddress(a); });
  }
  if (options.telemetry_path) {
    config.telemetry_path = CheckedFlag("--web.telemetry-path", *options.telemetry_path,
                                        [](const std::string& p) { CheckTelemetryPath(p); });
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

// Different on every machine and every start, so a fleet booted together spreads out.
std::uint64_t JitterSeed() {
  std::uint64_t seed = std::random_device{}();
  seed = (seed << 32) ^ std::random_device{}();
  if (const auto id = TryReadFileBounded("/etc/machine-id", 4096)) {
    seed ^= std::hash<std::string>{}(*id);
  }
  return seed;
}

}  // namespace

int RunDaemonCommand(const RunCommandOptions& options) {
  // Before any thread starts, so that every thread inherits the blocked signals.
  const std::unique_ptr<SignalSource> signals = TakeProcessSignals();

  // Read on a thread of its own: a file on a hung file system must not keep SIGTERM from
  // stopping xferd (a FIFO or a device is refused at once by the bounded reader).
  Config config;
  if (const auto stop = CallUnlessStopped([&] { config = EffectiveConfig(options); }, *signals)) {
    std::fprintf(stderr, "xferd: %s while reading the configuration: stopping\n",
                 stop->name.c_str());
    std::fflush(nullptr);
    _exit(kExitOk);
  }
  const LogTarget target = SetUpLogging(config.log_level);
  const std::string config_name = options.config_file.empty() ? "(defaults)" : options.config_file;
  spdlog::info("xferd {} starting; config {}; logging to {}", kVersion, config_name,
               target == LogTarget::kJournal ? "the journal" : "stderr");

  Backend made = MakeBackend(config, "run", options.sysfs_root.value_or("/sys"));
  std::vector<probes::DeviceInfo> devices = SelectConfigured(made.backend->Devices(), config);
  if (devices.empty()) {
    throw probes::NoDeviceError("the " + made.backend->Name() +
                                " backend found no device to probe");
  }
  for (const auto& d : devices) {
    spdlog::info("gpu {}: {} {} {}{}", d.index, d.name, d.uuid, d.pci_bus_id,
                 d.simulated ? " (SIMULATED device: not real hardware)" : "");
  }

  core::SteadyClock clock;
  const std::unique_ptr<Notifier> notifier = MakeSystemdNotifier();
  ServiceSeams seams;
  seams.clock = &clock;
  seams.notifier = notifier.get();
  seams.signals = signals.get();
  seams.reload = [&options] { return EffectiveConfig(options); };
  seams.make_busy = [sim = made.sim](const Config& c) { return MakeBusyDetector(c, sim); };
  seams.sim = made.sim;
  seams.link_errors = MakeLinkErrorReader(config, made.sim, options.sysfs_root.value_or("/sys"));
  seams.jitter_seed = JitterSeed();
  seams.config_name = options.config_file.empty() ? "(defaults and flags)" : options.config_file;
  Service service(std::move(config), *made.backend, std::move(devices), std::move(seams));
  return service.Run();
}

}  // namespace xferd::cmd
