// The fakes every test shares, one per seam: the clock, the transfer backend, the GPU-load
// reader and busy detector, the systemd notifier and the process signals. Each records
// what it was asked and is safe to inspect from the test thread while the code under test
// runs on its own threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/busy_detector.h"
#include "core/clock.h"
#include "platform/signals.h"
#include "platform/systemd_notifier.h"
#include "xferd/probes/backend.h"
#include "xferd/probes/gpu_load.h"
#include "xferd/probes/nvml.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::fakes {

// Time that moves only when told: SleepUntil jumps to the deadline at once.
class FakeClock final : public core::Clock {
 public:
  core::SteadyTime Now() const override;
  bool SleepUntil(core::SteadyTime until, std::stop_token stop) override;
  void Advance(std::chrono::nanoseconds d);

 private:
  mutable std::mutex mutex_;
  core::SteadyTime now_{std::chrono::seconds(1000)};
};

// GPUs "FAKE-0".."FAKE-<n-1>" whose probes succeed (1 ms per transfer) unless told
// otherwise. With a clock, each probe advances it by `probe_wall` (or by its `cost`).
class FakeBackend final : public probes::TransferBackend {
 public:
  explicit FakeBackend(FakeClock* clock = nullptr, int devices = 2);

  std::string Name() const override { return "fake"; }
  std::vector<probes::DeviceInfo> Devices() const override;
  probes::Capabilities GetCapabilities(int) const override { return {}; }
  probes::LinkPath ReadLinkPath(int) const override;
  probes::ProbeSample Run(int device, const probes::ProbeSpec& spec, std::stop_token stop) override;

  // Probes block while held: a hung device call. With `ignore_stop` they do not give up
  // when asked to stop either (a driver call that ignores cancellation).
  void Hold(bool ignore_stop = false);
  void Release();
  bool Entered() const { return entered_.load(); }  // a probe has started

  std::vector<probes::ProbeSpec> Ran() const;  // GPU 0's probes, in the order they ran

  std::chrono::milliseconds probe_wall{10};
  double device_time_s = 0.01;
  probes::LinkPath link_path;  // what ReadLinkPath returns (empty: nothing known)
  // Bandwidth of every ok probe (all its durations alike); unset = 1 ms per transfer. Per
  // (mode, direction) when `bandwidth_of` has it.
  std::optional<double> bandwidth;
  std::map<std::pair<probes::TransferMode, probes::Direction>, double> bandwidth_of;
  probes::ProbeStatus status = probes::ProbeStatus::kOk;
  // A fixed device cost per (mode, direction) in seconds; the call takes that long too.
  std::map<std::pair<probes::TransferMode, probes::Direction>, double> cost;
  std::atomic<int> runs{0};
  std::map<int, int> runs_per_device;  // read once the probe thread has stopped
  mutable std::atomic<int> link_reads{0};

 private:
  FakeClock* clock_;
  int devices_;
  std::atomic<bool> held_{false}, ignore_stop_{false}, entered_{false};
  mutable std::mutex mutex_;
  std::vector<probes::ProbeSpec> ran_;
};

// The load `read` says (nullopt: cannot be read).
class FakeGpuLoadReader final : public probes::GpuLoadReader {
 public:
  using Read_ = std::function<std::optional<probes::GpuLoad>(const probes::DeviceInfo&)>;
  explicit FakeGpuLoadReader(Read_ read) : read_(std::move(read)) {}
  std::optional<probes::GpuLoad> Read(const probes::DeviceInfo& device) override {
    return read_(device);
  }
  std::string Describe() const override { return "fake"; }

 private:
  Read_ read_;
};

// NVML as a test scripts it (probes::NvmlApi): each GPU, by PCI bus id, answers what the
// test set, and its PCIe byte counters advance by a step on every reading, as a link with
// steady traffic does. Safe to call from several threads (the throughput sampler).
class FakeNvml final : public probes::NvmlApi {
 public:
  struct Counters {
    probes::NvmlCounterValue rx, tx;         // the next reading (tx takes rx's timestamp)
    std::uint64_t rx_step = 0, tx_step = 0;  // added after each reading
    std::int64_t timestamp_step_us = 0;
  };
  struct Gpu {
    std::string uuid;
    unsigned utilization = 0;
    probes::NvmlReturn utilization_rc = probes::kNvmlSuccess;
    unsigned rx_kib_per_s = 0, tx_kib_per_s = 0;
    probes::NvmlReturn throughput_rc = probes::kNvmlSuccess;
    Counters counters;
    probes::NvmlReturn counters_rc = probes::kNvmlSuccess;
    std::vector<probes::NvmlSample> samples;
    unsigned replays = 0;
    probes::NvmlReturn replays_rc = probes::kNvmlSuccess;
    // The GPU's own link: as it runs now, and the most it can train to.
    unsigned link_gen = 5, link_width = 16, max_link_gen = 5, max_link_width = 16;
    probes::NvmlReturn link_rc = probes::kNvmlSuccess;
    // MIG: the mode (kNvmlErrorNotSupported = a GPU without MIG), the profiles the GPU
    // offers and its MIG devices (a handle points at its entry; set them before asking).
    std::string name = "NVIDIA H200";
    unsigned mig_current = 0;
    probes::NvmlReturn mig_rc = probes::kNvmlErrorNotSupported;
    std::vector<probes::NvmlGpuInstanceProfile> profiles;
    struct MigDevice {
      std::string uuid;
      unsigned gpu_instance = 0, compute_instance = 0, profile_id = 0;
    };
    std::vector<MigDevice> mig_devices;
  };

