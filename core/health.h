// Health: the expected band per GPU, baselines learned from recent cycles, drift verdicts
// with hysteresis, and the diagnosis that explains a low reading. Also the state file that
// keeps the baselines across restarts.
//
// Use (the service, once per cycle and GPU):
//   HealthTracker health(config);
//   StateFile state(config.state_dir);
//   StateLoad loaded = state.Load(now);          // log loaded.message when not empty
//   health.Restore(loaded.baselines);
//   ... each cycle, per GPU:
//   const DeviceHealth& h = health.Observe(observation);   // metrics.RecordHealth(dev, h)
//   ... after the cycle:
//   StateWrite w = state.Save(health.Snapshot(), now);     // !w.ok: log w.error, count it
//   sd_notify("STATUS=" + health.Summary());
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/settings.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// Likely causes of a low reading, from what the daemon can see. The label values
// (ToString) are stable: alerts and dashboards match on them.
enum class DiagnosisCause {
  kLinkDowntrained,      // "link_downtrained": a link on the path runs below its maximum
  kNumaRemote,           // "numa_remote": host buffers on another NUMA node than the GPU
  kIommuTranslating,     // "iommu_translating": IOMMU in DMA mode while bandwidth is low
  kPinnedPageableRatio,  // "pinned_pageable_ratio": pinned/pageable h2d outside 1.5-6x
  kGpuBusy,              // "gpu_busy": the busy detector saw other work during the probe
  kBelowBand,            // "below_band": a link-bound mode under the band's lower bound
  kBelowBaseline,        // "below_baseline": a mode under drift_fraction x its baseline
};
inline constexpr std::array<DiagnosisCause, 7> kAllDiagnosisCauses = {
    DiagnosisCause::kLinkDowntrained,  DiagnosisCause::kNumaRemote,
    DiagnosisCause::kIommuTranslating, DiagnosisCause::kPinnedPageableRatio,
    DiagnosisCause::kGpuBusy,          DiagnosisCause::kBelowBand,
    DiagnosisCause::kBelowBaseline};
std::string_view ToString(DiagnosisCause cause);

// The pinned/pageable h2d ratio outside which kPinnedPageableRatio fires. The usual figure
// is 2-4x; the window is wider because pageable copies vary with the host's memory system
// (the H200 test box shows 8.5x: see docs/health.md), and a false cause is worse than none.
inline constexpr double kPinnedPageableRatioLow = 1.5;
inline constexpr double kPinnedPageableRatioHigh = 10.0;

// Smaller transfers are dominated by their fixed latency (a few us), not the link: they are
// judged against their baseline only (as `xferd probe` does). At 4 MiB the floor costs
// under 5% even on Gen5 x16.
inline constexpr std::uint64_t kBandMinSizeBytes = 4ull << 20;

// Cycles a baseline needs before drift against it counts.
inline constexpr int kMinBaselineCycles = 5;

struct Diagnosis {
  DiagnosisCause cause;
  std::string detail;  // "0000:00:01.0 Gen4 x8, max Gen4 x16": short, for STATUS lines
  std::string advice;  // a sentence naming what to check
};

// What one cycle saw on one GPU.
struct CycleObservation {
  probes::DeviceInfo device;
  probes::LinkPath link_path;                // read while probing (idle links train down)
  std::vector<probes::ProbeSample> samples;  // modes not probed this cycle are left out
  bool busy = false;                         // the busy detector said busy during the probes
  // The node the probe's host buffers are on; -1 = take it from the samples'
  // host_numa_node (the backend's finding), else unknown.
  int host_numa_node = -1;
};

// One (mode, direction, size) series after a cycle.
struct SeriesHealth {
  probes::TransferMode mode = probes::TransferMode::kPinned;
  probes::Direction direction = probes::Direction::kH2D;
  std::uint64_t size_bytes = 0;
  probes::ProbeStatus status = probes::ProbeStatus::kOk;  // of the last probe
  double median_bytes_per_s = 0;    // the last ok probe's median; 0 before any
  double baseline_bytes_per_s = 0;  // 0 until learned
  int baseline_cycles = 0;          // cycles the baseline rests on
  bool below_band = false;          // this cycle
  bool below_baseline = false;      // this cycle
  int bad_streak = 0, good_streak = 0;
  bool degraded = false;  // the verdict, with hysteresis
  bool Bad() const { return below_band || below_baseline; }
};

