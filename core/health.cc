#include "core/health.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "xferd/probes/stats.h"

namespace xferd::core {

namespace {

using probes::Direction;
using probes::ProbeStatus;
using probes::TransferMode;

std::string GBps(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", bytes_per_s / 1e9);
  return buf;
}

std::string LinkText(int gen, int width) {
  std::string gen_text = gen > 0 ? "Gen" + std::to_string(gen) : "Gen?";
  std::string width_text = width > 0 ? "x" + std::to_string(width) : "x?";
  return gen_text + " " + width_text;
}

std::string PairName(TransferMode mode, Direction direction) {
  return std::string(probes::ToString(mode)) + " " + std::string(probes::ToString(direction));
}

// What the band (per direction) is compared with: both directions at once count the bytes
// of both, so half of it (as `xferd probe` judges it).
double PerDirection(const SeriesHealth& s) {
  return s.direction == Direction::kBidirectional ? s.median_bytes_per_s / 2 : s.median_bytes_per_s;
}

std::string BandReading(const SeriesHealth& s) {
  return GBps(PerDirection(s)) + (s.direction == Direction::kBidirectional ? " per direction" : "");
}

// The series judged worst for a headline: below band first, then the largest shortfall.
double Shortfall(const SeriesHealth& s, const probes::ExpectedBand& band) {
  if (s.below_band && band.lower_bytes_per_s > 0) {
    return 1.0 + (1.0 - PerDirection(s) / band.lower_bytes_per_s);
  }
  if (s.below_baseline && s.baseline_bytes_per_s > 0) {
    return 1.0 - s.median_bytes_per_s / s.baseline_bytes_per_s;
  }
  return -1.0;
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
      if (!worst_band || PerDirection(*s) < PerDirection(*worst_band)) {
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
  std::vector<std::string> downtrained;
  std::string first_bdf;
  for (const probes::PcieLink& link : path.links) {
    if (!link.Downtrained()) continue;
    if (first_bdf.empty()) first_bdf = link.bdf;
    downtrained.push_back(link.bdf + " " + LinkText(link.current_gen, link.current_width) +
                          ", max " + LinkText(link.max_gen, link.max_width));
  }
  if (!downtrained.empty()) {
    std::string detail;
    for (const auto& d : downtrained) detail += (detail.empty() ? "" : "; ") + d;
    out.push_back({DiagnosisCause::kLinkDowntrained, detail,
                   "A PCIe link on the GPU's path runs below its maximum: compare LnkSta with "
                   "LnkCap in `lspci -vv -s " +
                       first_bdf +
                       "`, reseat the card or riser, check the slot and the BIOS PCIe speed "
                       "setting."});
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
      if (pinned->mode != TransferMode::kPinned || pinned->direction != Direction::kH2D ||
          pinned->status != ProbeStatus::kOk) {
        continue;
      }
      for (const SeriesHealth* pageable : observed) {
        if (pageable->mode != TransferMode::kPageable || pageable->direction != Direction::kH2D ||
            pageable->size_bytes != pinned->size_bytes || pageable->status != ProbeStatus::kOk ||
            pageable->median_bytes_per_s <= 0) {
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
    out.push_back({DiagnosisCause::kGpuBusy, "other work on the GPU or link during the probes",
                   "Another workload used the GPU or its link while probing: this cycle counts "
                   "toward neither verdicts nor baselines; if it persists, raise the busy "
                   "thresholds or the interval."});
  }

  if (worst_band) {
    out.push_back({DiagnosisCause::kBelowBand,
                   PairName(worst_band->mode, worst_band->direction) + " " +
                       BandReading(*worst_band) + " < " + GBps(band.lower_bytes_per_s) + " band",
                   "A link-bound copy is below what the link should carry (" + band.source +
                       "): see the other causes; check `nvidia-smi -q -d PERFORMANCE` for "
                       "throttling and `lspci -vv` for the link."});
  }
  if (worst_baseline) {
    char detail[160];
    std::snprintf(detail, sizeof detail, "%s %s < %.2f x baseline %s",
                  PairName(worst_baseline->mode, worst_baseline->direction).c_str(),
                  GBps(worst_baseline->median_bytes_per_s).c_str(), drift_fraction,
                  GBps(worst_baseline->baseline_bytes_per_s).c_str());
    out.push_back({DiagnosisCause::kBelowBaseline, detail,
                   "Bandwidth fell against this device's own history: look for what changed "
                   "(driver, kernel, BIOS or firmware update, slot, a co-located workload)."});
  }
  return out;
}

}  // namespace

std::vector<Diagnosis> DiagnoseOnce(const Settings& config, const CycleObservation& observation) {
  Settings once = config;
  once.consecutive_bad = 1;
  return HealthTracker(once).Observe(observation).diagnoses;
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
  }
  return "unknown";
}

bool DeviceHealth::Degraded() const {
  return std::any_of(verdicts.begin(), verdicts.end(), [](const auto& v) { return v.degraded; });
}

bool DeviceHealth::Has(DiagnosisCause cause) const {
  return std::any_of(diagnoses.begin(), diagnoses.end(),
                     [cause](const Diagnosis& d) { return d.cause == cause; });
}

std::string SeriesKey(TransferMode mode, Direction direction, std::uint64_t size_bytes) {
  return std::string(probes::ToString(mode)) + "/" + std::string(probes::ToString(direction)) +
         "/" + probes::FormatSize(size_bytes);
}

probes::ExpectedBand ResolveBand(const Settings& config, const probes::DeviceInfo& device,
                                 const probes::LinkPath& path) {
  for (const BandOverride& o : config.bands) {
    if (o.gpu == std::to_string(device.index) || (!device.uuid.empty() && o.gpu == device.uuid)) {
      return {o.lower_bytes_per_s, o.upper_bytes_per_s, "config"};
    }
  }
  return probes::BandFromPath(path, config.band_lower_fraction, config.band_upper_fraction);
}

HealthTracker::HealthTracker(const Settings& config) : config_(config) {}

void HealthTracker::Reconfigure(const Settings& config) {
  std::lock_guard lock(mutex_);
  config_ = config;
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  auto configured = [&](const SeriesHealth& h) {
    const bool mode =
        std::find(config_.modes.begin(), config_.modes.end(), h.mode) != config_.modes.end();
    const bool size =
        std::find(config_.sizes.begin(), config_.sizes.end(), h.size_bytes) != config_.sizes.end();
    const bool direction = h.direction != Direction::kBidirectional || config_.bidirectional;
    return mode && size && direction;
  };
  for (auto& [uuid, device] : devices_) {
    const std::size_t before = device.series.size();
    for (auto it = device.series.begin(); it != device.series.end();) {
      SeriesState& series = it->second;
      while (series.medians.size() > window) series.medians.pop_front();
      if (configured(series.health)) {
        ++it;
        continue;
      }
      // No longer probed: its verdict goes, its history is kept for a later config.
      const SeriesHealth& h = series.health;
      if (!series.medians.empty()) {
        restored_[uuid][SeriesKey(h.mode, h.direction, h.size_bytes)] =
            std::vector<double>(series.medians.begin(), series.medians.end());
      }
      it = device.series.erase(it);
    }
    // Causes read off the dropped series are stale; the next cycle finds what still holds.
    if (device.series.size() != before) device.last.diagnoses.clear();
    std::erase_if(device.last.series, [&](const SeriesHealth& h) { return !configured(h); });
    std::erase_if(device.last.verdicts, [&](const PairVerdict& v) {
      return std::none_of(device.series.begin(), device.series.end(), [&](const auto& entry) {
        return entry.second.health.mode == v.mode && entry.second.health.direction == v.direction;
      });
    });
  }
}

DeviceHealth HealthTracker::Observe(const CycleObservation& obs) {
  std::lock_guard lock(mutex_);
  const std::string& uuid = obs.device.uuid;
  DeviceState& device = devices_[uuid];
  device.last.gpu = obs.device.index;
  device.last.uuid = uuid;
  device.last.band = ResolveBand(config_, obs.device, obs.link_path);
  const probes::ExpectedBand& band = device.last.band;
  const int k = std::max(1, config_.consecutive_bad);
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));

