// `xferd run`: the daemon. Reads the flags and the config, takes the process signals, picks
// the backend and its devices, and runs the Service (cmd/service.h) until stopped.
#include <malloc.h>
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
#include "core/clock.h"
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

// The simulated device on simulated time: its timeline follows `clock`, and each probe
// moves the clock by the time it takes instead of taking it in real time.
void OnSimulatedTime(Config& config, core::SimulatedClock* clock) {
  if (clock == nullptr) return;
  config.sim.time_scale = 0;
  config.sim.clock = [clock] { return clock->Now(); };
  config.sim.advance = [clock](std::chrono::nanoseconds d) { clock->Advance(d); };
}

}  // namespace

int RunDaemonCommand(const RunCommandOptions& options) {
  // Before any thread starts, so that every thread inherits the blocked signals. They were
  // blocked since the process started (main.cc's BlockProcessSignals); one that came since
  // waits for the first Wait.
  const std::unique_ptr<SignalSource> signals = TakeProcessSignals();
  // Large buffers (a status document, the page, a scrape's text: up to ~1-2 MB on a 64-GPU
  // host) straight from mmap and back to the system when freed. Left to glibc, the first
  // such buffer freed raises its mmap threshold to that size, and from then on the texts
  // come from the threads' heaps, where what a burst of readers left stays: 50 readers of a
  // 64-GPU host's document kept RSS 3-4 MiB up after they left and peaked at 30-32 MiB;
  // with the threshold fixed, 26-28 MiB and 1.3-1.6 MiB (docs/performance.md).
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);

  // Read on a thread of its own: a file on a hung file system must not keep SIGTERM from
  // stopping xferd (a FIFO or a device is refused at once by the bounded reader). A SIGHUP
  // meanwhile (or before) is a reload once the service runs: the file may have changed
  // after it was read.
  Config config;
  bool reload_asked = false;
  if (const auto stop = CallUnlessStopped([&] { config = ConfigWithFlags(options.flags); },
                                          *signals, &reload_asked)) {
    std::fprintf(stderr, "xferd: %s while reading the configuration: stopping\n",
                 stop->name.c_str());
    std::fflush(nullptr);
    _exit(kExitOk);
  }
  // [simulate] speedup: the daemon and the simulated device on simulated time.
  std::unique_ptr<core::SimulatedClock> simulated;
  if (config.simulate && config.sim_speedup > 0) {
    simulated = std::make_unique<core::SimulatedClock>(config.sim_speedup);
  }
  OnSimulatedTime(config, simulated.get());
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

  if (simulated) {
    spdlog::info(
        "simulated time: the clock runs {:g}x real time, and each probe takes its "
        "simulated time on it ([simulate] speedup)",
        config.sim_speedup);
  }
  core::SteadyClock steady;
  core::Clock& clock = simulated ? static_cast<core::Clock&>(*simulated) : steady;
  const std::unique_ptr<Notifier> notifier = MakeSystemdNotifier();
  ServiceSeams seams;
  seams.clock = &clock;
  seams.notifier = notifier.get();
  seams.signals = signals.get();
  seams.reload = [&options, clock = simulated.get()] {
    Config next = ConfigWithFlags(options.flags);
    OnSimulatedTime(next, clock);  // as the running device is: a reload does not change it
    return next;
  };
  seams.make_busy = [sim = made.sim](const Config& c) { return MakeBusyDetector(c, sim); };
  seams.on_reload = [sim = made.sim](const Config& c) {
    if (sim != nullptr) {
      sim->SetFaults(c.sim.faults);
      sim->SetShape(c.sim.confidential_computing, c.sim.cc_ready, c.sim.mig);
    }
  };
  seams.link_errors =
      MakeLinkErrorReader(config, made.sim, options.flags.sysfs_root.value_or("/sys"));
  seams.link_state =
      MakeLinkStateReader(config, made.sim, options.flags.sysfs_root.value_or("/sys"));
  seams.jitter_seed = JitterSeed();
  seams.config_name = file.empty() ? "(defaults and flags)" : file;
  seams.reload_at_start = reload_asked;
  Service service(std::move(config), *made.backend, std::move(devices), std::move(seams));
  return service.Run();
}

}  // namespace xferd::cmd
