#include "core/band.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

#include "core/host_groups.h"
#include "core/plan.h"

namespace xferd::core {

double CapabilityRate(const probes::PcieLink& link) {
  // Either end's maximum unreadable: the link's is not known (the GPU's alone would hold
  // a Gen5 GPU in a Gen4 slot to Gen5). No other end on the path at all (a GPU on a
  // virtual machine's root bus): this end's is all there is.
  if (link.max_gen == 0 || link.max_width == 0) return 0.0;
  if (!link.other_end_bdf.empty() &&
      (link.other_end_max_gen == 0 || link.other_end_max_width == 0)) {
    return 0.0;
  }
  return link.LinkMaxBytesPerSecond();
}

double BandRate(const probes::PcieLink& link) {
  const double capability = CapabilityRate(link);
  return capability > 0 ? capability : link.CurrentBytesPerSecond();
}

double HostLinkRate(const probes::LinkPath& path) {
  if (path.c2c) return probes::kC2cBytesPerSecond;
  if (!path.pcie) return 0.0;
  double lowest = 0;
  for (const probes::PcieLink& link : path.links) {
    const double rate = BandRate(link);
    if (rate > 0 && (lowest == 0 || rate < lowest)) lowest = rate;
  }
  return lowest;
}

namespace {

// The link whose BandRate is the lowest on the path (the first of equals, as
// LinkPath::Narrowest); nullptr when none is known.
const probes::PcieLink* BandLink(const probes::LinkPath& path) {
  const probes::PcieLink* lowest = nullptr;
  for (const probes::PcieLink& link : path.links) {
    const double rate = BandRate(link);
    if (rate > 0 && (lowest == nullptr || rate < BandRate(*lowest))) lowest = &link;
  }
  return lowest;
}

// A band that follows a trained link is said once per link in the log: its maximum could
// not be read, so a link trained down from the start reads as healthy there.
void SayTrainedOnce(const probes::PcieLink& link) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard lock(mutex);
    if (!said.insert(link.bdf).second) return;
  }
  spdlog::warn(
      "link at {}: the maximum speed of {} cannot be read, so the expected band follows the "
      "link as trained ({}): a link trained down from the start is not seen there; check "
      "max_link_speed and max_link_width under /sys/bus/pci/devices (said once)",
      link.bdf, link.other_end_bdf.empty() ? link.bdf : link.bdf + " or " + link.other_end_bdf,
      probes::FormatLink(link.current_gen, link.current_width));
}

}  // namespace

ExpectedBand BandFromPath(const probes::LinkPath& path, double lower_fraction,
                          double upper_fraction) {
  ExpectedBand band;
  band.link_bytes_per_s = HostLinkRate(path);
  band.c2c = path.c2c;
  if (path.c2c) {
    band.lower_bytes_per_s = lower_fraction * HostLinkRate(path);
    band.upper_bytes_per_s = upper_fraction * HostLinkRate(path);
    band.source = "NVLink-C2C, 450 GB/s per direction";
    return band;
  }
  if (!path.pcie) {
    band.source = "unknown: not a PCIe device";
    return band;
  }
  const probes::PcieLink* link = BandLink(path);
  if (link == nullptr) {
    band.source = "unknown: " + (path.note.empty() ? std::string("no link rate known") : path.note);
    return band;
  }
  band.lower_bytes_per_s = lower_fraction * BandRate(*link);
  band.upper_bytes_per_s = upper_fraction * BandRate(*link);
  const std::string trained = probes::FormatLink(link->current_gen, link->current_width);
  if (CapabilityRate(*link) > 0) {
    const std::string capability = probes::FormatLink(link->LinkMaxGen(), link->LinkMaxWidth());
    band.source = "link " + capability + " at " + link->bdf;
    if (link->CurrentBytesPerSecond() > 0 && trained != capability) {
      band.source += ", trained " + trained;
    }
  } else {
    band.source = "link " + trained + " as trained at " + link->bdf + " (maximum unreadable)";
    SayTrainedOnce(*link);
  }
  return band;
}