  std::vector<Key> observed_keys;
  for (const probes::ProbeSample& sample : obs.samples) {
    const Key key{sample.spec.mode, sample.spec.direction, sample.spec.size_bytes};
    auto [it, inserted] = device.series.try_emplace(key);
    SeriesState& state = it->second;
    SeriesHealth& h = state.health;
    if (inserted) {
      h.mode = sample.spec.mode;
      h.direction = sample.spec.direction;
      h.size_bytes = sample.spec.size_bytes;
      // Take over what the state file held for this series.
      auto dev_it = restored_.find(uuid);
      if (dev_it != restored_.end()) {
        auto series_it = dev_it->second.find(SeriesKey(h.mode, h.direction, h.size_bytes));
        if (series_it != dev_it->second.end()) {
          for (double m : series_it->second) state.medians.push_back(m);
          while (state.medians.size() > window) state.medians.pop_front();
          dev_it->second.erase(series_it);
          if (dev_it->second.empty()) restored_.erase(dev_it);
        }
      }
    }
    if (std::find(observed_keys.begin(), observed_keys.end(), key) == observed_keys.end()) {
      observed_keys.push_back(key);
    }
    h.status = sample.status;
    h.below_band = h.below_baseline = false;
    if (sample.status == ProbeStatus::kUnsupported) continue;
    if (sample.status != ProbeStatus::kOk || sample.durations_s.empty()) {
      // A failed probe says nothing about bandwidth, and is no evidence of health either.
      h.good_streak = 0;
      continue;
    }

    const double median = sample.MedianBandwidth();
    h.median_bytes_per_s = median;
    const std::vector<double> learned(state.medians.begin(), state.medians.end());
    const double baseline = probes::RobustBaseline(learned);
    h.below_band = band.Known() && probes::IsLinkBound(h.mode, h.direction) &&
                   h.size_bytes >= kBandMinSizeBytes && PerDirection(h) < band.lower_bytes_per_s;
    h.below_baseline = static_cast<int>(learned.size()) >= kMinBaselineCycles &&
                       median < config_.drift_fraction * baseline;

    // Contention is not a device fault: a busy cycle moves neither verdict nor baseline.
    if (!obs.busy) {
      if (h.Bad()) {
        ++h.bad_streak;
        h.good_streak = 0;
        if (h.bad_streak >= k) h.degraded = true;
      } else {
        ++h.good_streak;
        h.bad_streak = 0;
        if (h.good_streak >= k) h.degraded = false;
      }
      // A drop below the baseline is not learned, or the baseline would follow the fault.
      if (!h.below_baseline) {
        state.medians.push_back(median);
        while (state.medians.size() > window) state.medians.pop_front();
      }
    }
    const std::vector<double> now_learned(state.medians.begin(), state.medians.end());
    h.baseline_bytes_per_s = probes::RobustBaseline(now_learned);
    h.baseline_cycles = static_cast<int>(now_learned.size());
  }

