// How busy a GPU is with someone else's work, as the driver reports it. Reading only:
// what counts as busy is decided by core (core/busy_detector.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "xferd/probes/types.h"

namespace xferd::probes {

struct GpuLoad {
  double utilization_percent = 0;  // NVML utilization.gpu: time a kernel ran, last period
  double pcie_bytes_per_s = 0;     // NVML PCIe rx + tx
};

class GpuLoadReader {
 public:
  virtual ~GpuLoadReader() = default;
  // nullopt: this device's load cannot be read (probes go ahead without a busy check).
  virtual std::optional<GpuLoad> Read(const DeviceInfo& device) = 0;
  // What the reader is, for the start-up log: "NVML (driver 580.82)" or why there is none.
  virtual std::string Describe() const = 0;
};

// NVML through dlopen(`library`), so no NVML header or library is needed to build and a
// machine without the driver simply reads nothing: Describe() then says why.
std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(
    const std::string& library = "libnvidia-ml.so.1");

// The simulated devices' load (config [simulate]): a fixed reading for simulated devices,
// nothing for others.
std::unique_ptr<GpuLoadReader> MakeSimGpuLoadReader(double utilization_percent,
                                                    double pcie_bytes_per_s);

}  // namespace xferd::probes
