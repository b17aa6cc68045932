// The host's GPUs as the CUDA runtime describes them: each one's identity, the modes it
// cannot do with the reason each is skipped, and its link to the host (integrated GPUs have
// none). No CUDA header here.
#pragma once

#include <filesystem>
#include <vector>

#include "xferd/probes/cuda_backend.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

struct DiscoveredGpu {
  DeviceInfo info;
  Capabilities capabilities;
  int blocks = 0;  // grid size for the streaming kernels: 8 per multiprocessor
};

// Every GPU the runtime sees, by index. NoDeviceError, naming the cause and the way out,
// when there is none (no driver, no GPU) or one's properties cannot be read.
std::vector<DiscoveredGpu> DiscoverGpus(const CudaOptions& options);

// What the runtime's device properties say the device can do (cudaDeviceProp's
// canMapHostMemory, managedMemory, concurrentManagedAccess).
struct DeviceFeatures {
  bool can_map_host_memory = true;
  bool managed_memory = true;
  bool concurrent_managed_access = true;
};

// The modes a device with these features cannot do, each with the reason it is skipped
// (the options' test hooks hide features the device has).
Capabilities CapabilitiesOf(const DeviceFeatures& features, const CudaOptions& options);

// The GPU's PCIe path from sysfs (and whether NVLink-C2C carries its copies), or, for an
// integrated GPU or one without a PCI bus id, no path and a note why.
LinkPath LinkPathOf(const DeviceInfo& info, const std::filesystem::path& sysfs_root);

}  // namespace xferd::probes::cuda
