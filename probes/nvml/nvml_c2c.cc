#include "probes/nvml/nvml_c2c.h"

#include <dlfcn.h>

#include "probes/nvml/nvml_abi.h"

namespace xferd::probes {
namespace {

struct NvmlC2cModeInfoV1 {  // nvmlC2cModeInfo_v1_t
  unsigned int is_c2c_enabled;
};
using C2cModeFn = NvmlReturn (*)(nvml::Device, NvmlC2cModeInfoV1*);

}  // namespace

std::optional<bool> NvmlC2cEnabled(const std::string& pci_bus_id, const std::string& library) {
  if (pci_bus_id.empty()) return std::nullopt;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return std::nullopt;
  const auto init = reinterpret_cast<nvml::InitFn>(dlsym(handle, "nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<nvml::ShutdownFn>(dlsym(handle, "nvmlShutdown"));
  const auto by_pci =
      reinterpret_cast<nvml::HandleByPciFn>(dlsym(handle, "nvmlDeviceGetHandleByPciBusId_v2"));
  const auto c2c_mode = reinterpret_cast<C2cModeFn>(dlsym(handle, "nvmlDeviceGetC2cModeInfoV"));
  std::optional<bool> out;
  if (init != nullptr && shutdown != nullptr && by_pci != nullptr && c2c_mode != nullptr &&
      init() == kNvmlSuccess) {
    nvml::Device device = nullptr;
    NvmlC2cModeInfoV1 info{};
    if (by_pci(pci_bus_id.c_str(), &device) == kNvmlSuccess &&
        c2c_mode(device, &info) == kNvmlSuccess) {
      out = info.is_c2c_enabled != 0;
    }
    shutdown();
  }
  dlclose(handle);
  return out;
}

bool HasC2cHostLink(const std::string& pci_bus_id, const std::string& name) {
  if (const auto nvml = NvmlC2cEnabled(pci_bus_id)) return *nvml;
  return name.find("GH200") != std::string::npos || name.find("GB200") != std::string::npos;
}

}  // namespace xferd::probes
