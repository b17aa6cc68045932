// The GPU-load reader on NVML, loaded with dlopen at run time.
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stop_token>
#include <thread>

#include "probes/nvml/nvml_abi.h"
#include "xferd/probes/gpu_load.h"

namespace xferd::probes {
namespace {

// NVML's types beyond probes/nvml/nvml_abi.h, from the documented C API (nvml.h).
using namespace nvml;  // NOLINT(google-build-using-namespace): the ABI's names
struct NvmlUtilization {
  unsigned int gpu;     // percent of time a kernel ran over the last sample period
  unsigned int memory;  // percent of time device memory was read or written
};
// nvmlValue_t: the value of a field or a sample, its type given next to it.
union NvmlValue {
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  int si;
  unsigned short us;
};
// nvmlFieldValue_t.
struct NvmlFieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp_us;  // CPU time the value was read
  long long latency_us;
  int value_type;
  NvmlReturn nvml_return;
  NvmlValue value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");
// nvmlSample_t.
struct NvmlSample {
  unsigned long long timestamp_us;
  NvmlValue value;
};
static_assert(sizeof(NvmlSample) == 16, "nvmlSample_t is 16 bytes");

constexpr int kNvmlPcieUtilTxBytes = 0;          // NVML_PCIE_UTIL_TX_BYTES, KB/s
constexpr int kNvmlPcieUtilRxBytes = 1;          // NVML_PCIE_UTIL_RX_BYTES, KB/s
constexpr unsigned int kFieldPcieTxBytes = 197;  // NVML_FI_DEV_PCIE_COUNT_TX_BYTES
constexpr unsigned int kFieldPcieRxBytes = 198;  // NVML_FI_DEV_PCIE_COUNT_RX_BYTES
constexpr int kSamplesGpuUtilization = 1;        // NVML_GPU_UTILIZATION_SAMPLES
// nvmlValueType_t
constexpr int kValueDouble = 0, kValueUInt = 1, kValueULong = 2, kValueULongLong = 3,
              kValueSLongLong = 4, kValueSInt = 5, kValueUShort = 6;

// Each nvmlDeviceGetPcieThroughput call samples the link for about this long.
constexpr auto kThroughputWindow = std::chrono::milliseconds(20);
// The reading right after a probe: as long as one throughput sample, so both sources see
// the same span of what came after.
constexpr auto kAfterWindow = kThroughputWindow;

using ErrorStringFn = const char* (*)(NvmlReturn);
using HandleByUuidFn = NvmlReturn (*)(const char*, NvmlDevice*);
using UtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
using PcieThroughputFn = NvmlReturn (*)(NvmlDevice, int, unsigned int*);
using DriverVersionFn = NvmlReturn (*)(char*, unsigned int);
using FieldValuesFn = NvmlReturn (*)(NvmlDevice, int, NvmlFieldValue*);
using SamplesFn = NvmlReturn (*)(NvmlDevice, int, unsigned long long, int*, unsigned int*,
                                 NvmlSample*);

double ValueAsDouble(int type, const NvmlValue& v) {
  switch (type) {
    case kValueDouble: return v.d;
    case kValueUInt: return v.ui;
    case kValueULong: return static_cast<double>(v.ul);
    case kValueULongLong: return static_cast<double>(v.ull);
    case kValueSLongLong: return static_cast<double>(v.sll);
    case kValueSInt: return v.si;
    case kValueUShort: return v.us;
  }
  return 0;
}

std::chrono::microseconds UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now().time_since_epoch());
}