  std::string Unavailable() const override { return unavailable; }
  std::string DriverVersion() const override { return "580.00-fake"; }
  std::string ErrorText(probes::NvmlReturn rc) const override;
  probes::NvmlReturn DeviceByPciBusId(const std::string& bus_id,
                                      probes::NvmlDevice* device) override;
  probes::NvmlReturn DeviceByUuid(const std::string& uuid, probes::NvmlDevice* device) override;
  probes::NvmlReturn GpuUtilization(probes::NvmlDevice device, unsigned* percent) override;
  probes::NvmlReturn PcieThroughput(probes::NvmlDevice device, probes::PcieCounter counter,
                                    unsigned* kib_per_s) override;
  bool HasPcieByteCounters() const override { return has_counters; }
  probes::NvmlReturn PcieByteCounters(probes::NvmlDevice device, probes::NvmlCounterValue* rx,
                                      probes::NvmlCounterValue* tx) override;
  bool HasUtilizationSamples() const override { return has_samples; }
  probes::NvmlReturn UtilizationSamples(probes::NvmlDevice device, std::uint64_t since_us,
                                        std::vector<probes::NvmlSample>* samples) override;
  probes::NvmlReturn PcieReplayCounter(probes::NvmlDevice device, unsigned* replays) override;
  probes::NvmlReturn CurrentPcieLink(probes::NvmlDevice device, unsigned* generation,
                                     unsigned* width) override;
  probes::NvmlReturn MaxPcieLink(probes::NvmlDevice device, unsigned* generation,
                                 unsigned* width) override;
  probes::NvmlReturn ConfComputeSettings(probes::NvmlConfComputeState* state) override;
  probes::NvmlReturn ConfComputeState(probes::NvmlConfComputeState* state) override;
  probes::NvmlReturn ConfComputeGpusReady(unsigned* accepting_work) override;
  probes::NvmlReturn MigMode(probes::NvmlDevice device, unsigned* current,
                             unsigned* pending) override;
  probes::NvmlReturn MaxMigDeviceCount(probes::NvmlDevice device, unsigned* count) override;
  probes::NvmlReturn MigDeviceByIndex(probes::NvmlDevice device, unsigned index,
                                      probes::NvmlDevice* mig) override;
  probes::NvmlReturn ParentOfMigDevice(probes::NvmlDevice mig, probes::NvmlDevice* parent) override;
  probes::NvmlReturn GpuInstanceId(probes::NvmlDevice mig, unsigned* id) override;
  probes::NvmlReturn ComputeInstanceId(probes::NvmlDevice mig, unsigned* id) override;
  probes::NvmlReturn GpuInstanceProfileId(probes::NvmlDevice device, unsigned gpu_instance_id,
                                          unsigned* profile_id) override;
  probes::NvmlReturn GpuInstanceProfileInfo(probes::NvmlDevice device, unsigned profile_index,
                                            probes::NvmlGpuInstanceProfile* profile) override;
  probes::NvmlReturn DeviceCount(unsigned* count) override;
  probes::NvmlReturn DeviceByIndex(unsigned index, probes::NvmlDevice* device) override;
  probes::NvmlReturn Uuid(probes::NvmlDevice device, std::string* uuid) override;
  probes::NvmlReturn Name(probes::NvmlDevice device, std::string* name) override;
  probes::NvmlReturn PciBusId(probes::NvmlDevice device, std::string* bus_id) override;

  // The GPU at `bus_id`, to set up or change between calls (under the fake's lock).
  void Set(const std::string& bus_id, const std::function<void(Gpu&)>& change);
  int CounterReads() const;

