#include "core/diagnosis.h"

#include <algorithm>
#include <cstdio>
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
    case DiagnosisCause::kIommuTranslating: return "iommu_translating";
    case DiagnosisCause::kPinnedPageableRatio: return "pinned_pageable_ratio";
    case DiagnosisCause::kGpuBusy: return "gpu_busy";
    case DiagnosisCause::kBelowBand: return "below_band";
    case DiagnosisCause::kBelowBaseline: return "below_baseline";
    case DiagnosisCause::kLinkShared: return "link_shared";
    case DiagnosisCause::kCapabilityMismatch: return "capability_mismatch";
  }
  return "unknown";
}

std::vector<Diagnosis> Diagnose(const CycleObservation& obs, const probes::ExpectedBand& band,
                                const std::vector<const SeriesHealth*>& observed,
                                double drift_fraction) {
  std::vector<Diagnosis> out;
  const probes::LinkPath& path = obs.link_path;

  bool low = false;
  const SeriesHealth* worst_band = nullptr;
  const SeriesHealth* worst_baseline = nullptr;
  for (const SeriesHealth* s : observed) {
    if (s->below_band) {
      low = true;
      if (!worst_band || PerDirection(s->direction, s->median_bytes_per_s) <
                             PerDirection(worst_band->direction, worst_band->median_bytes_per_s)) {
        worst_band = s;
      }
    }
    if (s->below_baseline) {
      low = true;
      if (!worst_baseline ||
          s->median_bytes_per_s / s->baseline_bytes_per_s <
              worst_baseline->median_bytes_per_s / worst_baseline->baseline_bytes_per_s) {
        worst_baseline = s;
      }
    }
  }

  // A downtrained link is a fault whether or not this cycle was slow: it caps every copy.
  // Both ends of a link report it; it is named once.
  std::vector<std::string> downtrained;
  std::string first_bdf;
  std::vector<std::pair<std::string, std::string>> named;
  for (const probes::PcieLink& link : path.links) {
    if (!link.Downtrained()) continue;
    if (std::find(named.begin(), named.end(), std::pair(link.other_end_bdf, link.bdf)) !=
        named.end()) {
      continue;
    }
    named.emplace_back(link.bdf, link.other_end_bdf);
    if (first_bdf.empty()) first_bdf = link.bdf;
    downtrained.push_back(link.bdf + " " + LinkText(link.current_gen, link.current_width) +
                          ", max " + LinkText(link.LinkMaxGen(), link.LinkMaxWidth()));
  }
  if (!downtrained.empty()) {
    std::string detail;
    for (const auto& d : downtrained) detail += (detail.empty() ? "" : "; ") + d;
    out.push_back({DiagnosisCause::kLinkDowntrained, detail,
                   "A PCIe link on the GPU's path runs below what both of its ends can do: "
                   "compare LnkSta with LnkCap in `lspci -vv -s " +
                       first_bdf +
                       "` and its upstream port, reseat the card or riser, check the slot and "
                       "the BIOS PCIe speed setting."});
  }

  // The GPU can do more than its path allows (a Gen5 GPU in a Gen4 slot, an x8 switch on
  // the way): not a fault, and not link_downtrained; the band follows the trained link.
  if (!path.links.empty()) {
    const probes::PcieLink& own = path.links.front();
    const probes::PcieLink* cap = path.NarrowestMax();
    if (cap != nullptr && own.MaxBytesPerSecond() > 0 &&
        cap->LinkMaxBytesPerSecond() < own.MaxBytesPerSecond()) {
      const std::string ends =
          cap->other_end_bdf.empty() ? cap->bdf : cap->bdf + " - " + cap->other_end_bdf;
      out.push_back(
          {DiagnosisCause::kCapabilityMismatch,
           "GPU can do " + LinkText(own.max_gen, own.max_width) + ", its path at most " +
               LinkText(cap->LinkMaxGen(), cap->LinkMaxWidth()) + " (link " + ends + ")",
           "Not a fault: the slot or a port upstream caps the GPU below what it can do, and "
           "the expected band follows the link as it is. For the GPU's full bandwidth, move "
           "it to a slot whose path supports " +
               LinkText(own.max_gen, own.max_width) + " (`lspci -vv` LnkCap of each port)."});
    }
  }

  // The node the caller names, else the one a probe found its host buffer on.
  int host_node = obs.host_numa_node;
  for (const probes::ProbeSample& sample : obs.samples) {
    if (host_node >= 0) break;
    if (sample.status == ProbeStatus::kOk) host_node = sample.host_numa_node;
  }
  if (path.numa_node >= 0 && host_node >= 0 && path.numa_node != host_node) {
    const std::string gpu_node = std::to_string(path.numa_node);
    out.push_back(
        {DiagnosisCause::kNumaRemote,
         "GPU on node " + gpu_node + ", host buffers on node " + std::to_string(host_node),
         "Host memory is on another NUMA node than the GPU, so copies cross the "
         "socket link: bind the workload and xferd to node " +
             gpu_node + " (numactl --cpunodebind=" + gpu_node + " --membind=" + gpu_node +
             ", or CPUAffinity=/NUMAPolicy= in the unit)."});
  }

  if (low && (path.iommu_type == "DMA" || path.iommu_type == "DMA-FQ")) {
    out.push_back({DiagnosisCause::kIommuTranslating, "iommu_group type " + path.iommu_type,
                   "The IOMMU translates every DMA of this GPU: check whether a kernel or "
                   "BIOS update turned it on; iommu=pt (passthrough) on the kernel command "
                   "line restores direct DMA where isolation is not needed."});
  }

  // Pinned against pageable h2d of the same size, both measured this cycle. Integrated GPUs
  // share DRAM with the host, where a ratio near 1 is normal.
  if (!obs.device.integrated) {
    for (const SeriesHealth* pinned : observed) {
      // A reading that shared the link says nothing about staging or pinning.
      if (pinned->mode != TransferMode::kPinned || pinned->direction != Direction::kH2D ||
          pinned->status != ProbeStatus::kOk || pinned->contended) {
        continue;
      }
      for (const SeriesHealth* pageable : observed) {
        if (pageable->mode != TransferMode::kPageable || pageable->direction != Direction::kH2D ||
            pageable->size_bytes != pinned->size_bytes || pageable->status != ProbeStatus::kOk ||
            pageable->contended || pageable->median_bytes_per_s <= 0) {
          continue;
        }
        const double ratio = pinned->median_bytes_per_s / pageable->median_bytes_per_s;
        if (ratio >= kPinnedPageableRatioLow && ratio <= kPinnedPageableRatioHigh) continue;
        char detail[96];
        std::snprintf(detail, sizeof detail, "pinned/pageable h2d %.1fx, usual 2-4x", ratio);
        out.push_back(
            {DiagnosisCause::kPinnedPageableRatio, detail,
             ratio < kPinnedPageableRatioLow
                 ? "Pinned copies are hardly faster than pageable ones: check the memlock "
                   "limit (LimitMEMLOCK=), that pinned allocations succeed, and the IOMMU mode."
                 : "Pageable copies are unusually slow next to pinned ones: check host memory "
                   "bandwidth and pressure, the process's NUMA placement and transparent huge "
                   "pages."});
        break;
      }
      if (!out.empty() && out.back().cause == DiagnosisCause::kPinnedPageableRatio) break;
    }
  }

  if (obs.busy) {
    out.push_back({DiagnosisCause::kGpuBusy, "other work on the GPU or link before the probes",
                   "Another workload used the GPU or its link when the cycle began, so its "
                   "probes did not run: this cycle counts toward neither verdicts nor "
                   "baselines; if it persists, raise the busy thresholds or the interval."});
  }

  // Probes whose window saw another process's traffic: their readings were set aside.
  int contended = 0;
  double worst_h2d = 0, worst_d2h = 0;
  for (const probes::ProbeSample& sample : obs.samples) {
    if (!sample.Contended()) continue;
    ++contended;
    worst_h2d = std::max(worst_h2d, sample.contention.foreign_h2d_bytes_per_s);
    worst_d2h = std::max(worst_d2h, sample.contention.foreign_d2h_bytes_per_s);
  }
  if (contended > 0) {
    char detail[160];
    std::snprintf(detail, sizeof detail,
                  "%.1f GB/s foreign traffic (h2d %.1f, d2h %.1f) during %d probe%s",
                  (worst_h2d + worst_d2h) / 1e9, worst_h2d / 1e9, worst_d2h / 1e9, contended,
                  contended == 1 ? "" : "s");
    out.push_back({DiagnosisCause::kLinkShared, detail,
                   "Another process moved data over this GPU's link while xferd probed it: "
                   "those readings measure the neighbour, not the hardware, so they were "
                   "neither judged nor learned. Nothing to fix; `nvidia-smi dmon -s t` shows "
                   "the traffic. If it is there at every cycle, xferd judges nothing: probe "
                   "when the workload pauses (busy detection, a longer interval)."});
  }

  if (worst_band) {
    out.push_back(
        {DiagnosisCause::kBelowBand,
         PairName(worst_band->mode, worst_band->direction) + " " + BandReading(*worst_band) +
             " < " +
             FormatGBps(ModeBand(band, worst_band->mode, worst_band->direction).lower_bytes_per_s) +
             " band",
         "A link-bound copy is below what the link should carry (" +
             ModeBand(band, worst_band->mode, worst_band->direction).source +
             "): see the other causes; check `nvidia-smi -q -d PERFORMANCE` for "
             "throttling and `lspci -vv` for the link."});
  }
  if (worst_baseline) {
    char detail[160];
    std::snprintf(detail, sizeof detail, "%s %s < %.2f x baseline %s",
                  PairName(worst_baseline->mode, worst_baseline->direction).c_str(),
                  FormatGBps(worst_baseline->median_bytes_per_s).c_str(), drift_fraction,
                  FormatGBps(worst_baseline->baseline_bytes_per_s).c_str());
    out.push_back({DiagnosisCause::kBelowBaseline, detail,
                   "Bandwidth fell against this device's own history: look for what changed "
                   "(driver, kernel, BIOS or firmware update, slot, a co-located workload)."});
  }
  return out;
}

}  // namespace xferd::core
