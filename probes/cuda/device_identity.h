// How a GPU names itself to operators: UUID, PCI bus id, driver version. No CUDA header.
#pragma once

#include <string>
#include <string_view>

namespace xferd::probes::cuda {

// The 16 bytes of cudaDeviceProp::uuid as nvidia-smi prints them:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string FormatGpuUuid(const unsigned char (&bytes)[16]);

// "0000:00:06.0" in lower case, the form sysfs uses.
std::string NormalizeBusId(std::string_view bus_id);

// The kernel module's version ("580.95.05") from the text of /proc/driver/nvidia/version;
// empty when it names none.
std::string ParseProcDriverVersion(std::string_view text);

// The number of the GPU's device file (/dev/nvidia<N>, what dcgm-exporter's `device` label
// names) from the text of /proc/driver/nvidia/gpus/<bus id>/information ("Device Minor:
// 0"); -1 when it names none.
int ParseDeviceMinor(std::string_view text);

// The same for the GPU at `pci_bus_id` (sysfs form, the driver's directory name); -1 when
// the file cannot be read (no NVIDIA kernel module's procfs, a container without it).
int DeviceMinor(const std::string& pci_bus_id);

// The full driver version: from NVML when libnvidia-ml.so.1 loads, else from
// /proc/driver/nvidia/version, else what the CUDA runtime knows ("CUDA driver API 13.0").
std::string DriverVersion(int cuda_driver_version);

}  // namespace xferd::probes::cuda
