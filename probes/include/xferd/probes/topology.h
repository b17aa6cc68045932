// The PCIe path between a GPU and its root port, read from sysfs, and the bandwidth each
// link on it can carry: the facts of the hardware. The band a GPU is held to is core's
// (core/band.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::probes {

// One PCIe link as one of its two ends reports it (sysfs gives each device's view of its
// link: a GPU or a switch's upstream port the link above it, a root port or a switch's
// downstream port the link below it). 0 = unknown.
struct PcieLink {
  std::string bdf;  // "0000:01:00.0": the device whose view this is
  int current_gen = 0, current_width = 0;
  int max_gen = 0, max_width = 0;  // what this end can do
  // What the other end of the same link can do (its max_link_speed/width): the upstream
  // port for a GPU or a switch's upstream port, the device below for a port. 0 = unknown
  // (no other end on the path, e.g. a GPU on a virtual machine's root bus).
  std::string other_end_bdf = {};
  int other_end_max_gen = 0, other_end_max_width = 0;

  // Theoretical bytes/s per direction of the current link / of what this end can do; 0
  // when unknown.
  double CurrentBytesPerSecond() const;
  double MaxBytesPerSecond() const;
  // The most the link can train to: the lower of its two ends' maxima (this end's alone
  // when the other is unknown); 0 when unknown.
  int LinkMaxGen() const;
  int LinkMaxWidth() const;
  double LinkMaxBytesPerSecond() const;
  // A fault: the link runs below what both of its ends can do (generation or width).
  bool Downtrained() const;
  // Not a fault: this end can do more than the other end allows (a Gen5 GPU in a Gen4
  // slot, an x16 root port linked to an x8 switch).
  bool CappedByOtherEnd() const;
};

struct LinkPath {
  // The GPU's own link first, then each bridge above it up to the root port.
  std::vector<PcieLink> links;
  bool pcie = true;  // false for an integrated GPU or a device with no PCIe path
  // The GPU reaches host memory over NVLink-C2C (Grace Hopper), not over the PCIe links
  // sysfs shows for it: the band and the shared-path bounds use the C2C rate.
  bool c2c = false;
  int numa_node = -1;      // -1: unknown or a single-node machine
  std::string iommu_type;  // sysfs iommu_group/type: "identity", "DMA", "DMA-FQ"; "" = none
  std::string note;        // why the path is incomplete, if it is

  // The link with the lowest known current bandwidth; nullptr if none is known.
  const PcieLink* Narrowest() const;
  // The link (by the view of either end) whose maximum, the lower of its ends' maxima, is
  // the lowest on the path: what caps the GPU however well every link trains; nullptr if
  // no maximum is known.
  const PcieLink* NarrowestMax() const;
};

// Fill each link's other_end_* from the path's order: sysfs lists a GPU, then the port
// above it (the same link seen from its other end), then the switch's upstream port and
// the port above that, and so on up to the root port. Pairs (0,1), (2,3), ... are the two
// ends of one link; an unpaired last entry keeps its other end unknown.
void PairLinkEnds(LinkPath& path);

// NVLink-C2C between a Grace CPU and a Hopper GPU: 900 GB/s both ways together, 450 GB/s
// per direction (NVIDIA's Grace Hopper superchip figures). nvbandwidth measures ~346 GB/s
// host to device on a GH200, 0.77 of it.
inline constexpr double kC2cBytesPerSecond = 450e9;

// How a GPU reaches host memory: the `type` label of xferd_host_link_info.
enum class HostLink { kPcie, kC2c, kIntegrated };
std::string_view ToString(HostLink link);  // "pcie", "c2c", "integrated"
HostLink HostLinkOf(const DeviceInfo& device);

// Per-direction theoretical bandwidth of a PCIe link in bytes/s: transfer rate x lanes x
// encoding efficiency / 8 (8b/10b for gen 1-2, 128b/130b for gen 3-5, 242/256 FLIT for 6).
// Gen4 x16 = 31.5e9, Gen5 x16 = 63.0e9. 0 for an unknown generation or width.
double PcieBytesPerSecond(int generation, int width);

// sysfs "16.0 GT/s PCIe" -> 4; 0 when the text names no known rate.
int ParseLinkSpeed(std::string_view text);
// sysfs "16" (or "x16") -> 16; 0 when the text is not a width.
int ParseLinkWidth(std::string_view text);

// "Gen4 x16"; an unknown part reads "Gen?" or "x?".
std::string FormatLink(int generation, int width);

// "0000:01:00.0": a PCI function as sysfs names it (a domain of 4 or more hex digits).
bool LooksLikeBdf(std::string_view text);

// CUDA says "0000:01:00.0", NVML "00000000:01:00.0", some tools "01:00.0": the first form,
// lower case, as sysfs names it.
std::string NormalizeBdf(std::string_view bdf);

// Read the path of the device with PCI address `bdf` ("0000:00:06.0", any case) under
// `sysfs_root` (normally "/sys"). Never throws for missing or odd files: what cannot be
// read is left unknown and said in `note`.
LinkPath ReadLinkPath(const std::filesystem::path& sysfs_root, std::string_view bdf);

}  // namespace xferd::probes
