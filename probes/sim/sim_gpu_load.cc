// The simulated devices' load, in place of NVML: a configured fixed reading plus, with the
// backend's link model, the foreign traffic it carries and its link counters.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "xferd/probes/gpu_load.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

// The reading right after a probe, as NVML's (a 20 ms throughput sample).
constexpr double kAfterS = 0.020;

class SimGpuLoadReader final : public GpuLoadReader {
 public:
  SimGpuLoadReader(double utilization_percent, double pcie_bytes_per_s, SimBackend* sim)
      : load_{utilization_percent, pcie_bytes_per_s}, sim_(sim) {}

  std::optional<GpuLoad> Read(const DeviceInfo& device) override {
    if (!device.simulated) return std::nullopt;
    GpuLoad load = load_;
    if (sim_ != nullptr) load.pcie_bytes_per_s += sim_->ForeignBytesPerSecond(device.index);
    return load;
  }

  std::string Describe() const override {
    return fmt::format("simulated (utilization {}%, PCIe {:.1f} GB/s{})", load_.utilization_percent,
                       load_.pcie_bytes_per_s / 1e9,
                       sim_ != nullptr ? " plus the simulated foreign traffic" : "");
  }

  void BeginWindow(const DeviceInfo& device) override {
    if (sim_ == nullptr || !device.simulated) return;
    std::lock_guard lock(mutex_);
    if (auto c = sim_->ReadLinkCounters(device.index)) {
      open_[device.index] = *c;
    } else {
      open_.erase(device.index);
    }
  }

  std::optional<LinkTraffic> EndWindow(const DeviceInfo& device) override {
    if (sim_ == nullptr || !device.simulated) return std::nullopt;
    std::lock_guard lock(mutex_);
    auto it = open_.find(device.index);
    if (it == open_.end()) return std::nullopt;
    const SimLinkCounters begin = it->second;
    open_.erase(it);
    const auto end = sim_->ReadLinkCounters(device.index);
    const auto after = sim_->ReadLinkCounters(device.index, kAfterS);
    if (!end || !after) return std::nullopt;
    LinkTraffic t;
    t.source = "simulated";
    t.samples = 2;
    t.window_s = end->at_s - begin.at_s;
    t.rx_bytes = end->rx_bytes - begin.rx_bytes;
    t.tx_bytes = end->tx_bytes - begin.tx_bytes;
    t.after_s = after->at_s - end->at_s;
    t.after_rx_bytes = after->rx_bytes - end->rx_bytes;
    t.after_tx_bytes = after->tx_bytes - end->tx_bytes;
    t.after_utilization_percent = load_.utilization_percent;
    return t;
  }

 private:
  GpuLoad load_;
  SimBackend* sim_;
  std::mutex mutex_;
  std::map<int, SimLinkCounters> open_;  // per device: the counters at BeginWindow
};

}  // namespace

std::unique_ptr<GpuLoadReader> MakeSimGpuLoadReader(double utilization_percent,
                                                    double pcie_bytes_per_s, SimBackend* sim) {
  return std::make_unique<SimGpuLoadReader>(utilization_percent, pcie_bytes_per_s, sim);
}

}  // namespace xferd::probes
