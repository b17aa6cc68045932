#include "probes/sim/sim_topology.h"

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "platform/files.h"
#include "xferd/probes/backend.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

// As many GPUs as the built-in host may have ([simulate] devices).
constexpr std::size_t kMaxSimulatedGpus = 64;
// Buses per built-in switch: its upstream port, then one per GPU behind it.
constexpr int kBusesPerSwitch = 0x10;
constexpr int kSwitchesPerDomain = 15;

std::string Address(int domain, int bus) {
  char text[24];
  std::snprintf(text, sizeof text, "%04x:%02x:00.0", domain & 0xffff, bus & 0xff);
  return text;
}

std::string FirstLine(const fs::path& file) {
  std::string text = platform::TryReadFileBounded(file, 4096).value_or("");
  text = text.substr(0, text.find('\n'));
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

std::vector<std::string> FindNvidiaGpus(const fs::path& sysfs_root) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(sysfs_root / "bus" / "pci" / "devices", ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!LooksLikeBdf(name)) continue;
    std::string vendor = FirstLine(it->path() / "vendor");
    std::string klass = FirstLine(it->path() / "class");
    std::transform(vendor.begin(), vendor.end(), vendor.begin(), ::tolower);
    std::transform(klass.begin(), klass.end(), klass.begin(), ::tolower);
    // Class 0x03: display controllers (0x0300 VGA, 0x0302 3D, as data-centre GPUs report).
    if (vendor == "0x10de" && klass.size() == 8 && klass.starts_with("0x03")) {
      out.push_back(NormalizeBdf(name));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

SimTopology::SimTopology(const SimOptions& options) : options_(options) {
  if (!options_.sysfs_root.empty()) {
    bdfs_ = FindNvidiaGpus(options_.sysfs_root);
    if (bdfs_.empty()) {
      throw NoDeviceError("the simulated host's sysfs tree " + options_.sysfs_root.string() +
                          " has no NVIDIA GPU (vendor 0x10de, class 0x03xxxx) under "
                          "bus/pci/devices; point simulate.sysfs_root (--sysfs-root) at a copy "
                          "of /sys or a tree such as tests/data/sysfs/hgx-8gpu, or leave it "
                          "unset for the built-in host");
    }
    if (bdfs_.size() > kMaxSimulatedGpus) bdfs_.resize(kMaxSimulatedGpus);
    return;
  }
  const int per_switch = std::clamp(options_.gpus_per_switch, 1, kBusesPerSwitch - 1);
  for (int i = 0; i < std::max(options_.devices, 0); ++i) {
    if (options_.integrated) {
      bdfs_.emplace_back();
      uplinks_.emplace_back();
      continue;
    }
    const int sw = i / per_switch;
    const int domain = sw / kSwitchesPerDomain;
    const int upstream_bus = kBusesPerSwitch * (1 + sw % kSwitchesPerDomain);
    bdfs_.push_back(Address(domain, upstream_bus + 1 + i % per_switch));
    uplinks_.push_back(Address(domain, upstream_bus));
  }
}

LinkPath SimTopology::Path(int device) const {
  LinkPath path;
  if (device < 0 || device >= size()) {
    path.note = "no simulated device " + std::to_string(device);
    return path;
  }
  if (!options_.sysfs_root.empty()) {
    LinkPath read = ReadLinkPath(options_.sysfs_root, bdfs_[device]);
    read.c2c = options_.c2c;
    return read;
  }
  if (options_.integrated) {
    path.pcie = false;
    path.note = "integrated GPU: host and device share DRAM, no PCIe link";
    return path;
  }
  const int gen = options_.link_gen, width = options_.link_width;
  const int up_gen = options_.uplink_gen > 0 ? options_.uplink_gen : gen;
  const int up_width = options_.uplink_width > 0 ? options_.uplink_width : width;
  // The GPU's own link, then the switch's upstream port: its link is the one the GPUs
  // behind the switch share.
  path.links.push_back({bdfs_[device], gen, width, gen, width});
  path.links.push_back({uplinks_[device], up_gen, up_width, up_gen, up_width});
  const int per_switch = std::clamp(options_.gpus_per_switch, 1, kBusesPerSwitch - 1);
  path.numa_node = (device / per_switch) % std::max(options_.numa_nodes, 1);
  path.iommu_type = "identity";
  path.c2c = options_.c2c;
  return path;
}

std::string SimTopology::Describe() const {
  if (!options_.sysfs_root.empty()) {
    return "sysfs tree " + options_.sysfs_root.string() + " (" + std::to_string(size()) + " GPUs)";
  }
  return "built-in host (" + std::to_string(size()) + " GPUs)";
}

}  // namespace xferd::probes
