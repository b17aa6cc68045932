// Where the simulated GPUs sit: a built-in host (GPUs behind PCIe switches, switches spread
// over NUMA nodes) or a sysfs tree (a copy of /sys or a fake one), read with the same
// topology reader as real GPUs. The bandwidth model (sim_backend.cc) follows the paths
// given here.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "xferd/probes/sim_backend.h"
#include "xferd/probes/topology.h"

namespace xferd::probes {

class SimTopology {
 public:
  // Throws NoDeviceError when `options.sysfs_root` is set and holds no NVIDIA GPU.
  explicit SimTopology(const SimOptions& options);

  int size() const { return static_cast<int>(bdfs_.size()); }

  // The device's PCI address ("" for an integrated GPU).
  const std::string& Bdf(int device) const { return bdfs_.at(device); }

  // The device's path as it is now: read again from the sysfs tree (so a test may change
  // the tree under a running daemon), or the built-in one. Links at their best; faults are
  // the backend's business.
  LinkPath Path(int device) const;

  // Describes where the devices came from, for messages: "sysfs tree /x (8 GPUs)".
  std::string Describe() const;

 private:
  SimOptions options_;
  std::vector<std::string> bdfs_;
  std::vector<std::string> uplinks_;  // built in: the switch above each device
};

// The NVIDIA display-class functions (vendor 0x10de, class 0x03xxxx) under
// `sysfs_root`/bus/pci/devices, by address; other functions of the GPUs (audio, USB-C) and
// other vendors' devices are left out.
std::vector<std::string> FindNvidiaGpus(const std::filesystem::path& sysfs_root);

}  // namespace xferd::probes
