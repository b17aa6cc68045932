// The GPU-load reader on NVML (probes/include/xferd/probes/nvml.h): the busy reading, and the
// arithmetic of the link-traffic windows around each probe. A window says what the link
// carried, or that it cannot be read; it never reads as an idle link because a counter did
// not move (a stale or stuck counter, a window too short for the driver to refresh it).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>

#include "xferd/probes/gpu_load.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {
namespace {

// Each nvmlDeviceGetPcieThroughput call samples the link for about this long.
constexpr auto kThroughputWindow = std::chrono::milliseconds(20);
// The reading right after a probe: as long as one throughput sample, so both sources see
// the same span of what came after.
constexpr auto kAfterWindow = kThroughputWindow;
// No host link carries this much per direction (NVLink-C2C: 450 GB/s): a counter delta
// that says more was reset or garbled, not counted.
constexpr double kMaxPlausibleBytesPerSecond = 1e12;

std::chrono::microseconds UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now().time_since_epoch());
}

class NvmlGpuLoadReader final : public GpuLoadReader {
 public:
  explicit NvmlGpuLoadReader(std::shared_ptr<NvmlApi> nvml) : nvml_(std::move(nvml)) {
    const std::string why = nvml_->Unavailable();
    available_ = why.empty();
    if (!available_) {
      describe_ = "none: " + why;
    } else if (const std::string version = nvml_->DriverVersion(); !version.empty()) {
      describe_ = fmt::format("NVML (driver {})", version);
    } else {
      describe_ = "NVML";
    }
  }

  ~NvmlGpuLoadReader() override {
    for (auto& [uuid, window] : windows_) window.sampler = {};  // joined before NVML goes
  }

  std::optional<GpuLoad> Read(const DeviceInfo& device) override {
    if (!available_) return std::nullopt;
    std::lock_guard lock(mutex_);
    const NvmlDevice dev = Handle(device);
    if (dev == nullptr) return std::nullopt;
    unsigned util = 0;
    if (const NvmlReturn rc = nvml_->GpuUtilization(dev, &util); rc != kNvmlSuccess) {
      // A MIG-enabled GPU has no utilization (N/A in nvidia-smi): its PCIe throughput, which
      // counts every instance's traffic, is what busy is judged by there.
      if (!(rc == kNvmlErrorNotSupported && device.mig.Enabled())) {
        return Failed(device, "utilization", rc);
      }
      util = 0;
    }
    // Each throughput query samples for ~20 ms: cheap next to a probe cycle.
    const auto pcie = Throughput(dev);
    if (!pcie) return Failed(device, "PCIe throughput", pcie.error);
    return GpuLoad{static_cast<double>(util), pcie.rx + pcie.tx};
  }

  std::string Describe() const override { return describe_; }

  void BeginWindow(const DeviceInfo& device) override {
    if (!available_) return;
    std::lock_guard lock(mutex_);
    Window& w = windows_[device.uuid];
    w = Window{};
    const NvmlDevice dev = Handle(device);
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
    w.sampler = std::jthread([nvml = nvml_, dev, sums](std::stop_token stop) {
      while (!stop.stop_requested()) {
        for (PcieCounter counter : {PcieCounter::kRx, PcieCounter::kTx}) {
          unsigned kib = 0;
          if (nvml->PcieThroughput(dev, counter, &kib) != kNvmlSuccess) {
            sums->failed = true;
            return;
          }
          std::lock_guard sum_lock(sums->mutex);
          (counter == PcieCounter::kRx ? sums->rx : sums->tx) += kib * 1024.0;
          (counter == PcieCounter::kRx ? sums->rx_count : sums->tx_count) += 1;
        }
      }
    });
  }

  std::optional<LinkTraffic> EndWindow(const DeviceInfo& device) override {
    if (!available_) return std::nullopt;
    std::unique_lock lock(mutex_);
    auto it = windows_.find(device.uuid);
    if (it == windows_.end() || it->second.dev == nullptr) return std::nullopt;
    Window w = std::move(it->second);
    windows_.erase(it);
    lock.unlock();  // the readings below take tens of ms; Read() may run meanwhile
    const auto ended = std::chrono::steady_clock::now();
    const auto ended_unix = UnixMicros();
    const double wall = std::chrono::duration<double>(ended - w.started).count();
    std::optional<LinkTraffic> t =
        w.counters ? CountedWindow(device, w, wall) : SampledWindow(device, w, wall);
    if (t) t->after_utilization_percent = UtilizationSince(w.dev, ended_unix);
    return t;
  }

 private:
  struct Counters {
    std::uint64_t rx = 0, tx = 0;  // 64-bit: differences are exact, wrap included
    std::int64_t timestamp_us = 0;
  };
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

