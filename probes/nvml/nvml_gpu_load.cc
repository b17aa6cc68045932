// The GPU-load reader on NVML, loaded with dlopen at run time.
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <mutex>

#include "xferd/probes/gpu_load.h"

namespace xferd::probes {
namespace {

// The few NVML declarations needed, from the documented C API (nvml.h), so no header is
// needed at build time. nvmlReturn_t is an enum; 0 is NVML_SUCCESS.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;     // percent of time a kernel ran over the last sample period
  unsigned int memory;  // percent of time device memory was read or written
};
constexpr int kNvmlPcieUtilTxBytes = 0;  // NVML_PCIE_UTIL_TX_BYTES, KB/s
constexpr int kNvmlPcieUtilRxBytes = 1;  // NVML_PCIE_UTIL_RX_BYTES, KB/s
constexpr NvmlReturn kNvmlSuccess = 0;

using InitFn = NvmlReturn (*)();
using ShutdownFn = NvmlReturn (*)();
using ErrorStringFn = const char* (*)(NvmlReturn);
using HandleByPciFn = NvmlReturn (*)(const char*, NvmlDevice*);
using HandleByUuidFn = NvmlReturn (*)(const char*, NvmlDevice*);
using UtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
using PcieThroughputFn = NvmlReturn (*)(NvmlDevice, int, unsigned int*);
using DriverVersionFn = NvmlReturn (*)(char*, unsigned int);

class NvmlGpuLoadReader final : public GpuLoadReader {
 public:
  explicit NvmlGpuLoadReader(const std::string& library) {
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* err = dlerror();
      describe_ = fmt::format("none: {} not loadable ({}); is the NVIDIA driver installed?",
                              library, err ? err : "unknown error");
      return;
    }
    init_ = Symbol<InitFn>("nvmlInit_v2");
    shutdown_ = Symbol<ShutdownFn>("nvmlShutdown");
    error_string_ = Symbol<ErrorStringFn>("nvmlErrorString");
    by_pci_ = Symbol<HandleByPciFn>("nvmlDeviceGetHandleByPciBusId_v2");
    by_uuid_ = Symbol<HandleByUuidFn>("nvmlDeviceGetHandleByUUID");
    utilization_ = Symbol<UtilizationFn>("nvmlDeviceGetUtilizationRates");
    pcie_ = Symbol<PcieThroughputFn>("nvmlDeviceGetPcieThroughput");
    auto* driver_version = Symbol<DriverVersionFn>("nvmlSystemGetDriverVersion");
    if (!init_ || !shutdown_ || !by_pci_ || !by_uuid_ || !utilization_ || !pcie_) {
      describe_ = fmt::format("none: {} lacks the functions xferd needs (an old driver?)", library);
      return;
    }
    const NvmlReturn rc = init_();
    if (rc != kNvmlSuccess) {
      describe_ = fmt::format("none: nvmlInit failed: {}", ErrorText(rc));
      return;
    }
    initialised_ = true;
    char version[96] = {};
    if (driver_version != nullptr && driver_version(version, sizeof version) == kNvmlSuccess) {
      describe_ = fmt::format("NVML (driver {})", version);
    } else {
      describe_ = "NVML";
    }
  }

  ~NvmlGpuLoadReader() override {
    if (initialised_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  std::optional<GpuLoad> Read(const DeviceInfo& device) override {
    if (!initialised_) return std::nullopt;
    std::lock_guard lock(mutex_);
    NvmlDevice dev = Handle(device);
    if (dev == nullptr) return std::nullopt;
    NvmlUtilization util{};
    unsigned int tx_kb = 0, rx_kb = 0;
    NvmlReturn rc = utilization_(dev, &util);
    if (rc != kNvmlSuccess) return Failed(device, "utilization", rc);
    // Each throughput query samples for ~20 ms: cheap next to a probe cycle.
    rc = pcie_(dev, kNvmlPcieUtilTxBytes, &tx_kb);
    if (rc != kNvmlSuccess) return Failed(device, "PCIe throughput", rc);
    rc = pcie_(dev, kNvmlPcieUtilRxBytes, &rx_kb);
    if (rc != kNvmlSuccess) return Failed(device, "PCIe throughput", rc);
    const double pcie = (static_cast<double>(tx_kb) + static_cast<double>(rx_kb)) * 1024.0;
    return GpuLoad{static_cast<double>(util.gpu), pcie};
  }

  std::string Describe() const override { return describe_; }

 private:
  template <typename Fn>
  Fn Symbol(const char* name) {
    return reinterpret_cast<Fn>(dlsym(handle_, name));
  }

  std::string ErrorText(NvmlReturn rc) const {
    if (error_string_ != nullptr) {
      if (const char* s = error_string_(rc)) return s;
    }
    return fmt::format("NVML error {}", rc);
  }

  NvmlDevice Handle(const DeviceInfo& device) {
    if (auto it = handles_.find(device.uuid); it != handles_.end()) return it->second;
    NvmlDevice dev = nullptr;
    // CUDA and NVML number GPUs differently; the bus id or UUID names the same one.
    NvmlReturn rc = 1;
    if (!device.pci_bus_id.empty()) rc = by_pci_(device.pci_bus_id.c_str(), &dev);
    if (rc != kNvmlSuccess && !device.uuid.empty()) rc = by_uuid_(device.uuid.c_str(), &dev);
    if (rc != kNvmlSuccess) {
      if (!unmatched_logged_[device.uuid]) {
        unmatched_logged_[device.uuid] = true;
        spdlog::warn(
            "busy detection: NVML does not know GPU {} ({} {}): {}; probing it "
            "without a busy check",
            device.index, device.pci_bus_id, device.uuid, ErrorText(rc));
      }
      dev = nullptr;
    }
    handles_[device.uuid] = dev;
    return dev;
  }

  std::optional<GpuLoad> Failed(const DeviceInfo& device, const char* what, NvmlReturn rc) {
    if (!unmatched_logged_[device.uuid + what]) {
      unmatched_logged_[device.uuid + what] = true;
      spdlog::warn(
          "busy detection: NVML cannot read {} of GPU {}: {}; probing it without "
          "that check",
          what, device.index, ErrorText(rc));
    }
    return std::nullopt;
  }

  void* handle_ = nullptr;
  bool initialised_ = false;
  std::string describe_;
  InitFn init_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  ErrorStringFn error_string_ = nullptr;
  HandleByPciFn by_pci_ = nullptr;
  HandleByUuidFn by_uuid_ = nullptr;
  UtilizationFn utilization_ = nullptr;
  PcieThroughputFn pcie_ = nullptr;
  std::mutex mutex_;
  std::map<std::string, NvmlDevice> handles_;
  std::map<std::string, bool> unmatched_logged_;
};

}  // namespace

std::unique_ptr<GpuLoadReader> MakeNvmlGpuLoadReader(const std::string& library) {
  return std::make_unique<NvmlGpuLoadReader>(library);
}

}  // namespace xferd::probes