  std::string unavailable;  // "" = usable
  bool has_counters = true, has_samples = true;
  // Confidential computing: what each call returns (kNvmlErrorFunctionNotFound: a driver
  // without it).
  probes::NvmlConfComputeState cc;
  probes::NvmlReturn cc_settings_rc = probes::kNvmlErrorFunctionNotFound;
  probes::NvmlReturn cc_state_rc = probes::kNvmlErrorFunctionNotFound;
  unsigned cc_ready = 1;
  probes::NvmlReturn cc_ready_rc = probes::kNvmlErrorFunctionNotFound;

 private:
  Gpu* Find(probes::NvmlDevice device);
  // The MIG device a handle points at, and its GPU; nullptr when it is none.
  Gpu::MigDevice* FindMig(probes::NvmlDevice device, Gpu** parent);
  // What `answer` returns for the GPU `device` points at, under the lock; the driver's
  // kNvmlErrorInvalidArgument for a handle that is no GPU's.
  template <typename Answer>
  probes::NvmlReturn OnGpu(probes::NvmlDevice device, Answer answer) {
    std::lock_guard lock(mutex_);
    Gpu* gpu = Find(device);
    return gpu == nullptr ? probes::kNvmlErrorInvalidArgument : answer(*gpu);
  }
  // The same for the MIG device `mig` points at.
  template <typename Answer>
  probes::NvmlReturn OnMig(probes::NvmlDevice mig, Answer answer) {
    std::lock_guard lock(mutex_);
    Gpu* gpu = nullptr;
    Gpu::MigDevice* m = FindMig(mig, &gpu);
    return m == nullptr ? probes::kNvmlErrorInvalidArgument : answer(*gpu, *m);
  }
  mutable std::mutex mutex_;
  std::map<std::string, Gpu> gpus_;  // by PCI bus id; a device handle points at its entry
  int counter_reads_ = 0;
};

// GPU `busy_device` at 95% utilisation, every other one idle.
std::unique_ptr<core::BusyDetector> BusyOnly(int busy_device);

// Records every message in order: "READY", "STATUS=...", "WATCHDOG", "RELOADING",
// "STOPPING".
class FakeNotifier final : public platform::Notifier {
 public:
  explicit FakeNotifier(std::optional<std::chrono::microseconds> watchdog = std::nullopt)
      : watchdog_(watchdog) {}
  void Ready() override { Record("READY"); }
  void Status(std::string_view text) override { Record("STATUS=" + std::string(text)); }
  void Watchdog() override { Record("WATCHDOG"); }
  void Reloading() override { Record("RELOADING"); }
  void Stopping() override { Record("STOPPING"); }
  std::optional<std::chrono::microseconds> WatchdogInterval() const override { return watchdog_; }

  std::vector<std::string> Messages() const;
  int Count(std::string_view message) const;  // exact matches
  // Waits until `done(messages)` holds; false after `timeout`.
  bool WaitFor(const std::function<bool(const std::vector<std::string>&)>& done,
               std::chrono::milliseconds timeout) const;

 private:
  void Record(std::string message);
  std::optional<std::chrono::microseconds> watchdog_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<std::string> messages_;
};

// Signals sent by the test.
class FakeSignals final : public platform::SignalSource {
 public:
  void Send(platform::Signal::Kind kind);
  platform::Signal Wait(std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable sent_;
  std::deque<platform::Signal::Kind> queue_;
};

// A fresh directory "xferd-NAME-XXXXXX" in the system's temp dir, removed with all it
// holds at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& name);
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to path()/file as it is (binary); that path.
  std::filesystem::path Write(const std::string& file, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

// `threads` clients, each calling attempt(its number, n) for n = 0, 1, ... until Stop() or
// the destructor: a flood of requests (guesses, scrapes) against the code under test.
class Flood {
 public:
  Flood(int threads, std::function<void(int thread, int n)> attempt);
  ~Flood() { Stop(); }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;
  // Returns once every client has finished its last attempt.
  void Stop();

 private:
  const std::function<void(int, int)> attempt_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Captures what is logged (spdlog's default logger) while it lives.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string Text() const;
  // How often `what` was logged.
  int Count(const std::string& what) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A pinned probe of the default size (64 MiB) in `direction`: the spec most tests run.
probes::ProbeSpec PinnedSpec(probes::Direction direction = probes::Direction::kH2D);

// The simulated device's built-in host at time_scale 0 (simulated durations, no sleeping):
// `devices` GPUs, `gpus_per_switch` behind each PCIe switch, whose uplink trained to Gen
// `uplink_gen` x `uplink_width`.
probes::SimOptions SwitchedSimHost(int devices, int gpus_per_switch, int uplink_gen,
                                   int uplink_width);

}  // namespace xferd::fakes
