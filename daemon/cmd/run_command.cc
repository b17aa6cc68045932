// `xferd run`: the daemon. Reads the flags and the config, takes the process signals, picks
// the backend and its devices, and runs the Service (cmd/service.h) until stopped.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include "cmd/backend.h"
#include "cmd/band_output.h"
#include "cmd/commands.h"
#include "cmd/service.h"
#include "config/config.h"
#include "platform/abandonable_call.h"
#include "platform/build_info.h"
#include "platform/files.h"
#include "platform/logging.h"
#include "platform/signals.h"
#include "platform/systemd_notifier.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::platform;

namespace {

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
  if (const auto stop =
          CallUnlessStopped([&] { config = ConfigWithFlags(options.flags); }, *signals)) {
    std::fprintf(stderr, "xferd: %s while reading the configuration: stopping\n",
                 stop->name.c_str());
    std::fflush(nullptr);
    _exit(kExitOk);
  }
  const LogTarget target = SetUpLogging(config.log_level);
  const std::string& file = options.flags.config_file;
  const std::string config_name = file.empty() ? "(defaults)" : file;
  spdlog::info("xferd {} starting; config {}; logging to {}", kVersion, config_name,
               target == LogTarget::kJournal ? "the journal" : "stderr");

  Backend made = MakeBackend(config, "run", options.flags.sysfs_root.value_or("/sys"));
  std::vector<probes::DeviceInfo> devices = SelectConfigured(made.backend->Devices(), config);
  if (devices.empty()) {
    throw probes::NoDeviceError("the " + made.backend->Name() +
                                " backend found no device to probe");
  }
  for (const auto& d : devices) {
    spdlog::info("gpu {}: {} {} {}{}", d.index, d.name, d.uuid, d.pci_bus_id,
                 d.simulated ? " (SIMULATED device: not real hardware)" : "");
    // Said once: what the driver says of CC and MIG, or why it could not be read.
    spdlog::info("gpu {}: {}", d.index, ShapeText(d));
  }

  core::SteadyClock clock;
  const std::unique_ptr<Notifier> notifier = MakeSystemdNotifier();
  ServiceSeams seams;
  seams.clock = &clock;
  seams.notifier = notifier.get();
  seams.signals = signals.get();
  seams.reload = [&options] { return ConfigWithFlags(options.flags); };
  seams.make_busy = [sim = made.sim](const Config& c) { return MakeBusyDetector(c, sim); };
  seams.on_reload = [sim = made.sim](const Config& c) {
    if (sim != nullptr) {
      sim->SetFaults(c.sim.faults);
      sim->SetShape(c.sim.confidential_computing, c.sim.cc_ready, c.sim.mig);
    }
  };
  seams.link_errors =
      MakeLinkErrorReader(config, made.sim, options.flags.sysfs_root.value_or("/sys"));
  seams.jitter_seed = JitterSeed();
  seams.config_name = file.empty() ? "(defaults and flags)" : file;
  Service service(std::move(config), *made.backend, std::move(devices), std::move(seams));
  return service.Run();
}

}  // namespace xferd::cmd