// The verdict rolled up per (mode, direction): degraded when any size is.
struct PairVerdict {
  probes::TransferMode mode = probes::TransferMode::kPinned;
  probes::Direction direction = probes::Direction::kH2D;
  bool degraded = false;
  bool changed = false;  // flipped in the cycle just observed: worth a log line with advice
};

struct DeviceHealth {
  int gpu = 0;
  std::string uuid;
  probes::ExpectedBand band;
  std::vector<SeriesHealth> series;   // every series seen, ordered
  std::vector<PairVerdict> verdicts;  // every (mode, direction) seen, ordered
  std::vector<Diagnosis> diagnoses;   // the causes that hold after the last cycle
  bool Degraded() const;
  bool Has(DiagnosisCause cause) const;
};

// Learned cycle medians per GPU UUID and series key ("pinned/h2d/64MiB"), oldest first:
// what the state file holds.
using BaselineSet = std::map<std::string, std::map<std::string, std::vector<double>>>;
std::string SeriesKey(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes);

// The expected band of one GPU: a config override (matched by index or UUID) else the
// band of its narrowest PCIe link with the config's fractions.
probes::ExpectedBand ResolveBand(const Settings& config, const probes::DeviceInfo& device,
                                 const probes::LinkPath& path);

// The causes one cycle shows without any history (no baseline): for one-shot runs such as
// `xferd probe`, whose table can print each cause's detail and advice.
std::vector<Diagnosis> DiagnoseOnce(const Settings& config, const CycleObservation& observation);

// Thread-safe: Observe from the probe loop, Summary/Devices from anywhere.
class HealthTracker {
 public:
  explicit HealthTracker(const Settings& config);

  // A reloaded config: thresholds and bands change, what was learned stays.
  void Reconfigure(const Settings& config);

  // Fold one cycle of one GPU in; returns that GPU's health after it.
  DeviceHealth Observe(const CycleObservation& observation);

  // The learned baseline of a series in bytes/s (0 when not yet learned).
  double Baseline(const std::string& uuid, probes::TransferMode mode, probes::Direction direction,
                  std::uint64_t size_bytes) const;

  // One line for sd_notify STATUS and the log: "ok: 13/13 within band" (plus causes that
  // hold on a healthy device: "; gpu0 link_downtrained (...)") or
  // "DEGRADED gpu0 pinned h2d 12.1 GB/s < 20.0 GB/s band; likely: link_downtrained (...)".
  std::string Summary() const;

  std::vector<DeviceHealth> Devices() const;

  BaselineSet Snapshot() const;
  void Restore(const BaselineSet& baselines);

 private:
  struct SeriesState {
    std::deque<double> medians;  // recent learned cycle medians, oldest first
    SeriesHealth health;
  };
  using Key = std::tuple<probes::TransferMode, probes::Direction, std::uint64_t>;
  struct DeviceState {
    DeviceHealth last;
    std::map<Key, SeriesState> series;
  };

  mutable std::mutex mutex_;
  Settings config_;
  std::map<std::string, DeviceState> devices_;  // by UUID
  BaselineSet restored_;                        // loaded, not yet matched to a series
};

// ---- The state file: <state_dir>/state.json ----------------------------------------------

inline constexpr int kStateVersion = 1;

struct StateLoad {
  enum class Outcome {
    kFresh,          // no file: start learning
    kLoaded,         // read back
    kCorrupt,        // unparsable or truncated: moved aside, start fresh
    kFutureVersion,  // written by a newer xferd: kept untouched, persisting is off
    kUnreadable,     // exists but cannot be read (permissions): kept, persisting is off
  };
  Outcome outcome = Outcome::kFresh;
  BaselineSet baselines;
  std::string message;  // what happened and the fix; empty for kFresh/kLoaded
};

struct StateWrite {
  bool ok = true;
  bool skipped = false;  // persisting is off (future version / unreadable file)
  std::string error;     // what failed and the fix
};

class StateFile {
 public:
  explicit StateFile(std::filesystem::path dir);

  const std::filesystem::path& path() const { return path_; }

  // Read the file; never throws. `now` names a corrupt file moved aside.
  StateLoad Load(std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

  // Atomic write: temp file in the same directory, write, fsync, rename, fsync the
  // directory. On failure the old file stays whole and the caller keeps its data.
  StateWrite Save(const BaselineSet& baselines,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

  bool persisting() const { return persisting_; }

 private:
  std::filesystem::path dir_;
  std::filesystem::path path_;
  bool persisting_ = true;
  std::string not_persisting_reason_;
};

}  // namespace xferd::core
