// Is a GPU busy with someone else's work? Probes must never steal bandwidth from inference,
// so a cycle skips a GPU whose utilisation or PCIe traffic is at or above the configured
// limits. The load is read by probes (NVML, or the simulated load); judging it is here.
// The same reader also watches the link around each probe (BeginProbe/EndProbe), for the
// contention judgement (core/contention.h), whether or not the pre-cycle check is on.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "xferd/probes/gpu_load.h"
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
  // The pre-cycle check. nullopt: this device cannot be read, or the check is off (probes
  // go ahead).
  virtual std::optional<BusyReading> Check(const probes::DeviceInfo& device) = 0;
  // What the detector is, for the start-up log: "NVML (driver 580.82)" or why there is none.
  virtual std::string Describe() const = 0;

  // The link-traffic window around one probe (probes::GpuLoadReader::BeginWindow and
  // EndWindow); nullopt: the link cannot be read on this device.
  virtual void BeginProbe(const probes::DeviceInfo& device) { (void)device; }
  virtual std::optional<probes::LinkTraffic> EndProbe(const probes::DeviceInfo& device) {
    (void)device;
    return std::nullopt;
  }
};

// Readings of `reader` judged against `thresholds`; with `check` false the pre-cycle check
// is off ([busy] enabled = false) while the windows around each probe are still read.
std::unique_ptr<BusyDetector> MakeBusyDetector(std::unique_ptr<probes::GpuLoadReader> reader,
                                               const BusyThresholds& thresholds, bool check = true);

// Nothing read at all: no pre-cycle check, no windows (tests; a reader that cannot exist).
std::unique_ptr<BusyDetector> MakeDisabledBusyDetector(std::string why);

}  // namespace xferd::core
