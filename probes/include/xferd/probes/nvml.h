// NVML, the NVIDIA driver's management library, as xferd calls it: the few calls its readers
// make (busy detection, the link-traffic windows around probes, the PCIe replay counter),
// behind an interface. The readers keep the arithmetic (counter deltas, windows, what a
// value that cannot be right means), so it is tested against a fake (tests/testing/fakes.h);
// the real library is loaded with dlopen at run time, so no NVML header or library is
// needed to build and a machine without the driver simply reads nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::probes {

// nvmlReturn_t: 0 is success; the others xferd tells apart by name.
using NvmlReturn = int;
inline constexpr NvmlReturn kNvmlSuccess = 0;
inline constexpr NvmlReturn kNvmlErrorInvalidArgument = 2;
inline constexpr NvmlReturn kNvmlErrorNotSupported = 3;  // "N/A" in nvidia-smi
inline constexpr NvmlReturn kNvmlErrorNotFound = 6;
inline constexpr NvmlReturn kNvmlErrorGpuIsLost = 15;
inline constexpr NvmlReturn kNvmlErrorUnknown = 999;

// An nvmlDevice_t; null = none.
using NvmlDevice = const void*;

// PCIe directions as NVML counts them on the GPU: rx = host to device, tx = device to host.
enum class PcieCounter { kRx, kTx };

// One PCIe byte counter as nvmlDeviceGetFieldValues returns it.
struct NvmlCounterValue {
  NvmlReturn status = kNvmlSuccess;  // the field's own return: kNvmlErrorNotSupported = N/A
  bool is_64_bit = false;            // value type unsigned or signed long long
  std::uint64_t value = 0;           // bytes since the driver started counting
  std::int64_t timestamp_us = 0;     // when the driver read it (CPU time, microseconds)
};

// One of the driver's GPU-utilization samples (nvmlDeviceGetSamples).
struct NvmlSample {
  std::uint64_t timestamp_us = 0;  // Unix time, microseconds
  double value = 0;                // percent
};

class NvmlApi {
 public:
  virtual ~NvmlApi() = default;

  // "" when NVML can be used; else why not ("libnvidia-ml.so.1 not loadable (...); is the
  // NVIDIA driver installed?", "nvmlInit failed: ..."): every call below then fails.
  virtual std::string Unavailable() const = 0;
  virtual std::string DriverVersion() const = 0;  // "580.82.07"; "" when unknown
  virtual std::string ErrorText(NvmlReturn rc) const = 0;

  virtual NvmlReturn DeviceByPciBusId(const std::string& bus_id, NvmlDevice* device) = 0;
  virtual NvmlReturn DeviceByUuid(const std::string& uuid, NvmlDevice* device) = 0;

  // nvmlDeviceGetUtilizationRates: percent of the last sample period a kernel ran.
  virtual NvmlReturn GpuUtilization(NvmlDevice device, unsigned* percent) = 0;
  // nvmlDeviceGetPcieThroughput: KiB/s over a ~20 ms sample the call itself takes.
  virtual NvmlReturn PcieThroughput(NvmlDevice device, PcieCounter counter,
                                    unsigned* kib_per_s) = 0;
  // nvmlDeviceGetFieldValues for the PCIe byte counters (NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
  // _TX_BYTES), both in one call. false from HasPcieByteCounters: the driver has no
  // nvmlDeviceGetFieldValues.
  virtual bool HasPcieByteCounters() const = 0;
  virtual NvmlReturn PcieByteCounters(NvmlDevice device, NvmlCounterValue* rx,
                                      NvmlCounterValue* tx) = 0;
  // nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES) taken after `since_us`; false from
  // HasUtilizationSamples: the driver has no nvmlDeviceGetSamples.
  virtual bool HasUtilizationSamples() const = 0;
  virtual NvmlReturn UtilizationSamples(NvmlDevice device, std::uint64_t since_us,
                                        std::vector<NvmlSample>* samples) = 0;
  // nvmlDeviceGetPcieReplayCounter: link-level retransmissions the GPU counted on its own
  // link since the driver loaded (32 bits).
  virtual NvmlReturn PcieReplayCounter(NvmlDevice device, unsigned* replays) = 0;
  // nvmlDeviceGetCurrPcieLinkGeneration and nvmlDeviceGetCurrPcieLinkWidth: the GPU's own
  // link as it runs now (the link watch reads them where sysfs cannot show the link).
  // nvmlDeviceGetMaxPcieLinkGeneration and nvmlDeviceGetMaxPcieLinkWidth: the most it can
  // train to in this system, the lower of the GPU's and its slot's maxima. Drivers without
  // them answer kNvmlErrorNotSupported.
  virtual NvmlReturn CurrentPcieLink(NvmlDevice device, unsigned* generation, unsigned* width) {
    (void)device, (void)generation, (void)width;
    return kNvmlErrorNotSupported;
  }
  virtual NvmlReturn MaxPcieLink(NvmlDevice device, unsigned* generation, unsigned* width) {
    (void)device, (void)generation, (void)width;
    return kNvmlErrorNotSupported;
  }
};

// NVML from `library` through dlopen; one instance per library for the whole process (the
// busy detector and the link-error reader share its nvmlInit), shut down when the last user
// lets go. Never null: an unusable NVML says why in Unavailable().
std::shared_ptr<NvmlApi> OpenNvml(const std::string& library = "libnvidia-ml.so.1");

// The device NVML knows as `device`: by its PCI bus id, else its UUID (CUDA and NVML number
// GPUs differently; the bus id or UUID names the same one).
NvmlReturn FindNvmlDevice(NvmlApi& nvml, const DeviceInfo& device, NvmlDevice* out);

}  // namespace xferd::probes