const ModeProfile& ProfileOf(probes::TransferMode mode, probes::Direction direction) {
  using probes::Direction;
  using probes::TransferMode;
  const bool h2d = direction != Direction::kD2H;
  // One row per (mode, direction); where a mode's share depends on the link, the row says
  // what it follows from (per_copy_s: the link's rate and the chunk) and whether it has a
  // figure over NVLink-C2C (c2c_figure).
  // cost_fraction: about 0.7 x what each reached of a Gen5 x16 link (63 GB/s) in the
  // probe's device time on a healthy H200 (docs/gpu-results.md, 64 MiB, 22 transfers).
  // pinned_async: its 1 MiB chunks stream as pinned copies do (0.87 of the link) plus a
  // fixed cost per copy; the H200 read 47.5-49.1 GB/s against pinned's 55.0-55.2, 2.3-2.9 us
  // more per chunk, and the model takes the larger: 0.755 of Gen5 x16 (read 0.75-0.78),
  // 0.81 of Gen4 x16, 0.42 of NVLink-C2C's 450 GB/s (the cost per copy, not the link).
  // Over NVLink-C2C the only published healthy figure is a host-to-device pinned copy
  // (nvbandwidth's ~346 GB/s on a GH200): every other row keeps its baseline there.
  constexpr double kPinnedShare = 0.87, kPerCopyS = 2.9e-6;
  static const ModeProfile kPageableH2D{1.0, 0.07}, kPageableD2H{1.0, 0.14};
  static const ModeProfile kPinnedH2D{1.0, 0.60, kBandMinSizeBytes, 0, 0, true};
  static const ModeProfile kPinnedD2H{1.0, 0.60}, kPinnedBoth{1.0, 0.50};
  static const ModeProfile kPinnedAsync{1.0, 0.40, kBandMinSizeBytes, kPerCopyS, kPinnedShare};
  static const ModeProfile kZeroCopy{1.0, 0.60};
  static const ModeProfile kManagedH2D{1.0, 0.04}, kManagedD2H{1.0, 0.035};
  static const ModeProfile kPrefetchH2D{0.8, 0.09, 64ull << 20}, kPrefetchD2H{1.0, 0.08};
  switch (mode) {
    case TransferMode::kPageable: return h2d ? kPageableH2D : kPageableD2H;
    case TransferMode::kPinned:
      if (direction == Direction::kBidirectional) return kPinnedBoth;
      return h2d ? kPinnedH2D : kPinnedD2H;
    case TransferMode::kPinnedAsync: return kPinnedAsync;
    case TransferMode::kZeroCopy: return kZeroCopy;
    case TransferMode::kManaged: return h2d ? kManagedH2D : kManagedD2H;
    case TransferMode::kManagedPrefetch: return h2d ? kPrefetchH2D : kPrefetchD2H;
  }
  static const ModeProfile kOther;
  return kOther;
}

ExpectedBand ModeBand(const ExpectedBand& band, probes::TransferMode mode,
                      probes::Direction direction) {
  const double scale = ProfileOf(mode, direction).band_scale;
  if (scale == 1.0 || !band.Known()) return band;
  ExpectedBand scaled = band;
  scaled.lower_bytes_per_s *= scale;
  scaled.upper_bytes_per_s *= scale;
  scaled.source = band.source + fmt::format(", x {:g} for {} {}", scale, probes::ToString(mode),
                                            probes::ToString(direction));
  return scaled;
}

const CcFigure* CcFigureOf(std::string_view device_name) {
  // nvbandwidth 0.10's CE copies on a G4 confidential VM (RTX PRO 6000 Blackwell Server
  // Edition, PCIe Gen5 x16), as published with the example that runs it.
  static const CcFigure kFigures[] = {
      {"RTX PRO 6000 Blackwell", 15.7e9, 18.6e9,
       "RTX PRO 6000 Blackwell in CC mode, nvbandwidth 0.10: GoogleCloudPlatform/cluster-toolkit "
       "PR #6029"},
  };
  for (const CcFigure& f : kFigures) {
    if (device_name.find(f.model) != std::string_view::npos) return &f;
  }
  return nullptr;
}

namespace {

// With confidential computing on: the link's band does not apply. Pinned copies are held
// to drift_fraction x a published CC figure of the model (the lower of its two directions,
// as a baseline would be), where one exists; every other mode to its baseline.
ExpectedBand CcBand(const Settings& settings, const probes::DeviceInfo& device,
                    const ExpectedBand& link) {
  ExpectedBand band;
  band.confidential = true;
  band.link_bytes_per_s = link.link_bytes_per_s;
  band.c2c = link.c2c;
  const std::string prefix = "confidential computing on: bounce-buffered copies, ";
  if (const CcFigure* f = CcFigureOf(device.name)) {
    band.lower_bytes_per_s =
        settings.drift_fraction * std::min(f->h2d_bytes_per_s, f->d2h_bytes_per_s);
    band.upper_bytes_per_s = std::max(f->h2d_bytes_per_s, f->d2h_bytes_per_s);
    band.source = prefix + fmt::format(
                               "pinned held to {:g} x {:.1f} GB/s ({}); other modes to "
                               "their baselines",
                               settings.drift_fraction,
                               std::min(f->h2d_bytes_per_s, f->d2h_bytes_per_s) / 1e9, f->source);
  } else {
    band.source = prefix + "no published CC figure for " +
                  (device.name.empty() ? std::string("this GPU") : device.name) +
                  ": each mode held to its baseline";
  }
  return band;
}

}  // namespace

