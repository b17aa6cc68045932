#include "testing/fakes.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace xferd::fakes {

core::SteadyTime FakeClock::Now() const {
  std::lock_guard lock(mutex_);
  return now_;
}

bool FakeClock::SleepUntil(core::SteadyTime until, std::stop_token stop) {
  if (stop.stop_requested()) return false;
  std::lock_guard lock(mutex_);
  if (until > now_) now_ = until;
  return true;
}

void FakeClock::Advance(std::chrono::nanoseconds d) {
  std::lock_guard lock(mutex_);
  now_ += std::chrono::duration_cast<core::SteadyTime::duration>(d);
}

std::string FakeNvml::ErrorText(probes::NvmlReturn rc) const {
  switch (rc) {
    case probes::kNvmlErrorNotSupported: return "Not Supported";
    case probes::kNvmlErrorNotFound: return "Not Found";
    case probes::kNvmlErrorGpuIsLost: return "GPU is lost";
  }
  return "fake NVML error " + std::to_string(rc);
}

FakeNvml::Gpu* FakeNvml::Find(probes::NvmlDevice device) {
  for (auto& [bus_id, gpu] : gpus_) {
    if (static_cast<const void*>(&gpu) == device) return &gpu;
  }
  return nullptr;
}

probes::NvmlReturn FakeNvml::DeviceByPciBusId(const std::string& bus_id,
                                              probes::NvmlDevice* device) {
  std::lock_guard lock(mutex_);
  auto it = gpus_.find(bus_id);
  if (!unavailable.empty() || it == gpus_.end()) return probes::kNvmlErrorNotFound;
  *device = &it->second;
  return probes::kNvmlSuccess;
}

probes::NvmlReturn FakeNvml::DeviceByUuid(const std::string& uuid, probes::NvmlDevice* device) {
  std::lock_guard lock(mutex_);
  for (auto& [bus_id, gpu] : gpus_) {
    if (unavailable.empty() && !uuid.empty() && gpu.uuid == uuid) {
      *device = &gpu;
      return probes::kNvmlSuccess;
    }
  }
  return probes::kNvmlErrorNotFound;
}

probes::NvmlReturn FakeNvml::GpuUtilization(probes::NvmlDevice device, unsigned* percent) {
  return OnGpu(device, [&](Gpu& gpu) {
    *percent = gpu.utilization;
    return gpu.utilization_rc;
  });
}

probes::NvmlReturn FakeNvml::PcieThroughput(probes::NvmlDevice device, probes::PcieCounter counter,
                                            unsigned* kib_per_s) {
  // As the real call, each sample takes a while (1 ms here, 20 ms in the driver).
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return OnGpu(device, [&](Gpu& gpu) {
    *kib_per_s = counter == probes::PcieCounter::kRx ? gpu.rx_kib_per_s : gpu.tx_kib_per_s;
    return gpu.throughput_rc;
  });
}