  // Publish every series known for this device, and roll verdicts up per pair.
  device.last.series.clear();
  std::map<std::pair<TransferMode, Direction>, bool> pairs;
  std::vector<const SeriesHealth*> observed;
  for (auto& [key, state] : device.series) {
    device.last.series.push_back(state.health);
    bool& degraded = pairs[{state.health.mode, state.health.direction}];
    degraded = degraded || state.health.degraded;
  }
  for (const Key& key : observed_keys) observed.push_back(&device.series.at(key).health);
  std::map<std::pair<TransferMode, Direction>, bool> before;
  for (const PairVerdict& v : device.last.verdicts) before[{v.mode, v.direction}] = v.degraded;
  device.last.verdicts.clear();
  for (const auto& [pair, degraded] : pairs) {
    auto it = before.find(pair);
    const bool was = it != before.end() && it->second;
    device.last.verdicts.push_back({pair.first, pair.second, degraded, degraded != was});
  }
  device.last.diagnoses = Diagnose(obs, band, observed, config_.drift_fraction);
  return device.last;
}

double HealthTracker::Baseline(const std::string& uuid, TransferMode mode, Direction direction,
                               std::uint64_t size_bytes) const {
  std::lock_guard lock(mutex_);
  auto dev_it = devices_.find(uuid);
  if (dev_it != devices_.end()) {
    auto it = dev_it->second.series.find(Key{mode, direction, size_bytes});
    if (it != dev_it->second.series.end()) {
      const std::vector<double> m(it->second.medians.begin(), it->second.medians.end());
      return probes::RobustBaseline(m);
    }
  }
  auto restored_dev = restored_.find(uuid);
  if (restored_dev != restored_.end()) {
    auto it = restored_dev->second.find(SeriesKey(mode, direction, size_bytes));
    if (it != restored_dev->second.end()) return probes::RobustBaseline(it->second);
  }
  return 0.0;
}

std::vector<DeviceHealth> HealthTracker::Devices() const {
  std::lock_guard lock(mutex_);
  std::vector<DeviceHealth> out;
  for (const auto& [uuid, device] : devices_) out.push_back(device.last);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.gpu < b.gpu; });
  return out;
}