ExpectedBand ResolveBand(const Settings& settings, const probes::DeviceInfo& device,
                         const probes::LinkPath& path) {
  ExpectedBand band =
      BandFromPath(path, settings.band_lower_fraction, settings.band_upper_fraction);
  if (device.cc.On()) band = CcBand(settings, device, band);
  if (device.mig.Enabled()) {
    int engines = 0;
    for (std::size_t i : probes::LinkInstances(device.mig)) {
      engines = std::max(engines, device.mig.instances[i].copy_engines);
    }
    band.few_copy_engines = engines <= 0 || device.mig.whole_gpu_copy_engines <= 0 ||
                            engines < device.mig.whole_gpu_copy_engines;
    if (band.few_copy_engines && band.Known()) {
      // No figure says such an instance fills the link: no band, each mode its baseline.
      band.lower_bytes_per_s = band.upper_bytes_per_s = 0;
      band.source = fmt::format(
          "MIG: probed through instances of {} of the GPU's {} copy engines, each mode held to "
          "its baseline ({})",
          engines > 0 ? std::to_string(engines) : std::string("unknown"),
          device.mig.whole_gpu_copy_engines > 0 ? std::to_string(device.mig.whole_gpu_copy_engines)
                                                : std::string("unknown"),
          band.source);
    }
  }
  for (const BandOverride& o : settings.bands) {
    if (!NamesDevice(o.gpu, device)) continue;
    // The config's figures, over the same link: each mode's share still follows from it.
    band.lower_bytes_per_s = o.lower_bytes_per_s;
    band.upper_bytes_per_s = o.upper_bytes_per_s;
    band.source = "config";
    band.confidential = false;  // the operator's figure holds, CC or not
    break;
  }
  band.chunk_bytes = settings.chunk_bytes;
  return band;
}

double PerDirection(probes::Direction direction, double bytes_per_s) {
  return direction == probes::Direction::kBidirectional ? bytes_per_s / 2 : bytes_per_s;
}

std::string_view ToString(BandVerdict verdict) {
  switch (verdict) {
    case BandVerdict::kOk: return "ok";
    case BandVerdict::kBelowBand: return "below band";
    case BandVerdict::kNotLinkBound: return "n/a (not link-bound)";
    case BandVerdict::kNoBand: return "n/a (no expected band)";
    case BandVerdict::kLatencyBound: return "n/a (under the band's size)";
    case BandVerdict::kPerCopyBound: return "n/a (per-copy bound: baseline only)";
    case BandVerdict::kNoLinkFigure: return "n/a (no figure on NVLink-C2C: baseline only)";
    case BandVerdict::kConfidential: return "n/a (confidential computing: baseline only)";
    case BandVerdict::kFewCopyEngines: return "n/a (MIG instance's copy engines: baseline only)";
  }
  return "unknown";
}

double ExpectedLinkShare(probes::TransferMode mode, probes::Direction direction,
                         const ExpectedBand& band) {
  const ModeProfile& p = ProfileOf(mode, direction);
  if (p.per_copy_s <= 0 || p.copy_share <= 0 || band.link_bytes_per_s <= 0 ||
      band.chunk_bytes == 0) {
    return 0;
  }
  const double chunk = static_cast<double>(band.chunk_bytes);
  return chunk / (chunk / p.copy_share + p.per_copy_s * band.link_bytes_per_s);
}

std::string_view ToString(BandHold hold) {
  switch (hold) {
    case BandHold::kHeld: return "held";
    case BandHold::kNotLinkBound: return "not link-bound";
    case BandHold::kUnderSize: return "under the band's size";
    case BandHold::kPerCopyBound: return "per-copy bound";
    case BandHold::kNoLinkFigure: return "no figure on this link";
    case BandHold::kConfidential: return "confidential computing";
    case BandHold::kFewCopyEngines: return "MIG copy engines";
  }
  return "unknown";
}

std::uint64_t ScaledToLink(std::uint64_t size_bytes, double link_bytes_per_s,
                           double reference_bytes_per_s) {
  if (size_bytes <= kBandMinSizeBytes || link_bytes_per_s <= 0 ||
      link_bytes_per_s >= reference_bytes_per_s) {
    return size_bytes;
  }
  constexpr double kMiB = 1 << 20;
  // Whole MiB, rounded down (with a hair of slack: the PCIe rates are exact powers of two
  // of each other, and Gen3 x4 must give 8 MiB against Gen4 x16's 64, not 7.99...).
  const double scaled = static_cast<double>(size_bytes) * link_bytes_per_s / reference_bytes_per_s;
  const auto mib = static_cast<std::uint64_t>(std::floor(scaled / kMiB + 1e-6));
  return std::clamp<std::uint64_t>(mib << 20, kBandMinSizeBytes, size_bytes);
}

