// The PCIe path between a GPU and its root port, read from sysfs, and the bandwidth the
// narrowest link on it can carry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::probes {

// One PCIe link as the device at its downstream end reports it. 0 = unknown.
struct PcieLink {
  std::string bdf;  // "0000:01:00.0": the device whose link this is
  int current_gen = 0, current_width = 0;
  int max_gen = 0, max_width = 0;

  // Theoretical bytes/s per direction of the current (max) link; 0 when unknown.
  double CurrentBytesPerSecond() const;
  double MaxBytesPerSecond() const;
  bool Downtrained() const;  // current below max in generation or width (both known)
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
};

// NVLink-C2C between a Grace CPU and a Hopper GPU: 900 GB/s both ways together, 450 GB/s
// per direction (NVIDIA's Grace Hopper superchip figures). nvbandwidth measures ~346 GB/s
// host to device on a GH200, 0.77 of it: inside the band the default fractions give.
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

struct ExpectedBand {
  double lower_bytes_per_s = 0;
  double upper_bytes_per_s = 0;
  std::string source;  // "config", "link Gen4 x16 at 0000:00:01.0", "unknown: ..."
  bool Known() const { return upper_bytes_per_s > 0; }
};

inline constexpr double kBandLowerFraction = 0.63;
inline constexpr double kBandUpperFraction = 0.83;

// The band from the narrowest link on the path: [0.63, 0.83] x its current rate (the seed's
// 20-26 GB/s for Gen4 x16); for an NVLink-C2C path the fractions of kC2cBytesPerSecond
// (284-374 GB/s). Unknown (zeros) when no link rate is known.
ExpectedBand BandFromPath(const LinkPath& path, double lower_fraction = kBandLowerFraction,
                          double upper_fraction = kBandUpperFraction);

}  // namespace xferd::probes
