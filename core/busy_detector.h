// Is a GPU busy with someone else's work? Probes must never steal bandwidth from inference,
// so a cycle skips a GPU whose utilisation or PCIe traffic is above the configured limits.
// The real detector reads NVML, loaded with dlopen at run time (no NVML header or library
// is needed to build, and a machine without the driver simply has no busy detection).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "xferd/probes/types.h"

namespace xferd::core {

struct BusyThresholds {
  double gpu_utilization_percent = 50;  // NVML utilization.gpu at or above this = busy
  double pcie_bytes_per_s = 2e9;        // NVML PCIe rx + tx at or above this = busy
};

struct BusyReading {
  bool busy = false;
  double gpu_utilization_percent = 0;
  double pcie_bytes_per_s = 0;
  std::string reason;  // when busy: "utilization 93% >= 50%"
};

// Judge a reading against the thresholds (fills busy and reason).
BusyReading Judge(double gpu_utilization_percent, double pcie_bytes_per_s,
                  const BusyThresholds& thresholds);

class BusyDetector {
 public:
  virtual ~BusyDetector() = default;
  // nullopt: this device cannot be read (probes go ahead).
  virtual std::optional<BusyReading> Check(const probes::DeviceInfo& device) = 0;
  // What the detector is, for the start-up log: "NVML 12.580.82" or why there is none.
  virtual std::string Describe() const = 0;
};

// NVML through dlopen(`library`). When the library or a symbol is missing, or nvmlInit
// fails, the detector reads nothing and Describe() says why.
std::unique_ptr<BusyDetector> MakeNvmlBusyDetector(const BusyThresholds& thresholds,
                                                   const std::string& library = "libnvidia-ml.so.1");

// The simulated devices' load (config [simulate]), judged like a real reading.
std::unique_ptr<BusyDetector> MakeSimBusyDetector(const BusyThresholds& thresholds,
                                                  double gpu_utilization_percent,
                                                  double pcie_bytes_per_s);

// Busy detection switched off in config.
std::unique_ptr<BusyDetector> MakeDisabledBusyDetector(std::string why);

}  // namespace xferd::core