std::uint64_t BandMinSize(probes::TransferMode mode, probes::Direction direction,
                          double link_bytes_per_s) {
  return ScaledToLink(ProfileOf(mode, direction).band_min_size_bytes, link_bytes_per_s,
                      kProfileLinkBytesPerSecond);
}

BandHold HoldOf(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes,
                const ExpectedBand& band) {
  if (!probes::IsLinkBound(mode, direction)) return BandHold::kNotLinkBound;
  if (band.confidential) {
    // Only pinned copies one way have a published CC figure (CcFigureOf).
    const bool figure = band.Known() && mode == probes::TransferMode::kPinned &&
                        direction != probes::Direction::kBidirectional;
    if (!figure) return BandHold::kConfidential;
  }
  if (band.few_copy_engines) return BandHold::kFewCopyEngines;
  const ModeProfile& p = ProfileOf(mode, direction);
  if (size_bytes < BandMinSize(mode, direction, band.link_bytes_per_s)) {
    return BandHold::kUnderSize;
  }
  // Per direction, as shares of the link: what it reaches against what it would be held to.
  const double share = ExpectedLinkShare(mode, direction, band);
  if (share > 0 && band.lower_bytes_per_s > 0 &&
      share < p.band_scale * band.lower_bytes_per_s / band.link_bytes_per_s + kPerCopyMargin) {
    return BandHold::kPerCopyBound;
  }
  return band.c2c && !p.c2c_figure ? BandHold::kNoLinkFigure : BandHold::kHeld;
}

bool HeldToBand(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes,
                const ExpectedBand& band) {
  return HoldOf(mode, direction, size_bytes, band) == BandHold::kHeld;
}

bool BandExempt(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes,
                const ExpectedBand& band) {
  return probes::IsLinkBound(mode, direction) && !HeldToBand(mode, direction, size_bytes, band);
}

bool HasOwnBand(probes::TransferMode mode, probes::Direction direction) {
  return probes::IsLinkBound(mode, direction) && ProfileOf(mode, direction).band_scale != 1.0;
}

std::vector<std::pair<probes::TransferMode, probes::Direction>> OwnBandPairs(
    const Settings& settings) {
  // Every size plans the same pairs: plan one.
  Settings one_size = settings;
  one_size.sizes.resize(std::min<std::size_t>(settings.sizes.size(), 1));
  std::vector<std::pair<probes::TransferMode, probes::Direction>> pairs;
  for (const probes::ProbeSpec& spec : PlanProbes(one_size)) {
    if (HasOwnBand(spec.mode, spec.direction)) pairs.emplace_back(spec.mode, spec.direction);
  }
  return pairs;
}

BandVerdict JudgeBand(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes, double median_bytes_per_s,
                      const ExpectedBand& band) {
  if (!probes::IsLinkBound(mode, direction)) return BandVerdict::kNotLinkBound;
  const BandHold hold = HoldOf(mode, direction, size_bytes, band);
  if (hold == BandHold::kConfidential) return BandVerdict::kConfidential;
  if (hold == BandHold::kFewCopyEngines) return BandVerdict::kFewCopyEngines;
  if (!band.Known()) return BandVerdict::kNoBand;
  switch (hold) {
    case BandHold::kHeld: break;
    case BandHold::kNotLinkBound: return BandVerdict::kNotLinkBound;
    case BandHold::kUnderSize: return BandVerdict::kLatencyBound;
    case BandHold::kPerCopyBound: return BandVerdict::kPerCopyBound;
    case BandHold::kNoLinkFigure: return BandVerdict::kNoLinkFigure;
    case BandHold::kConfidential: return BandVerdict::kConfidential;
    case BandHold::kFewCopyEngines: return BandVerdict::kFewCopyEngines;
  }
  if (PerDirection(direction, median_bytes_per_s) <
      ModeBand(band, mode, direction).lower_bytes_per_s) {
    return BandVerdict::kBelowBand;
  }
  return BandVerdict::kOk;
}

ExpectedBand GroupBand(const HostGroup& group, const Settings& settings) {
  ExpectedBand band;
  if (group.capacity_bytes_per_s <= 0) {
    band.source = "unknown: a member's path has no known link rate";
    return band;
  }
  band.lower_bytes_per_s = settings.band_lower_fraction * group.capacity_bytes_per_s;
  band.upper_bytes_per_s = settings.band_upper_fraction * group.capacity_bytes_per_s;
  band.source =
      group.shared_link.empty()
          ? fmt::format("{:.1f} GB/s over the members' paths", group.capacity_bytes_per_s / 1e9)
          : fmt::format("{:.1f} GB/s over the members' paths, shared link {}",
                        group.capacity_bytes_per_s / 1e9, group.shared_link);
  return band;
}

bool AggregateHeldToBand(probes::Direction direction) {
  return direction != probes::Direction::kBidirectional;
}

}  // namespace xferd::core