probes::NvmlReturn FakeNvml::PcieByteCounters(probes::NvmlDevice device,
                                              probes::NvmlCounterValue* rx,
                                              probes::NvmlCounterValue* tx) {
  return OnGpu(device, [&](Gpu& gpu) {
    ++counter_reads_;
    if (gpu.counters_rc != probes::kNvmlSuccess) return gpu.counters_rc;
    Counters& c = gpu.counters;
    *rx = c.rx;
    *tx = c.tx;
    tx->timestamp_us = c.rx.timestamp_us;
    c.rx.value += c.rx_step;  // unsigned: wraps at 2^64 as the driver's counter would
    c.tx.value += c.tx_step;
    c.rx.timestamp_us += c.timestamp_step_us;
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::UtilizationSamples(probes::NvmlDevice device, std::uint64_t since_us,
                                                std::vector<probes::NvmlSample>* samples) {
  samples->clear();
  return OnGpu(device, [&](Gpu& gpu) {
    for (const probes::NvmlSample& s : gpu.samples) {
      if (s.timestamp_us > since_us) samples->push_back(s);
    }
    return samples->empty() ? probes::kNvmlErrorNotFound : probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::PcieReplayCounter(probes::NvmlDevice device, unsigned* replays) {
  return OnGpu(device, [&](Gpu& gpu) {
    *replays = gpu.replays;
    return gpu.replays_rc;
  });
}

probes::NvmlReturn FakeNvml::CurrentPcieLink(probes::NvmlDevice device, unsigned* generation,
                                             unsigned* width) {
  return OnGpu(device, [&](Gpu& gpu) {
    *generation = gpu.link_gen;
    *width = gpu.link_width;
    return gpu.link_rc;
  });
}

probes::NvmlReturn FakeNvml::MaxPcieLink(probes::NvmlDevice device, unsigned* generation,
                                         unsigned* width) {
  return OnGpu(device, [&](Gpu& gpu) {
    *generation = gpu.max_link_gen;
    *width = gpu.max_link_width;
    return gpu.link_rc;
  });
}

probes::NvmlReturn FakeNvml::ConfComputeSettings(probes::NvmlConfComputeState* state) {
  std::lock_guard lock(mutex_);
  if (cc_settings_rc == probes::kNvmlSuccess) *state = cc;
  return cc_settings_rc;
}

probes::NvmlReturn FakeNvml::ConfComputeState(probes::NvmlConfComputeState* state) {
  std::lock_guard lock(mutex_);
  if (cc_state_rc == probes::kNvmlSuccess)
    *state = {cc.environment, cc.cc_feature, cc.devtools_mode, {}};
  return cc_state_rc;
}

probes::NvmlReturn FakeNvml::ConfComputeGpusReady(unsigned* accepting_work) {
  std::lock_guard lock(mutex_);
  if (cc_ready_rc == probes::kNvmlSuccess) *accepting_work = cc_ready;
  return cc_ready_rc;
}

FakeNvml::Gpu::MigDevice* FakeNvml::FindMig(probes::NvmlDevice device, Gpu** parent) {
  for (auto& [bus_id, gpu] : gpus_) {
    for (auto& mig : gpu.mig_devices) {
      if (static_cast<const void*>(&mig) == device) {
        *parent = &gpu;
        return &mig;
      }
    }
  }
  return nullptr;
}

probes::NvmlReturn FakeNvml::MigMode(probes::NvmlDevice device, unsigned* current,
                                     unsigned* pending) {
  return OnGpu(device, [&](Gpu& gpu) {
    if (gpu.mig_rc == probes::kNvmlSuccess) *current = *pending = gpu.mig_current;
    return gpu.mig_rc;
  });
}

probes::NvmlReturn FakeNvml::MaxMigDeviceCount(probes::NvmlDevice device, unsigned* count) {
  return OnGpu(device, [&](Gpu& gpu) {
    *count = gpu.mig_current == probes::kNvmlMigEnabled ? 7 : 0;
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::MigDeviceByIndex(probes::NvmlDevice device, unsigned index,
                                              probes::NvmlDevice* mig) {
  return OnGpu(device, [&](Gpu& gpu) {
    if (index >= gpu.mig_devices.size()) return probes::kNvmlErrorNotFound;
    *mig = &gpu.mig_devices[index];
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::ParentOfMigDevice(probes::NvmlDevice mig, probes::NvmlDevice* parent) {
  return OnMig(mig, [&](Gpu& gpu, Gpu::MigDevice&) {
    *parent = &gpu;
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::GpuInstanceId(probes::NvmlDevice mig, unsigned* id) {
  return OnMig(mig, [&](Gpu&, Gpu::MigDevice& m) {
    *id = m.gpu_instance;
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::ComputeInstanceId(probes::NvmlDevice mig, unsigned* id) {
  return OnMig(mig, [&](Gpu&, Gpu::MigDevice& m) {
    *id = m.compute_instance;
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::GpuInstanceProfileId(probes::NvmlDevice device,
                                                  unsigned gpu_instance_id, unsigned* profile_id) {
  return OnGpu(device, [&](Gpu& gpu) {
    for (const auto& m : gpu.mig_devices) {
      if (m.gpu_instance != gpu_instance_id) continue;
      *profile_id = m.profile_id;
      return probes::kNvmlSuccess;
    }
    return probes::kNvmlErrorNotFound;
  });
}

probes::NvmlReturn FakeNvml::GpuInstanceProfileInfo(probes::NvmlDevice device,
                                                    unsigned profile_index,
                                                    probes::NvmlGpuInstanceProfile* profile) {
  return OnGpu(device, [&](Gpu& gpu) {
    if (profile_index >= gpu.profiles.size()) return probes::kNvmlErrorInvalidArgument;
    *profile = gpu.profiles[profile_index];
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::DeviceCount(unsigned* count) {
  std::lock_guard lock(mutex_);
  *count = static_cast<unsigned>(gpus_.size());
  return probes::kNvmlSuccess;
}

probes::NvmlReturn FakeNvml::DeviceByIndex(unsigned index, probes::NvmlDevice* device) {
  std::lock_guard lock(mutex_);
  if (index >= gpus_.size()) return probes::kNvmlErrorInvalidArgument;
  *device = &std::next(gpus_.begin(), index)->second;
  return probes::kNvmlSuccess;
}

probes::NvmlReturn FakeNvml::Uuid(probes::NvmlDevice device, std::string* uuid) {
  std::lock_guard lock(mutex_);
  Gpu* parent = nullptr;
  if (const Gpu::MigDevice* m = FindMig(device, &parent)) {
    *uuid = m->uuid;
    return probes::kNvmlSuccess;
  }
  Gpu* gpu = Find(device);
  if (gpu == nullptr) return probes::kNvmlErrorInvalidArgument;
  *uuid = gpu->uuid;
  return probes::kNvmlSuccess;
}

probes::NvmlReturn FakeNvml::Name(probes::NvmlDevice device, std::string* name) {
  return OnGpu(device, [&](Gpu& gpu) {
    *name = gpu.name;
    return probes::kNvmlSuccess;
  });
}

probes::NvmlReturn FakeNvml::PciBusId(probes::NvmlDevice device, std::string* bus_id) {
  std::lock_guard lock(mutex_);
  for (auto& [bus, gpu] : gpus_) {
    if (static_cast<const void*>(&gpu) != device) continue;
    // As NVML writes it: an 8-digit domain, upper case.
    std::string upper;
    for (char c : bus) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    *bus_id = "0000" + upper;
    return probes::kNvmlSuccess;
  }
  return probes::kNvmlErrorInvalidArgument;
}

void FakeNvml::Set(const std::string& bus_id, const std::function<void(Gpu&)>& change) {
  std::lock_guard lock(mutex_);
  change(gpus_[bus_id]);
}

int FakeNvml::CounterReads() const {
  std::lock_guard lock(mutex_);
  return counter_reads_;
}

FakeBackend::FakeBackend(FakeClock* clock, int devices) : clock_(clock), devices_(devices) {}

std::vector<probes::DeviceInfo> FakeBackend::Devices() const {
  std::vector<probes::DeviceInfo> d(static_cast<std::size_t>(devices_));
  for (int i = 0; i < devices_; ++i) {
    d[i].index = i;
    d[i].uuid = "FAKE-" + std::to_string(i);
    d[i].simulated = true;
  }
  return d;
}

probes::LinkPath FakeBackend::ReadLinkPath(int) const {
  ++link_reads;
  std::lock_guard lock(mutex_);
  return link_path;
}

probes::ProbeSample FakeBackend::Run(int device, const probes::ProbeSpec& spec,
                                     std::stop_token stop) {
  entered_ = true;
  probes::ProbeSample s;
  s.spec = spec;
  while (held_ && (ignore_stop_ || !stop.stop_requested())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (stop.stop_requested()) {
    s.status = probes::ProbeStatus::kError;
    s.message = "cancelled";
    return s;
  }
  ++runs;
  {
    std::lock_guard lock(mutex_);
    runs_per_device[device]++;
    if (device == 0) ran_.push_back(spec);
  }
  double device_time = device_time_s;
  auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(probe_wall);
  int timed = spec.iterations;
  if (auto it = cost.find({spec.mode, spec.direction}); it != cost.end()) {
    device_time = it->second;
    if (spec.target_device_s > 0) {
      // The cost is that of warmup + iterations transfers: with a device-time target, of
      // as many as it takes (probes::IsLastTransfer), each costing its share.
      const int all = std::max(1, spec.warmup + spec.iterations);
      const double each = device_time / all;
      const int n = probes::ExpectedTransfers(spec, each);
      device_time = each * n;
      timed = std::max(1, n - spec.warmup);
    }
    wall = std::chrono::nanoseconds(static_cast<std::int64_t>(device_time * 1e9));
  }
  if (clock_ != nullptr) clock_->Advance(wall);
  s.status = status;
  s.bytes_per_transfer = spec.size_bytes;
  double transfer_s = 0.001;
  {
    std::lock_guard lock(mutex_);
    if (auto it = bandwidth_of.find({spec.mode, spec.direction}); it != bandwidth_of.end()) {
      transfer_s = static_cast<double>(spec.size_bytes) / it->second;
    } else if (bandwidth) {
      transfer_s = static_cast<double>(spec.size_bytes) / *bandwidth;
    }
  }
  s.durations_s.assign(static_cast<std::size_t>(timed), transfer_s);
  s.device_time_s = device_time;
  return s;
}

void FakeBackend::Hold(bool ignore_stop) {
  ignore_stop_ = ignore_stop;
  held_ = true;
}

void FakeBackend::Release() {
  held_ = false;
}

std::vector<probes::ProbeSpec> FakeBackend::Ran() const {
  std::lock_guard lock(mutex_);
  return ran_;
}

std::unique_ptr<core::BusyDetector> BusyOnly(int busy_device) {
  return core::MakeBusyDetector(
      std::make_unique<FakeGpuLoadReader>([busy_device](const probes::DeviceInfo& d) {
        return probes::GpuLoad{d.index == busy_device ? 95.0 : 0.0, 0};
      }),
      core::BusyThresholds{});
}

std::vector<std::string> FakeNotifier::Messages() const {
  std::lock_guard lock(mutex_);
  return messages_;
}

int FakeNotifier::Count(std::string_view message) const {
  std::lock_guard lock(mutex_);
  int n = 0;
  for (const auto& m : messages_) n += m == message ? 1 : 0;
  return n;
}

bool FakeNotifier::WaitFor(const std::function<bool(const std::vector<std::string>&)>& done,
                           std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return done(messages_); });
}

void FakeNotifier::Record(std::string message) {
  {
    std::lock_guard lock(mutex_);
    messages_.push_back(std::move(message));
  }
  changed_.notify_all();
}

void FakeSignals::Send(platform::Signal::Kind kind) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(kind);
  }
  sent_.notify_all();
}

platform::Signal FakeSignals::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!sent_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return {};
  const platform::Signal::Kind kind = queue_.front();
  queue_.pop_front();
  return {kind, kind == platform::Signal::Kind::kStop ? "SIGTERM (test)" : "SIGHUP (test)"};
}

TempDir::TempDir(const std::string& name) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / ("xferd-" + name + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

std::filesystem::path TempDir::Write(const std::string& file, const std::string& text) const {
  std::ofstream(path_ / file, std::ios::binary) << text;
  return path_ / file;
}

Flood::Flood(int threads, std::function<void(int, int)> attempt) : attempt_(std::move(attempt)) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this, t] {
      for (int n = 0; !stop_; ++n) attempt_(t, n);
    });
  }
}

void Flood::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

probes::ProbeSpec PinnedSpec(probes::Direction direction) {
  probes::ProbeSpec spec;
  spec.mode = probes::TransferMode::kPinned;
  spec.direction = direction;
  return spec;
}

probes::SimOptions SwitchedSimHost(int devices, int gpus_per_switch, int uplink_gen,
                                   int uplink_width) {
  probes::SimOptions o;
  o.time_scale = 0;
  o.devices = devices;
  o.gpus_per_switch = gpus_per_switch;
  o.uplink_gen = uplink_gen;
  o.uplink_width = uplink_width;
  return o;
}

struct LogCapture::State {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
};

LogCapture::LogCapture() : state_(std::make_unique<State>()) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(state_->out);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
}

LogCapture::~LogCapture() {
  spdlog::set_default_logger(state_->previous);
}

std::string LogCapture::Text() const {
  return state_->out.str();
}

int LogCapture::Count(const std::string& what) const {
  const std::string text = Text();
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace xferd::fakes
