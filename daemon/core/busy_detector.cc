#include "core/busy_detector.h"

#include <fmt/format.h>

namespace xferd::core {
namespace {

class JudgingBusyDetector final : public BusyDetector {
 public:
  JudgingBusyDetector(std::unique_ptr<probes::GpuLoadReader> reader,
                      const BusyThresholds& thresholds, bool check)
      : reader_(std::move(reader)), thresholds_(thresholds), check_(check) {}
  std::optional<BusyReading> Check(const probes::DeviceInfo& device) override {
    if (!check_) return std::nullopt;
    const auto load = reader_->Read(device);
    if (!load) return std::nullopt;
    return Judge(load->utilization_percent, load->pcie_bytes_per_s, thresholds_);
  }
  std::string Describe() const override {
    return check_ ? reader_->Describe()
                  : "off (busy.enabled = false); link traffic around each probe: " +
                        reader_->Describe();
  }
  void BeginProbe(const probes::DeviceInfo& device) override { reader_->BeginWindow(device); }
  std::optional<probes::LinkTraffic> EndProbe(const probes::DeviceInfo& device) override {
    return reader_->EndWindow(device);
  }

 private:
  std::unique_ptr<probes::GpuLoadReader> reader_;
  BusyThresholds thresholds_;
  bool check_;
};

class DisabledBusyDetector final : public BusyDetector {
 public:
  explicit DisabledBusyDetector(std::string why) : why_(std::move(why)) {}
  std::optional<BusyReading> Check(const probes::DeviceInfo&) override { return std::nullopt; }
  std::string Describe() const override { return why_; }

 private:
  std::string why_;
};

}  // namespace

BusyReading Judge(double gpu_utilization_percent, double pcie_bytes_per_s,
                  const BusyThresholds& thresholds) {
  BusyReading r;
  r.gpu_utilization_percent = gpu_utilization_percent;
  r.pcie_bytes_per_s = pcie_bytes_per_s;
  if (gpu_utilization_percent >= thresholds.gpu_utilization_percent) {
    r.busy = true;
    r.reason = fmt::format("utilization {:.0f}% >= {:.0f}%", gpu_utilization_percent,
                           thresholds.gpu_utilization_percent);
  } else if (pcie_bytes_per_s >= thresholds.pcie_bytes_per_s) {
    r.busy = true;
    r.reason = fmt::format("PCIe traffic {:.2f} GB/s >= {:.2f} GB/s", pcie_bytes_per_s / 1e9,
                           thresholds.pcie_bytes_per_s / 1e9);
  }
  return r;
}

std::unique_ptr<BusyDetector> MakeBusyDetector(std::unique_ptr<probes::GpuLoadReader> reader,
                                               const BusyThresholds& thresholds, bool check) {
  return std::make_unique<JudgingBusyDetector>(std::move(reader), thresholds, check);
}

std::unique_ptr<BusyDetector> MakeDisabledBusyDetector(std::string why) {
  return std::make_unique<DisabledBusyDetector>(std::move(why));
}

}  // namespace xferd::core