std::string HealthTracker::Summary() const {
  const std::vector<DeviceHealth> devices = Devices();
  if (devices.empty()) return "starting: no probe cycle finished yet";
  std::size_t total = 0, good = 0;
  std::vector<std::string> problems;
  std::string notes;  // causes that hold on healthy devices: worth a glance, not a verdict
  for (const DeviceHealth& d : devices) {
    total += d.verdicts.size();
    if (!d.Degraded()) {
      for (const Diagnosis& diag : d.diagnoses) {
        if (diag.cause == DiagnosisCause::kBelowBand ||
            diag.cause == DiagnosisCause::kBelowBaseline) {
          continue;  // one bad cycle is not news; the verdict decides
        }
        notes += "; gpu" + std::to_string(d.gpu) + " " + std::string(ToString(diag.cause)) + " (" +
                 diag.detail + ")";
      }
    }
    std::size_t degraded_pairs = 0;
    for (const PairVerdict& v : d.verdicts) {
      if (v.degraded) ++degraded_pairs;
    }
    good += d.verdicts.size() - degraded_pairs;
    if (degraded_pairs == 0) continue;

    // Headline: the degraded series that is furthest below what it should be.
    const SeriesHealth* worst = nullptr;
    for (const SeriesHealth& s : d.series) {
      if (!s.degraded) continue;
      if (!worst || Shortfall(s, d.band) > Shortfall(*worst, d.band)) worst = &s;
    }
    std::string line = "DEGRADED gpu" + std::to_string(d.gpu) + " " +
                       PairName(worst->mode, worst->direction) + " ";
    if (worst->below_band) {
      line += BandReading(*worst) + " < " + GBps(d.band.lower_bytes_per_s) + " band";
    } else if (worst->below_baseline) {
      line += GBps(worst->median_bytes_per_s) + " < baseline " + GBps(worst->baseline_bytes_per_s);
    } else {
      line += GBps(worst->median_bytes_per_s) + " (recovering)";
    }
    if (degraded_pairs > 1) line += " (+" + std::to_string(degraded_pairs - 1) + " more)";
    std::string likely;
    for (const Diagnosis& diag : d.diagnoses) {
      if (diag.cause == DiagnosisCause::kBelowBand ||
          diag.cause == DiagnosisCause::kBelowBaseline) {
        continue;
      }
      likely += (likely.empty() ? "" : ", ") + std::string(ToString(diag.cause)) + " (" +
                diag.detail + ")";
    }
    line += likely.empty() ? "; likely cause not visible to xferd" : "; likely: " + likely;
    problems.push_back(line);
  }
  if (problems.empty()) {
    return "ok: " + std::to_string(good) + "/" + std::to_string(total) + " within band" + notes;
  }
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : " | ") + p;
  return out;
}