class NvmlGpuLoadReader final : public GpuLoadReader {
 public:
  explicit NvmlGpuLoadReader(const std::string& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* err = dlerror();
      describe_ = fmt::format("none: {} not loadable ({}); is the NVIDIA driver installed?",
                              library, err ? err : "unknown error");
      return;
    }
    init_ = Symbol<InitFn>("nvmlInit_v2");
    shutdown_ = Symbol<ShutdownFn>("nvmlShutdown");
    error_string_ = Symbol<ErrorStringFn>("nvmlErrorString");
    by_pci_ = Symbol<HandleByPciFn>("nvmlDeviceGetHandleByPciBusId_v2");
    by_uuid_ = Symbol<HandleByUuidFn>("nvmlDeviceGetHandleByUUID");
    utilization_ = Symbol<UtilizationFn>("nvmlDeviceGetUtilizationRates");
    pcie_ = Symbol<PcieThroughputFn>("nvmlDeviceGetPcieThroughput");
    // Optional: older drivers lack them, and the windows then use throughput samples.
    field_values_ = Symbol<FieldValuesFn>("nvmlDeviceGetFieldValues");
    samples_ = Symbol<SamplesFn>("nvmlDeviceGetSamples");
    auto* driver_version = Symbol<DriverVersionFn>("nvmlSystemGetDriverVersion");
    if (!init_ || !shutdown_ || !by_pci_ || !by_uuid_ || !utilization_ || !pcie_) {
      describe_ = fmt::format("none: {} lacks the functions xferd needs (an old driver?)", library);
      return;
    }
    const NvmlReturn rc = init_();
    if (rc != kNvmlSuccess) {
      describe_ = fmt::format("none: nvmlInit failed: {}", ErrorText(rc));
      return;
    }
    initialised_ = true;
    char version[96] = {};
    if (driver_version != nullptr && driver_version(version, sizeof version) == kNvmlSuccess) {
      describe_ = fmt::format("NVML (driver {})", version);
    } else {
      describe_ = "NVML";
    }
  }

  ~NvmlGpuLoadReader() override {
    for (auto& [uuid, window] : windows_) window.sampler = {};  // joined before NVML goes
    if (initialised_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  std::optional<GpuLoad> Read(const DeviceInfo& device) override {
    if (!initialised_) return std::nullopt;
    std::lock_guard lock(mutex_);
    NvmlDevice dev = Handle(device);
    if (dev == nullptr) return std::nullopt;
    NvmlUtilization util{};
    NvmlReturn rc = utilization_(dev, &util);
    if (rc != kNvmlSuccess) return Failed(device, "utilization", rc);
    // Each throughput query samples for ~20 ms: cheap next to a probe cycle.
    const auto pcie = Throughput(dev);
    if (!pcie) return Failed(device, "PCIe throughput", pcie.error);
    return GpuLoad{static_cast<double>(util.gpu), pcie.rx + pcie.tx};
  }

  std::string Describe() const override { return describe_; }

  void BeginWindow(const DeviceInfo& device) override {
    if (!initialised_) return;
    std::lock_guard lock(mutex_);
    Window& w = windows_[device.uuid];
    w = Window{};
    NvmlDevice dev = Handle(device);
    if (dev == nullptr) return;
    w.dev = dev;
    w.started = std::chrono::steady_clock::now();
    if (CountersSupported(device, dev)) {
      w.counters = ReadCounters(dev);
      if (w.counters) return;
    }
    // No counters: a thread samples throughput, one direction after the other, while the
    // probe runs; the window's bytes are the mean rates times its length.
    auto sums = w.sums;
    w.sampler = std::jthread([this, dev, sums](std::stop_token stop) {
      while (!stop.stop_requested()) {
        for (int counter : {kNvmlPcieUtilRxBytes, kNvmlPcieUtilTxBytes}) {
          unsigned int kb = 0;
          if (pcie_(dev, counter, &kb) != kNvmlSuccess) {
            sums->failed = true;
            return;
          }
          std::lock_guard sum_lock(sums->mutex);
          (counter == kNvmlPcieUtilRxBytes ? sums->rx : sums->tx) += kb * 1024.0;
          (counter == kNvmlPcieUtilRxBytes ? sums->rx_count : sums->tx_count) += 1;
        }
      }
    });
  }

  std::optional<LinkTraffic> EndWindow(const DeviceInfo& device) override {
    if (!initialised_) return std::nullopt;
    std::unique_lock lock(mutex_);
    auto it = windows_.find(device.uuid);
    if (it == windows_.end() || it->second.dev == nullptr) return std::nullopt;
    Window w = std::move(it->second);
    windows_.erase(it);
    lock.unlock();  // the readings below take tens of ms; Read() may run meanwhile
    const auto ended = std::chrono::steady_clock::now();
    const auto ended_unix = UnixMicros();
    LinkTraffic t;
    if (w.counters) {
      const auto end = ReadCounters(w.dev);
      if (!end) return Unreadable(device, "PCIe counters");
      t.source = "nvml counters";
      t.samples = 2;
      const double wall = std::chrono::duration<double>(ended - w.started).count();
      const double stamped = (end->timestamp_us - w.counters->timestamp_us) / 1e6;
      // The driver stamps each value; its span is the window when it looks sane.
      t.window_s = stamped > 0 && stamped < 2 * wall + 0.1 ? stamped : wall;
      t.rx_bytes = Delta(w.counters->rx, end->rx);
      t.tx_bytes = Delta(w.counters->tx, end->tx);
      std::this_thread::sleep_for(kAfterWindow);
      const auto after = ReadCounters(w.dev);
      if (!after) return Unreadable(device, "PCIe counters");
      const double after_stamped = (after->timestamp_us - end->timestamp_us) / 1e6;
      t.after_s =
          after_stamped > 0 ? after_stamped : std::chrono::duration<double>(kAfterWindow).count();
      t.after_rx_bytes = Delta(end->rx, after->rx);
      t.after_tx_bytes = Delta(end->tx, after->tx);
    } else {
      w.sampler.request_stop();
      w.sampler = {};  // joins: waits for the sample in flight (<= 20 ms)
      std::lock_guard sum_lock(w.sums->mutex);
      if (w.sums->failed) return Unreadable(device, "PCIe throughput");
      t.source = "nvml throughput";
      t.sampled_rates = true;
      t.window_s = std::chrono::duration<double>(ended - w.started).count();
      t.samples = w.sums->rx_count + w.sums->tx_count;
      // A probe shorter than one sample may end before either direction has one: the
      // reading right after stands in (as zero traffic would hide a contended window).
      const auto after = Throughput(w.dev);
      if (!after) return Unreadable(device, "PCIe throughput");
      const double rx_rate = w.sums->rx_count > 0 ? w.sums->rx / w.sums->rx_count : after.rx;
      const double tx_rate = w.sums->tx_count > 0 ? w.sums->tx / w.sums->tx_count : after.tx;
      t.rx_bytes = rx_rate * t.window_s;
      t.tx_bytes = tx_rate * t.window_s;
      t.after_s = std::chrono::duration<double>(kThroughputWindow).count();
      t.after_rx_bytes = after.rx * t.after_s;
      t.after_tx_bytes = after.tx * t.after_s;
    }
    t.after_utilization_percent = UtilizationSince(w.dev, ended_unix);
    return t;
  }

 private:
  struct Counters {
    unsigned long long rx = 0, tx = 0;  // 64-bit: differences are exact, wrap included
    long long timestamp_us = 0;
  };
  static double Delta(unsigned long long from, unsigned long long to) {
    return static_cast<double>(to - from);
  }
  struct Sums {
    std::mutex mutex;
    double rx = 0, tx = 0;
    int rx_count = 0, tx_count = 0;
    std::atomic<bool> failed{false};
  };
  struct Window {
    NvmlDevice dev = nullptr;
    std::chrono::steady_clock::time_point started;
    std::optional<Counters> counters;  // set when the window is read by counters
    std::shared_ptr<Sums> sums = std::make_shared<Sums>();
    std::jthread sampler;  // set when it is read by throughput samples
  };
  struct Rates {
    double rx = 0, tx = 0;  // bytes/s
    NvmlReturn error = kNvmlSuccess;
    explicit operator bool() const { return error == kNvmlSuccess; }
  };

  template <typename Fn>
  Fn Symbol(const char* name) {
    return reinterpret_cast<Fn>(dlsym(handle_, name));
  }

  std::string ErrorText(NvmlReturn rc) const {
    if (error_string_ != nullptr) {
      if (const char* s = error_string_(rc)) return s;
    }
    return fmt::format("NVML error {}", rc);
  }

  Rates Throughput(NvmlDevice dev) const {
    Rates r;
    unsigned int tx_kb = 0, rx_kb = 0;
    if ((r.error = pcie_(dev, kNvmlPcieUtilRxBytes, &rx_kb)) != kNvmlSuccess) return r;
    if ((r.error = pcie_(dev, kNvmlPcieUtilTxBytes, &tx_kb)) != kNvmlSuccess) return r;
    r.rx = rx_kb * 1024.0;
    r.tx = tx_kb * 1024.0;
    return r;
  }

  // Both PCIe byte counters in one call; nullopt when either is not readable.
  std::optional<Counters> ReadCounters(NvmlDevice dev) const {
    NvmlFieldValue values[2] = {};
    values[0].field_id = kFieldPcieRxBytes;
    values[1].field_id = kFieldPcieTxBytes;
    if (field_values_(dev, 2, values) != kNvmlSuccess) return std::nullopt;
    for (const NvmlFieldValue& v : values) {
      if (v.nvml_return != kNvmlSuccess) return std::nullopt;
    }
    return Counters{values[0].value.ull, values[1].value.ull, values[0].timestamp_us};
  }

  // Whether this GPU has 64-bit PCIe byte counters; asked once per device. A 32-bit
  // counter wraps within a probe at PCIe Gen5 rates, so it is not used.
  bool CountersSupported(const DeviceInfo& device, NvmlDevice dev) {
    auto [it, fresh] = counters_supported_.try_emplace(device.uuid, false);
    if (!fresh) return it->second;
    std::string why;
    if (field_values_ == nullptr) {
      why = "this driver has no nvmlDeviceGetFieldValues";
    } else {
      NvmlFieldValue values[2] = {};
      values[0].field_id = kFieldPcieRxBytes;
      values[1].field_id = kFieldPcieTxBytes;
      const NvmlReturn rc = field_values_(dev, 2, values);
      if (rc != kNvmlSuccess) {
        why = ErrorText(rc);
      } else if (values[0].nvml_return != kNvmlSuccess) {
        why = ErrorText(values[0].nvml_return);
      } else if (values[0].value_type != kValueULongLong &&
                 values[0].value_type != kValueSLongLong) {
        why = fmt::format("the counters are not 64-bit (value type {})", values[0].value_type);
      } else {
        it->second = true;
      }
    }
    if (!it->second) {
      spdlog::info(
          "contention: GPU {} has no usable PCIe byte counters in NVML ({}); each probe's "
          "window is read from PCIe throughput samples instead (said once)",
          device.index, why);
    }
    return it->second;
  }

  // Mean GPU utilization of the driver's samples taken after `since`; nullopt when there
  // is none yet (the driver samples every 1/6 s to 1 s) or the call is missing.
  std::optional<double> UtilizationSince(NvmlDevice dev, std::chrono::microseconds since) const {
    if (samples_ == nullptr) return std::nullopt;
    NvmlSample buffer[64] = {};
    unsigned int count = 64;
    int type = kValueUInt;
    if (samples_(dev, kSamplesGpuUtilization, static_cast<unsigned long long>(since.count()), &type,
                 &count, buffer) != kNvmlSuccess ||
        count == 0) {
      return std::nullopt;
    }
    double sum = 0;
    unsigned int used = 0;
    for (unsigned int i = 0; i < std::min(count, 64u); ++i) {
      if (buffer[i].timestamp_us <= static_cast<unsigned long long>(since.count())) continue;
      sum += ValueAsDouble(type, buffer[i].value);
      ++used;
    }
    if (used == 0) return std::nullopt;
    return sum / used;
  }

  NvmlDevice Handle(const DeviceInfo& device) {
    if (auto it = handles_.find(device.uuid); it != handles_.end()) return it->second;
    NvmlDevice dev = nullptr;
    // CUDA and NVML number GPUs differently; the bus id or UUID names the same one.
    NvmlReturn rc = 1;
    if (!device.pci_bus_id.empty()) rc = by_pci_(device.pci_bus_id.c_str(), &dev);
    if (rc != kNvmlSuccess && !device.uuid.empty()) rc = by_uuid_(device.uuid.c_str(), &dev);
    if (rc != kNvmlSuccess) {
      if (!unmatched_logged_[device.uuid]) {
        unmatched_logged_[device.uuid] = true;
        spdlog::warn(
            "NVML does not know GPU {} ({} {}): {}; probing it without a busy check or "
            "contention detection (xferd_gpu_load_readable{{gpu=\"{}\"}} 0)",
            device.index, device.pci_bus_id, device.uuid, ErrorText(rc), device.index);
      }
      dev = nullptr;
    }
    handles_[device.uuid] = dev;
    return dev;
  }

  std::optional<GpuLoad> Failed(const DeviceInfo& device, const char* what, NvmlReturn rc) {
    if (!unmatched_logged_[device.uuid + what]) {
      unmatched_logged_[device.uuid + what] = true;
      spdlog::warn(
          "busy detection: NVML cannot read {} of GPU {}: {}; probing it without "
          "that check",
          what, device.index, ErrorText(rc));
    }
    return std::nullopt;
  }

  std::optional<LinkTraffic> Unreadable(const DeviceInfo& device, const char* what) {
    std::lock_guard lock(mutex_);
    if (!unmatched_logged_[device.uuid + "window"]) {
      unmatched_logged_[device.uuid + "window"] = true;
      spdlog::warn(
          "contention: NVML cannot read the {} of GPU {} around a probe; its probes are "
          "judged without contention detection (xferd_gpu_load_readable{{gpu=\"{}\"}} 0; said "
          "once)",
          what, device.index, device.index);
    }
    return std::nullopt;
  }

  void* handle_ = nullptr;
  bool initialised_ = false;
  std::string describe_;
  InitFn init_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  ErrorStringFn error_string_ = nullptr;
  HandleByPciFn by_pci_ = nullptr;
  HandleByUuidFn by_uuid_ = nullptr;
  UtilizationFn utilization_ = nullptr;
  PcieThroughputFn pcie_ = nullptr;
  FieldValuesFn field_values_ = nullptr;
  SamplesFn samples_ = nullptr;
  std::mutex mutex_;  // guards the maps below
  std::map<std::string, NvmlDevice> handles_;
  std::map<std::string, bool> unmatched_logged_;
  std::map<std::string, bool> counters_supported_;
  std::map<std::string, Window> windows_;  // by UUID: the window open on each device
};

}  // namespace

std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(const std::string& library) {
  return std::make_unique<NvmlGpuLoadReader>(library);
}

}  // namespace xferd::probes