  // A window read by the byte counters: the deltas over the span the driver stamped, and
  // over a short span right after it.
  std::optional<LinkTraffic> CountedWindow(const DeviceInfo& device, const Window& w, double wall) {
    const auto end = ReadCounters(w.dev);
    if (!end) return Unreadable(device, "the PCIe byte counters", "NVML could not read them");
    const double stamped = (end->timestamp_us - w.counters->timestamp_us) / 1e6;
    if (stamped <= 0) {
      // The driver handed out the values it had before the probe: nothing was counted.
      return Unreadable(device, "the PCIe byte counters",
                        "the window was too short for the driver to refresh them",
                        spdlog::level::debug);
    }
    LinkTraffic t;
    t.source = "nvml counters";
    t.samples = 2;
    // The driver stamps each value; its span is the window when it looks sane.
    t.window_s = stamped < 2 * wall + 0.1 ? stamped : wall;
    t.rx_bytes = Delta(w.counters->rx, end->rx);
    t.tx_bytes = Delta(w.counters->tx, end->tx);
    if (const char* odd = Implausible(t.rx_bytes, t.tx_bytes, t.window_s)) {
      return Unreadable(device, "the PCIe byte counters", odd);
    }
    if (t.rx_bytes == 0 && t.tx_bytes == 0) {
      // A probe moved data through this link in the window: counters that did not move
      // are stuck (dcgm-exporter users see them at 0 on some GPUs), not an idle link.
      return Unreadable(device, "the PCIe byte counters",
                        "they did not move while xferd's own probe moved data through the link");
    }
    std::this_thread::sleep_for(kAfterWindow);
    const auto after = ReadCounters(w.dev);
    if (!after) return Unreadable(device, "the PCIe byte counters", "NVML could not read them");
    const double after_stamped = (after->timestamp_us - end->timestamp_us) / 1e6;
    const double after_rx = Delta(end->rx, after->rx), after_tx = Delta(end->tx, after->tx);
    // A reading right after that the driver did not refresh says nothing: it is left out
    // (after_s 0), not taken as quiet.
    if (after_stamped > 0 && !Implausible(after_rx, after_tx, after_stamped)) {
      t.after_s = after_stamped;
      t.after_rx_bytes = after_rx;
      t.after_tx_bytes = after_tx;
    }
    return t;
  }

  // A window read by throughput samples taken while the probe ran.
  std::optional<LinkTraffic> SampledWindow(const DeviceInfo& device, Window& w, double wall) {
    w.sampler.request_stop();
    w.sampler = {};  // joins: waits for the sample in flight (<= 20 ms)
    std::lock_guard sum_lock(w.sums->mutex);
    if (w.sums->failed) {
      return Unreadable(device, "the PCIe throughput", "NVML could not sample it");
    }
    LinkTraffic t;
    t.source = "nvml throughput";
    t.sampled_rates = true;
    t.window_s = wall;
    t.samples = w.sums->rx_count + w.sums->tx_count;
    // A probe shorter than one sample may end before either direction has one: the
    // reading right after stands in (as zero traffic would hide a contended window).
    const auto after = Throughput(w.dev);
    if (!after) return Unreadable(device, "the PCIe throughput", "NVML could not sample it");
    const double rx_rate = w.sums->rx_count > 0 ? w.sums->rx / w.sums->rx_count : after.rx;
    const double tx_rate = w.sums->tx_count > 0 ? w.sums->tx / w.sums->tx_count : after.tx;
    if (rx_rate == 0 && tx_rate == 0 && after.rx == 0 && after.tx == 0) {
      // Not one sample saw the probe's own bytes: the samples missed it or are stuck.
      return Unreadable(device, "the PCIe throughput",
                        "it read 0 in both directions while xferd's own probe moved data "
                        "through the link",
                        t.samples > 0 ? spdlog::level::warn : spdlog::level::debug);
    }
    t.rx_bytes = rx_rate * t.window_s;
    t.tx_bytes = tx_rate * t.window_s;
    t.after_s = std::chrono::duration<double>(kThroughputWindow).count();
    t.after_rx_bytes = after.rx * t.after_s;
    t.after_tx_bytes = after.tx * t.after_s;
    return t;
  }

  static double Delta(std::uint64_t from, std::uint64_t to) {
    return static_cast<double>(to - from);  // modulo 2^64: a wrap between them is exact
  }

  // Why deltas over `seconds` cannot be counts of real traffic; nullptr when they can.
  static const char* Implausible(double rx, double tx, double seconds) {
    if (!(seconds > 0)) return "the driver's timestamps did not advance";
    if (rx / seconds > kMaxPlausibleBytesPerSecond || tx / seconds > kMaxPlausibleBytesPerSecond) {
      return "they jumped by more than any link carries (reset by the driver?)";
    }
    return nullptr;
  }

  Rates Throughput(NvmlDevice dev) const {
    Rates r;
    unsigned tx_kib = 0, rx_kib = 0;
    if ((r.error = nvml_->PcieThroughput(dev, PcieCounter::kRx, &rx_kib)) != kNvmlSuccess) return r;
    if ((r.error = nvml_->PcieThroughput(dev, PcieCounter::kTx, &tx_kib)) != kNvmlSuccess) return r;
    r.rx = rx_kib * 1024.0;
    r.tx = tx_kib * 1024.0;
    return r;
  }

