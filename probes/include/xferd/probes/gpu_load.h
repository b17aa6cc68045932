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

  // A window around one probe of `device`: BeginWindow right before it, EndWindow right
  // after, on the same thread; EndWindow returns what the link carried in between and in a
  // short reading right after it, or nullopt when the link cannot be read on this device
  // (no NVML, no support on this GPU, a vGPU). A reader that cannot read links at all
  // leaves both as they are here.
  virtual void BeginWindow(const DeviceInfo& device) { (void)device; }
  virtual std::optional<LinkTraffic> EndWindow(const DeviceInfo& device) {
    (void)device;
    return std::nullopt;
  }
};

class NvmlApi;

// NVML (xferd/probes/nvml.h): a machine without the driver simply reads nothing, and
// Describe() says why. Its windows use the PCIe byte counters (nvmlDeviceGetFieldValues)
// where the GPU has them, else PCIe throughput samples taken by a thread while the probe
// runs. A window the driver did not refresh, whose counters did not move while the probe
// moved data, or that jumped by more than a link carries is not readable (nullopt): never
// an idle link.
std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(std::shared_ptr<NvmlApi> nvml);
// The same on OpenNvml(`library`), loaded with dlopen.
std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(
    const std::string& library = "libnvidia-ml.so.1");

class SimBackend;

// The simulated devices' load (config [simulate]): a fixed reading for simulated devices,
// nothing for others; with `sim`, also the foreign traffic its link model carries, in the
// busy reading and in the windows around each probe (the simulated link counters).
std::unique_ptr<GpuLoadReader> MakeSimGpuLoadReader(double utilization_percent,
                                                    double pcie_bytes_per_s,
                                                    SimBackend* sim = nullptr);

}  // namespace xferd::probes
