#include "core/busy_detector.h"

#include <fmt/format.h>

namespace xferd::core {
namespace {

class JudgingBusyDetector final : public BusyDetector {
 public:
  JudgingBusyDetector(std::unique_ptr<probes::GpuLoadReader> reader,
                      const BusyThresholds& thresholds)
      : reader_(std::move(reader)), thresholds_(thresholds) {}
  std::optional<BusyReading> Check(const probes::DeviceInfo& device) override {
    const auto load = reader_->Read(device);
    if (!load) return std::nullopt;
    return Judge(load->utilization_percent, load->pcie_bytes_per_s, thresholds_);
  }
  std::string Describe() const override { return reader_->Describe(); }

 private:
  std::unique_ptr<probes::GpuLoadReader> reader_;
  BusyThresholds thresholds_;
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
                                               const BusyThresholds& thresholds) {
  return std::make_unique<JudgingBusyDetector>(std::move(reader), thresholds);
}

std::unique_ptr<BusyDetector> MakeDisabledBusyDetector(std::string why) {
  return std::make_unique<DisabledBusyDetector>(std::move(why));
}

}  // namespace xferd::core
