// The simulated devices' load, in place of NVML.
#include <fmt/format.h>

#include "xferd/probes/gpu_load.h"

namespace xferd::probes {
namespace {

class SimGpuLoadReader final : public GpuLoadReader {
 public:
  SimGpuLoadReader(double utilization_percent, double pcie_bytes_per_s)
      : load_{utilization_percent, pcie_bytes_per_s} {}
  std::optional<GpuLoad> Read(const DeviceInfo& device) override {
    if (!device.simulated) return std::nullopt;
    return load_;
  }
  std::string Describe() const override {
    return fmt::format("simulated (utilization {}%, PCIe {:.1f} GB/s)", load_.utilization_percent,
                       load_.pcie_bytes_per_s / 1e9);
  }

 private:
  GpuLoad load_;
};

}  // namespace

std::unique_ptr<GpuLoadReader> MakeSimGpuLoadReader(double utilization_percent,
                                                    double pcie_bytes_per_s) {
  return std::make_unique<SimGpuLoadReader>(utilization_percent, pcie_bytes_per_s);
}

}  // namespace xferd::probes