BaselineSet HealthTracker::Snapshot() const {
  std::lock_guard lock(mutex_);
  BaselineSet out = restored_;  // series not seen since the restart are kept, not dropped
  for (const auto& [uuid, device] : devices_) {
    for (const auto& [key, state] : device.series) {
      if (state.medians.empty()) continue;
      const SeriesHealth& h = state.health;
      out[uuid][SeriesKey(h.mode, h.direction, h.size_bytes)] =
          std::vector<double>(state.medians.begin(), state.medians.end());
    }
  }
  return out;
}

void HealthTracker::Restore(const BaselineSet& baselines) {
  std::lock_guard lock(mutex_);
  const auto window = static_cast<std::size_t>(std::max(1, config_.baseline_window));
  restored_.clear();
  for (const auto& [uuid, series] : baselines) {
    for (const auto& [key, medians] : series) {
      std::vector<double> kept(medians);
      if (kept.size() > window) kept.erase(kept.begin(), kept.end() - static_cast<long>(window));
      // Series already live take the restored history; the rest wait for their first probe.
      bool applied = false;
      auto dev_it = devices_.find(uuid);
      if (dev_it != devices_.end()) {
        for (auto& [k, state] : dev_it->second.series) {
          if (SeriesKey(state.health.mode, state.health.direction, state.health.size_bytes) ==
              key) {
            state.medians.assign(kept.begin(), kept.end());
            applied = true;
          }
        }
      }
      if (!applied) restored_[uuid][key] = std::move(kept);
    }
  }
}

// ---- StateFile ------------------------------------------------------------------------

namespace {

constexpr const char* kStateName = "state.json";
constexpr const char* kTempPrefix = ".state.json.tmp.";

std::string UtcStamp(std::chrono::system_clock::time_point t, const char* format) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string Errno(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Parse and check the whole document; throws std::runtime_error naming what is wrong.
BaselineSet ParseBaselines(const nlohmann::json& doc) {
  if (!doc.contains("baselines") || !doc["baselines"].is_object()) {
    throw std::runtime_error("no \"baselines\" object");
  }
  BaselineSet out;
  for (const auto& [uuid, series] : doc["baselines"].items()) {
    if (!series.is_object()) throw std::runtime_error("baselines of " + uuid + " not an object");
    for (const auto& [key, medians] : series.items()) {
      if (!medians.is_array()) throw std::runtime_error(uuid + "/" + key + " not an array");
      std::vector<double> values;
      for (const auto& m : medians) {
        if (!m.is_number() || !std::isfinite(m.get<double>()) || m.get<double>() <= 0) {
          throw std::runtime_error(uuid + "/" + key +
                                   " holds a value that is not a positive "
                                   "number");
        }
        values.push_back(m.get<double>());
      }
      if (!values.empty()) out[uuid][key] = std::move(values);
    }
  }
  return out;
}

}  // namespace

StateFile::StateFile(std::filesystem::path dir) : dir_(std::move(dir)), path_(dir_ / kStateName) {}

StateLoad StateFile::Load(std::chrono::system_clock::time_point now) {
  namespace fs = std::filesystem;
  StateLoad out;
  std::error_code ec;

  // Temp files of a write that never reached its rename: the state file itself is whole.
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().filename().string().starts_with(kTempPrefix)) {
      std::error_code ignored;
      fs::remove(entry.path(), ignored);
    }
  }

  if (!fs::exists(path_, ec)) {
    out.outcome = StateLoad::Outcome::kFresh;
    return out;
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    const int err = errno;
    persisting_ = false;
    not_persisting_reason_ = "cannot read " + path_.string();
    out.outcome = StateLoad::Outcome::kUnreadable;
    out.message = "cannot read state file " + path_.string() + " (" + Errno(err) +
                  "): keeping it untouched and learning baselines in memory only; fix its "
                  "permissions (owner: the xferd user) and restart";
    return out;
  }
  std::stringstream text;
  text << in.rdbuf();

  std::string problem;
  try {
    const nlohmann::json doc = nlohmann::json::parse(text.str());
    if (!doc.is_object() || !doc.contains("version") || !doc["version"].is_number_integer()) {
      problem = "no integer \"version\"";
    } else {
      const int version = doc["version"].get<int>();
      if (version > kStateVersion) {
        persisting_ = false;
        not_persisting_reason_ = "state file from a newer xferd";
        out.outcome = StateLoad::Outcome::kFutureVersion;
        out.message = "state file " + path_.string() + " has version " + std::to_string(version) +
                      ", newer than this xferd understands (" + std::to_string(kStateVersion) +
                      "): keeping it untouched and learning baselines in memory only; upgrade "
                      "xferd, or move the file away to start fresh";
        return out;
      }
      if (version < 1) {
        problem = "version " + std::to_string(version) + " is not valid";
      } else {
        out.baselines = ParseBaselines(doc);
        out.outcome = StateLoad::Outcome::kLoaded;
        return out;
      }
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }

  // Corrupt or truncated: keep it for inspection, start fresh.
  fs::path aside = path_;
  aside += ".corrupt-" + UtcStamp(now, "%Y%m%dT%H%M%SZ");
  out.outcome = StateLoad::Outcome::kCorrupt;
  fs::rename(path_, aside, ec);
  if (ec) {
    out.message = "state file " + path_.string() + " is corrupt (" + problem +
                  ") and could not be moved aside (" + ec.message() +
                  "); starting fresh, it will be replaced on the next write";
  } else {
    out.message = "state file " + path_.string() + " is corrupt (" + problem + "); moved it to " +
                  aside.string() + " and started learning afresh";
  }
  return out;
}

