#include "probes/cuda/discovery.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/device_identity.h"
#include "probes/nvml/nvml_c2c.h"

namespace xferd::probes::cuda {
namespace {

[[noreturn]] void ThrowNoDevice(cudaError_t e) {
  throw NoDeviceError("no NVIDIA driver / GPU found (CUDA runtime: " + CudaErrorText(e) +
                      "): check that the NVIDIA driver is loaded (nvidia-smi) and that "
                      "/dev/nvidia* is accessible to this user");
}

DeviceInfo IdentityOf(int index, const cudaDeviceProp& prop, const std::string& driver_version) {
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  unsigned char uuid[16];
  std::memcpy(uuid, prop.uuid.bytes, 16);
  info.uuid = FormatGpuUuid(uuid);
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), index) == cudaSuccess)
    info.pci_bus_id = NormalizeBusId(bus);
  info.minor = DeviceMinor(info.pci_bus_id);
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.driver_version = driver_version;
  info.memory_bytes = prop.totalGlobalMem;
  info.integrated = prop.integrated != 0;
  // Grace Hopper: copies go over NVLink-C2C, whatever PCIe link sysfs shows.
  info.c2c = !info.integrated && HasC2cHostLink(info.pci_bus_id, info.name);
  return info;
}

}  // namespace

std::vector<DiscoveredGpu> DiscoverGpus(const CudaOptions& options) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) ThrowNoDevice(e);
  if (count == 0) ThrowNoDevice(cudaErrorNoDevice);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  const std::string driver_version = DriverVersion(driver);
  std::vector<DiscoveredGpu> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaError_t e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
      throw NoDeviceError("cannot read the properties of GPU " + std::to_string(i) + ": " +
                          CudaErrorText(e) + "; check nvidia-smi and dmesg");
    }
    DiscoveredGpu gpu;
    gpu.info = IdentityOf(i, prop, driver_version);
    gpu.capabilities =
        CapabilitiesOf({.can_map_host_memory = prop.canMapHostMemory != 0,
                        .managed_memory = prop.managedMemory != 0,
                        .concurrent_managed_access = prop.concurrentManagedAccess != 0},
                       options);
    gpu.blocks = std::max(1, prop.multiProcessorCount) * 8;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

Capabilities CapabilitiesOf(const DeviceFeatures& features, const CudaOptions& options) {
  Capabilities caps;
  if (!features.can_map_host_memory || options.hide_can_map_host_memory) {
    caps.unsupported[TransferMode::kZeroCopy] =
        "the device cannot map host memory (canMapHostMemory = 0)";
  }
  std::string managed_reason;
  if (!features.managed_memory) {
    managed_reason = "the device has no managed memory (managedMemory = 0)";
  } else if (!features.concurrent_managed_access || options.hide_concurrent_managed_access) {
    managed_reason =
        "the device lacks concurrentManagedAccess: managed memory moves whole at kernel "
        "launch, not by page faults, so there is no migration to measure";
  }
  if (!managed_reason.empty()) {
    caps.unsupported[TransferMode::kManaged] = managed_reason;
    caps.unsupported[TransferMode::kManagedPrefetch] = managed_reason;
  }
  return caps;
}

LinkPath LinkPathOf(const DeviceInfo& info, const std::filesystem::path& sysfs_root) {
  LinkPath path;
  if (info.integrated || info.pci_bus_id.empty()) {
    path.pcie = false;
    path.note = info.integrated ? "integrated GPU: it shares DRAM with the host, no PCIe link"
                                : "the CUDA runtime reports no PCI bus id";
    return path;
  }
  path = probes::ReadLinkPath(sysfs_root, info.pci_bus_id);
  path.c2c = info.c2c;
  return path;
}

}  // namespace xferd::probes::cuda