  // Both PCIe byte counters in one call; nullopt when either is not readable (N/A).
  std::optional<Counters> ReadCounters(NvmlDevice dev) const {
    NvmlCounterValue rx, tx;
    if (nvml_->PcieByteCounters(dev, &rx, &tx) != kNvmlSuccess) return std::nullopt;
    if (rx.status != kNvmlSuccess || tx.status != kNvmlSuccess || !rx.is_64_bit || !tx.is_64_bit) {
      return std::nullopt;
    }
    return Counters{rx.value, tx.value, rx.timestamp_us};
  }

  // Whether this GPU has 64-bit PCIe byte counters; asked once per device. A 32-bit
  // counter wraps within a probe at PCIe Gen5 rates, so it is not used.
  bool CountersSupported(const DeviceInfo& device, NvmlDevice dev) {
    auto [it, fresh] = counters_supported_.try_emplace(device.uuid, false);
    if (!fresh) return it->second;
    std::string why;
    NvmlCounterValue rx, tx;
    if (!nvml_->HasPcieByteCounters()) {
      why = "this driver has no nvmlDeviceGetFieldValues";
    } else if (const NvmlReturn rc = nvml_->PcieByteCounters(dev, &rx, &tx); rc != kNvmlSuccess) {
      why = nvml_->ErrorText(rc);
    } else if (rx.status != kNvmlSuccess || tx.status != kNvmlSuccess) {
      why = nvml_->ErrorText(rx.status != kNvmlSuccess ? rx.status : tx.status);
    } else if (!rx.is_64_bit || !tx.is_64_bit) {
      why = "the counters are not 64-bit";
    } else {
      it->second = true;
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
    if (!nvml_->HasUtilizationSamples()) return std::nullopt;
    std::vector<NvmlSample> samples;
    const auto since_us = static_cast<std::uint64_t>(since.count());
    if (nvml_->UtilizationSamples(dev, since_us, &samples) != kNvmlSuccess) return std::nullopt;
    double sum = 0;
    int used = 0;
    for (const NvmlSample& s : samples) {
      if (s.timestamp_us <= since_us) continue;
      sum += s.value;
      ++used;
    }
    if (used == 0) return std::nullopt;
    return sum / used;
  }

  NvmlDevice Handle(const DeviceInfo& device) {
    if (auto it = handles_.find(device.uuid); it != handles_.end()) return it->second;
    NvmlDevice dev = nullptr;
    const NvmlReturn rc = FindNvmlDevice(*nvml_, device, &dev);
    if (rc != kNvmlSuccess) {
      spdlog::warn(
          "NVML does not know GPU {} ({} {}): {}; probing it without a busy check or "
          "contention detection (xferd_gpu_load_readable{{gpu=\"{}\"}} 0)",
          device.index, device.pci_bus_id, device.uuid, nvml_->ErrorText(rc), device.index);
    }
    handles_[device.uuid] = dev;
    return dev;
  }

  std::optional<GpuLoad> Failed(const DeviceInfo& device, const char* what, NvmlReturn rc) {
    if (said_.insert(device.uuid + what).second) {
      spdlog::warn(
          "busy detection: NVML cannot read {} of GPU {}: {}; probing it without "
          "that check",
          what, device.index, nvml_->ErrorText(rc));
    }
    return std::nullopt;
  }

  // A window that is no reading: said once per GPU and cause at `level`; the probe is then
  // judged as one whose link cannot be read (contention unknown), never as an idle link.
  std::optional<LinkTraffic> Unreadable(const DeviceInfo& device, const char* what,
                                        const std::string& why,
                                        spdlog::level::level_enum level = spdlog::level::warn) {
    std::lock_guard lock(mutex_);
    if (said_.insert(device.uuid + "window: " + why).second) {
      spdlog::log(level,
                  "contention: {} of GPU {} cannot be read around a probe: {}; such probes are "
                  "judged without contention detection (xferd_gpu_load_readable{{gpu=\"{}\"}} 0; "
                  "said once)",
                  what, device.index, why, device.index);
    }
    return std::nullopt;
  }

  std::shared_ptr<NvmlApi> nvml_;
  bool available_ = false;
  std::string describe_;
  std::mutex mutex_;  // guards the maps below
  std::map<std::string, NvmlDevice> handles_;
  std::set<std::string> said_;  // what was logged once, by GPU and cause
  std::map<std::string, bool> counters_supported_;
  std::map<std::string, Window> windows_;  // by UUID: the window open on each device
};

}  // namespace

std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(std::shared_ptr<NvmlApi> nvml) {
  return std::make_unique<NvmlGpuLoadReader>(std::move(nvml));
}

std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(const std::string& library) {
  return MakeNvmlGpuLoadReader(OpenNvml(library));
}

}  // namespace xferd::probes
