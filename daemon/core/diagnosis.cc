#include "core/diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "core/band.h"

namespace xferd::core {
namespace {

using probes::Direction;
using probes::ProbeStatus;
using probes::TransferMode;

std::string LinkText(int gen, int width) {
  std::string gen_text = gen > 0 ? "Gen" + std::to_string(gen) : "Gen?";
  std::string width_text = width > 0 ? "x" + std::to_string(width) : "x?";
  return gen_text + " " + width_text;
}

}  // namespace

std::string FormatGBps(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", bytes_per_s / 1e9);
  return buf;
}

std::string PairName(TransferMode mode, Direction direction) {
  return std::string(probes::ToString(mode)) + " " + std::string(probes::ToString(direction));
}

std::string BandReading(const SeriesHealth& s) {
  return FormatGBps(core::PerDirection(s.direction, s.median_bytes_per_s)) +
         (s.direction == Direction::kBidirectional ? " per direction" : "");
}

std::string_view ToString(DiagnosisCause cause) {
  switch (cause) {
    case DiagnosisCause::kLinkDowntrained: return "link_downtrained";
    case DiagnosisCause::kNumaRemote: return "numa_remote";
    case DiagnosisCause::kSharedUplink: return "shared_uplink";
    case DiagnosisCause::kIommuTranslating: return "iommu_translating";
    case DiagnosisCause::kPinnedPageableRatio: return "pinned_pageable_ratio";
    case DiagnosisCause::kGpuBusy: return "gpu_busy";
    case DiagnosisCause::kBelowBand: return "below_band";
    case DiagnosisCause::kBelowBaseline: return "below_baseline";
    case DiagnosisCause::kLinkShared: return "link_shared";
    case DiagnosisCause::kCapabilityMismatch: return "capability_mismatch";
    case DiagnosisCause::kLinkErrors: return "link_errors";
    case DiagnosisCause::kLinkFlapping: return "link_flapping";
  }
  return "unknown";
}

std::optional<DiagnosisCause> ParseDiagnosisCause(std::string_view label) {
  for (DiagnosisCause c : kAllDiagnosisCauses) {
    if (ToString(c) == label) return c;
  }
  return std::nullopt;
}

bool IsNote(DiagnosisCause cause) {
  switch (cause) {
    case DiagnosisCause::kCapabilityMismatch:
    case DiagnosisCause::kSharedUplink:
    case DiagnosisCause::kLinkShared:
    case DiagnosisCause::kGpuBusy: return true;
    default: return false;
  }
}

int CauseRank(DiagnosisCause cause) {
  switch (cause) {
    case DiagnosisCause::kLinkDowntrained: return 0;
    // A link that retrains between probes: what the probes read depends on when they run.
    case DiagnosisCause::kLinkFlapping: return 1;
    case DiagnosisCause::kLinkErrors: return 2;
    case DiagnosisCause::kIommuTranslating: return 3;
    case DiagnosisCause::kNumaRemote: return 4;
    case DiagnosisCause::kPinnedPageableRatio: return 5;
    case DiagnosisCause::kBelowBand: return 6;
    case DiagnosisCause::kBelowBaseline: return 7;
    // The notes, after every fault.
    case DiagnosisCause::kSharedUplink: return 10;
    case DiagnosisCause::kCapabilityMismatch: return 11;
    case DiagnosisCause::kLinkShared: return 12;
    case DiagnosisCause::kGpuBusy: return 13;
  }
  return 20;
}

void RankCauses(std::vector<Diagnosis>& causes) {
  std::stable_sort(causes.begin(), causes.end(), [](const Diagnosis& a, const Diagnosis& b) {
    return CauseRank(a.cause) < CauseRank(b.cause);
  });
}

namespace {

// A downtrained link is a fault whether or not this cycle was slow: it caps every copy, and
// the band follows what the link can do (BandRate), so its copies read below the band. It is
// read while a probe keeps the link busy: a link that slows down at idle to save power is
// back up to speed then. Both ends of a link report it; it is named once, with the most it
// could train to.
std::optional<Diagnosis> LinkDowntrained(const probes::LinkPath& path) {
  std::string detail, first_bdf;
  std::vector<std::pair<std::string, std::string>> named;
  for (const probes::PcieLink& link : path.links) {
    if (!link.Downtrained()) continue;
    if (std::find(named.begin(), named.end(), std::pair(link.other_end_bdf, link.bdf)) !=
        named.end()) {
      continue;
    }
    named.emplace_back(link.bdf, link.other_end_bdf);
    if (first_bdf.empty()) first_bdf = link.bdf;
    detail += (detail.empty() ? "" : "; ") + link.bdf + " " +
              LinkText(link.current_gen, link.current_width) + ", max " +
              LinkText(link.LinkMaxGen(), link.LinkMaxWidth());
  }
  if (detail.empty()) return std::nullopt;
  return Diagnosis{DiagnosisCause::kLinkDowntrained, detail,
                   "A PCIe link on the GPU's path runs below what both of its ends can do: "
                   "compare LnkSta with LnkCap in `lspci -vv -s " +
                       first_bdf +
                       "` and its upstream port, reseat the card or riser, check the slot and "
                       "the BIOS PCIe speed setting."};
}

// The GPU can do more than its path allows (a Gen5 GPU in a Gen4 slot, an x8 switch on the
// way): not a fault, and not link_downtrained; the band follows what the path can carry, the
// lower of each link's two ends' maxima.
std::optional<Diagnosis> CapabilityMismatch(const probes::LinkPath& path) {
  if (path.links.empty()) return std::nullopt;
  const probes::PcieLink& own = path.links.front();
  const probes::PcieLink* cap = path.NarrowestMax();
  if (cap == nullptr || own.MaxBytesPerSecond() <= 0 ||
      cap->LinkMaxBytesPerSecond() >= own.MaxBytesPerSecond()) {
    return std::nullopt;
  }
  const std::string ends =
      cap->other_end_bdf.empty() ? cap->bdf : cap->bdf + " - " + cap->other_end_bdf;
  return Diagnosis{
      DiagnosisCause::kCapabilityMismatch,
      "GPU can do " + LinkText(own.max_gen, own.max_width) + ", its path at most " +
          LinkText(cap->LinkMaxGen(), cap->LinkMaxWidth()) + " (link " + ends + ")",
      "Not a fault: the slot or a port upstream caps the GPU below what it can do, and the "
      "expected band follows what that path can carry. For the GPU's full bandwidth, move it to a "
      "slot whose path supports " +
          LinkText(own.max_gen, own.max_width) + " (`lspci -vv` LnkCap of each port)."};
}

// Probes whose window saw another process's traffic: their readings were set aside.
std::optional<Diagnosis> LinkShared(const CycleObservation& obs) {
  int contended = 0;
  double worst_h2d = 0, worst_d2h = 0;
  for (const probes::ProbeSample& sample : obs.samples) {
    if (!sample.Contended()) continue;
    ++contended;
    worst_h2d = std::max(worst_h2d, sample.contention.foreign_h2d_bytes_per_s);
    worst_d2h = std::max(worst_d2h, sample.contention.foreign_d2h_bytes_per_s);
  }
  if (contended == 0) return std::nullopt;
  char detail[160];
  std::snprintf(detail, sizeof detail,
                "%.1f GB/s foreign traffic (h2d %.1f, d2h %.1f) during %d probe%s",
                (worst_h2d + worst_d2h) / 1e9, worst_h2d / 1e9, worst_d2h / 1e9, contended,
                contended == 1 ? "" : "s");
  return Diagnosis{DiagnosisCause::kLinkShared, detail,
                   "Another process moved data over this GPU's link while xferd probed it: "
                   "those readings measure the neighbour, not the hardware, so they were "
                   "neither judged nor learned. Nothing to fix; `nvidia-smi dmon -s t` shows "
                   "the traffic. If it is there at every cycle, xferd judges nothing: probe "
                   "when the workload pauses (busy detection, a longer interval)."};
}

std::optional<Diagnosis> NumaRemote(const CycleObservation& obs) {
  // The node the caller names, else the one a probe found its host buffer on, and why the
  // backend could not place them on the GPU's node, when it says.
  int host_node = obs.host_numa_node;
  std::string placement;
  for (const probes::ProbeSample& sample : obs.samples) {
    if (sample.status != ProbeStatus::kOk) continue;
    if (host_node < 0) host_node = sample.host_numa_node;
    if (placement.empty()) placement = sample.host_placement;
  }
  const int gpu = obs.link_path.numa_node;
  if (gpu < 0 || gpu == host_node) return std::nullopt;
  // Buffers of unknown place are remote only when placing them failed.
  if (host_node < 0 && placement.empty()) return std::nullopt;
  const std::string gpu_node = std::to_string(gpu);
  std::string detail = "GPU on node " + gpu_node + ", host buffers on node " +
                       (host_node >= 0 ? std::to_string(host_node) : std::string("unknown"));
  if (!placement.empty()) detail += " (not placed on node " + gpu_node + ": " + placement + ")";
  return Diagnosis{
      DiagnosisCause::kNumaRemote, detail,
      "Host memory is on another NUMA node than the GPU, so copies cross the socket link: bind "
      "the workload and xferd to node " +
          gpu_node + " (numactl --cpunodebind=" + gpu_node + " --membind=" + gpu_node +
          ", or CPUAffinity=/NUMAPolicy= in the unit)."};
}

// Pinned against pageable h2d of the same size, both measured this cycle. Integrated GPUs
// share DRAM with the host, where a ratio near 1 is normal.
std::optional<Diagnosis> PinnedPageableRatio(const CycleObservation& obs,
                                             const std::vector<const SeriesHealth*>& observed) {
  // Under confidential computing both go through the same encrypted bounce buffers: no
  // published ratio to hold them to.
  if (obs.device.integrated || obs.device.cc.On()) return std::nullopt;
  // A reading that shared the link says nothing about staging or pinning.
  const auto ok_h2d = [](const SeriesHealth* s, TransferMode mode) {
    return s->mode == mode && s->direction == Direction::kH2D && s->status == ProbeStatus::kOk &&
           !s->contended && s->median_bytes_per_s > 0;
  };
  for (const SeriesHealth* pinned : observed) {
    if (!ok_h2d(pinned, TransferMode::kPinned)) continue;
    for (const SeriesHealth* pageable : observed) {
      if (!ok_h2d(pageable, TransferMode::kPageable) ||
          pageable->size_bytes != pinned->size_bytes) {
        continue;
      }
      const double ratio = pinned->median_bytes_per_s / pageable->median_bytes_per_s;
      if (ratio >= kPinnedPageableRatioLow && ratio <= kPinnedPageableRatioHigh) continue;
      char detail[96];
      std::snprintf(detail, sizeof detail, "pinned/pageable h2d %.1fx, usual 2-4x", ratio);
      return Diagnosis{
          DiagnosisCause::kPinnedPageableRatio, detail,
          ratio < kPinnedPageableRatioLow
              ? "Pinned copies are hardly faster than pageable ones: check the memlock limit "
                "(LimitMEMLOCK=), that pinned allocations succeed, and the IOMMU mode."
              : "Pageable copies are unusually slow next to pinned ones: check host memory "
                "bandwidth and pressure, the process's NUMA placement and transparent huge "
                "pages."};
    }
  }
  return std::nullopt;
}

// The path's error counters grew around a low reading: replays and retries take bandwidth,
// and a link that keeps erring is a link about to train down. Growth on a path that reads
// well is the alert's business (XferdPcieLinkErrorsRising), not a cause of anything.
std::optional<Diagnosis> LinkErrors(const LinkErrorGrowth& g, const std::string& gpu_bdf) {
  if (!g.Significant()) return std::nullopt;
  using probes::AerClass;
  const auto count = [&](AerClass c) { return g.aer[static_cast<std::size_t>(c)]; };
  std::string detail;
  const auto add = [&](std::uint64_t n, const std::string& what) {
    if (n > 0) detail += (detail.empty() ? "+" : ", +") + std::to_string(n) + " " + what;
  };
  add(g.replays, "PCIe replays (NVML)");
  add(count(AerClass::kCorrectable), "correctable");
  add(count(AerClass::kNonFatal), "nonfatal");
  add(count(AerClass::kFatal), "fatal");
  if (count(AerClass::kCorrectable) + count(AerClass::kNonFatal) + count(AerClass::kFatal) > 0) {
    detail += " AER errors";
  }
  if (!g.worst_bdf.empty()) {
    std::string kinds;
    for (const probes::AerKind& k : g.worst_kinds) {
      kinds += (kinds.empty() ? "" : ", ") + k.name + " +" + std::to_string(k.count);
    }
    detail += ", most at " + g.worst_bdf + " (" + g.worst_where +
              (kinds.empty() ? "" : ": " + kinds) + ")";
  }
  char span[48];
  std::snprintf(span, sizeof span, " in %.1f min", g.window_s / 60.0);
  detail += span;

  const bool uncorrectable = count(AerClass::kNonFatal) + count(AerClass::kFatal) > 0;
  const bool upstream = g.worst_where == "a switch port" || g.worst_where == "the root port";
  const std::string at = !g.worst_bdf.empty() ? g.worst_bdf
                         : !gpu_bdf.empty()   ? gpu_bdf
                                              : "<the GPU's bus id>";
  std::string advice =
      "The PCIe link on the GPU's path retried or lost transactions while bandwidth read low: "
      "replays take bandwidth, and a link that keeps erring trains down next. ";
  advice += upstream ? "The errors sit upstream of the GPU: reseat or replace the riser, cable or "
                       "retimer between the switch and the root port, and check the switch board's "
                       "slot. "
                     : "Reseat the GPU and its riser or cable; move it to another slot to tell the "
                       "card from the slot (errors that follow the card: the card). ";
  if (uncorrectable) {
    advice +=
        "Uncorrectable errors lose transactions: drain the node first; if they persist "
        "after a reseat, RMA the card (or the board whose port reports them). ";
  }
  advice += "`lspci -vv -s " + at +
            "` shows the error status (CESta, UESta); `dmesg | grep -i aer` the kernel's lines.";
  return Diagnosis{DiagnosisCause::kLinkErrors, detail, advice};
}

// A link on the path changed its width, or its speed while the GPU moved data, again and
// again between probes, or ran below its capability for a tenth of the watch's window: a
// fault whatever the probes read, since they see the link only while they run. A link that
// stays low and that the probe's own reading names link_downtrained is named once, there.
std::optional<Diagnosis> LinkFlapping(const LinkWatchState& watch, bool downtrained,
                                      const std::string& gpu_bdf) {
  if (!watch.flapping || (watch.low_only && downtrained)) return std::nullopt;
  const std::string at = gpu_bdf.empty() ? "<the GPU's bus id>" : gpu_bdf;
  return Diagnosis{
      DiagnosisCause::kLinkFlapping, watch.Describe(),
      "A PCIe link on the GPU's path retrains between probes (its width changes, or its speed "
      "drops while data moves): a signal problem that costs bandwidth whenever it happens and "
      "that a snapshot misses. Reseat the GPU and its riser or cable, check the retimers and the "
      "slot (move the card to tell them apart), and the BIOS PCIe speed setting; `watch -n1 "
      "lspci -vv -s " +
          at +
          "` shows LnkSta changing, `dmesg | grep -i -e pcie -e aer` the kernel's view. Speed "
          "changes while the GPU is idle are power saving and are not counted."};
}

// The series furthest below the band (per direction) and below its baseline (by ratio).
std::pair<const SeriesHealth*, const SeriesHealth*> Worst(
    const std::vector<const SeriesHealth*>& observed) {
  const SeriesHealth* band = nullptr;
  const SeriesHealth* baseline = nullptr;
  const auto rate = [](const SeriesHealth* s) {
    return PerDirection(s->direction, s->median_bytes_per_s);
  };
  const auto ratio = [](const SeriesHealth* s) {
    return s->median_bytes_per_s / s->BaselineReference();
  };
  for (const SeriesHealth* s : observed) {
    if (s->below_band && (!band || rate(s) < rate(band))) band = s;
    if (s->below_baseline && (!baseline || ratio(s) < ratio(baseline))) baseline = s;
  }
  return {band, baseline};
}

}  // namespace

std::vector<Diagnosis> Diagnose(const CycleObservation& obs, const ExpectedBand& band,
                                const std::vector<const SeriesHealth*>& observed,
                                double drift_fraction) {
  std::vector<Diagnosis> out;
  const auto [worst_band, worst_baseline] = Worst(observed);
  const bool low = worst_band != nullptr || worst_baseline != nullptr;
  const probes::LinkPath& path = obs.link_path;
  const std::optional<Diagnosis> downtrained = LinkDowntrained(path);
  if (downtrained) out.push_back(*downtrained);
  if (auto d = LinkFlapping(obs.link_watch, downtrained.has_value(), obs.device.pci_bus_id)) {
    out.push_back(std::move(*d));
  }
  if (auto d = CapabilityMismatch(path)) out.push_back(std::move(*d));
  if (auto d = NumaRemote(obs)) out.push_back(std::move(*d));
  if (low && (path.iommu_type == "DMA" || path.iommu_type == "DMA-FQ")) {
    out.push_back({DiagnosisCause::kIommuTranslating, "iommu_group type " + path.iommu_type,
                   "The IOMMU translates every DMA of this GPU: check whether a kernel or "
                   "BIOS update turned it on; iommu=pt (passthrough) on the kernel command "
                   "line restores direct DMA where isolation is not needed."});
  }
  if (auto d = PinnedPageableRatio(obs, observed)) out.push_back(std::move(*d));
  if (obs.busy) {
    out.push_back({DiagnosisCause::kGpuBusy, "other work on the GPU or link before the probes",
                   "Another workload used the GPU or its link when the cycle began, so its "
                   "probes did not run: this cycle counts toward neither verdicts nor "
                   "baselines; if it persists, raise the busy thresholds or the interval."});
  }
  if (auto d = LinkShared(obs)) out.push_back(std::move(*d));
  if (low) {
    if (auto d = LinkErrors(obs.link_errors, obs.device.pci_bus_id)) out.push_back(std::move(*d));
  }
  if (worst_band) {
    const ExpectedBand mode_band = ModeBand(band, worst_band->mode, worst_band->direction);
    out.push_back({DiagnosisCause::kBelowBand,
                   PairName(worst_band->mode, worst_band->direction) + " " +
                       BandReading(*worst_band) + " < " + FormatGBps(mode_band.lower_bytes_per_s) +
                       " band",
                   "A link-bound copy is below what the link should carry (" + mode_band.source +
                       "): see the other causes; check `nvidia-smi -q -d PERFORMANCE` for "
                       "throttling and `lspci -vv` for the link."});
  }
  if (worst_baseline) {
    char detail[160];
    std::snprintf(
        detail, sizeof detail, "%s %s < %.2f x %s %s",
        PairName(worst_baseline->mode, worst_baseline->direction).c_str(),
        FormatGBps(worst_baseline->median_bytes_per_s).c_str(), drift_fraction,
        worst_baseline->peer_baseline_bytes_per_s > 0 ? "its peers' baseline" : "baseline",
        FormatGBps(worst_baseline->BaselineReference()).c_str());
    out.push_back({DiagnosisCause::kBelowBaseline, detail,
                   worst_baseline->peer_baseline_bytes_per_s > 0
                       ? "Bandwidth is below what the same GPU model on the same link of this "
                         "host reads, from its first cycles: compare the GPUs' slots, risers, "
                         "NUMA placement and link errors; `xferd probe` on the host names what "
                         "it sees."
                       : "Bandwidth fell against this device's own history: look for what "
                         "changed (driver, kernel, BIOS or firmware update, slot, a co-located "
                         "workload)."});
  }
  RankCauses(out);
  return out;
}

}  // namespace xferd::core