StateWrite StateFile::Save(const BaselineSet& baselines,
                           std::chrono::system_clock::time_point now) {
  namespace fs = std::filesystem;
  StateWrite out;
  if (!persisting_) {
    out.ok = false;
    out.skipped = true;
    out.error = "not writing " + path_.string() + ": " + not_persisting_reason_;
    return out;
  }
  const std::string fix = "; make " + dir_.string() +
                          " writable by the xferd user (systemd: StateDirectory=xferd) or "
                          "point --state-dir / [daemon] state_dir elsewhere; baselines are "
                          "kept in memory meanwhile";

  nlohmann::json doc;
  doc["version"] = kStateVersion;
  doc["written_at"] = UtcStamp(now, "%Y-%m-%dT%H:%M:%SZ");
  nlohmann::json b = nlohmann::json::object();
  for (const auto& [uuid, series] : baselines) {
    for (const auto& [key, medians] : series) b[uuid][key] = medians;
  }
  doc["baselines"] = std::move(b);
  const std::string text = doc.dump(1) + "\n";

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    out.ok = false;
    out.error = "cannot create state directory " + dir_.string() + " (" + ec.message() + ")" + fix;
    return out;
  }

  std::string temp = (dir_ / kTempPrefix).string() + "XXXXXX";
  const int fd = mkstemp(temp.data());
  if (fd < 0) {
    const int err = errno;
    out.ok = false;
    out.error = "cannot create a temp file in " + dir_.string() + " (" + Errno(err) + ")" + fix;
    return out;
  }
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    out.ok = false;
    out.error = what + " " + temp + " (" + Errno(err) + ")" + fix;
    return out;
  };
  ::fchmod(fd, 0644);  // baselines are not secret; operators may read them
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write", errno);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("cannot fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    out.ok = false;
    out.error = "cannot close " + temp + " (" + Errno(err) + ")" + fix;
    return out;
  }
  if (::rename(temp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    out.ok = false;
    out.error = "cannot rename " + temp + " to " + path_.string() + " (" + Errno(err) + ")" + fix;
    return out;
  }
  // The rename is durable only once the directory entry is.
  const int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return out;
}

}  // namespace xferd::core
