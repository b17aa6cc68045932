// Whether a GPU reaches host memory over NVLink-C2C (Grace Hopper), as NVML reports it,
// with the device name as the fallback where NVML cannot say.
#pragma once

#include <optional>
#include <string>

namespace xferd::probes {

// NVML's C2C mode of the GPU at `pci_bus_id` (nvmlDeviceGetC2cModeInfoV, through dlopen of
// `library`: no header or library needed to build); nullopt when NVML cannot tell (no
// driver, a driver older than the call, a GPU NVML does not know).
std::optional<bool> NvmlC2cEnabled(const std::string& pci_bus_id,
                                   const std::string& library = "libnvidia-ml.so.1");

// NVML's answer, else whether the name is a Grace superchip's GPU ("NVIDIA GH200 480GB",
// "NVIDIA GB200").
bool HasC2cHostLink(const std::string& pci_bus_id, const std::string& name);

}  // namespace xferd::probes
