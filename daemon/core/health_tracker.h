// Health: baselines learned from recent cycles, drift and band verdicts with hysteresis,
// and the causes that explain a low reading. How it works: docs/health.md.
//
// Use (the service, once per cycle and GPU):
//   HealthTracker health(settings);
//   health.Restore(state.Load(now).baselines);
//   ... each cycle, per GPU:
//   const DeviceHealth h = health.Observe(observation);   // metrics.RecordHealth(h)
//   ... after the cycle:
//   state.Save(health.Snapshot(), now);  sd_notify("STATUS=" + health.Summary());
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/band.h"
#include "core/diagnosis.h"
#include "core/host_groups.h"
#include "core/settings.h"
#include "core/state_file.h"

namespace xferd::core {

// Cycles a baseline needs before drift against it counts.
inline constexpr int kMinBaselineCycles = 5;

// The verdict rolled up per (mode, direction): degraded when any size is.
struct PairVerdict {
  probes::TransferMode mode = probes::TransferMode::kPinned;
  probes::Direction direction = probes::Direction::kH2D;
  bool degraded = false;
  bool changed = false;  // flipped in the cycle just observed: worth a log line with advice
};

// The band of a (mode, direction) held to its own share of its GPU's band (HasOwnBand).
struct PairBand {
  probes::TransferMode mode = probes::TransferMode::kPinned;
  probes::Direction direction = probes::Direction::kH2D;
  ExpectedBand band;
};

struct DeviceHealth {
  int gpu = 0;
  std::string uuid;
  ExpectedBand band;
  // Of each pair the config probes that has a band of its own (OwnBandPairs), in plan
  // order: exported beside `band`.
  std::vector<PairBand> pair_bands;
  std::vector<SeriesHealth> series;   // every series seen, ordered
  std::vector<PairVerdict> verdicts;  // every (mode, direction) seen, ordered
  std::vector<Diagnosis> diagnoses;   // the causes that hold after the last cycle
  // The GPU's shape as last observed (confidential computing, MIG) and, when it cannot be
  // judged at all, why (probes::UnjudgeableReason): its verdict is then unknown.
  probes::ConfidentialComputing cc;
  probes::MigState mig;
  std::string unjudgeable;
  bool Degraded() const;
  bool Has(DiagnosisCause cause) const;
};

std::string SeriesKey(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes);

// The degraded series furthest below what it should be (below its band first, then the
// largest shortfall against its baseline): the headline of the STATUS line, the status API
// and `xferd health`. nullptr when no series is degraded.
const SeriesHealth* WorstDegraded(const DeviceHealth& health);

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

  // Fold a concurrent run in: the shared_uplink causes it shows hold for its members
  // (alongside what Observe finds) until the next run of that group and direction.
  void ObserveConcurrent(const GroupRun& run);

  // How many more readings of `sample`'s series, each like this one, would flip its verdict
  // once this one counts: > 0 when this reading starts or continues a streak toward a flip
  // (bad on a healthy series, good on a degraded one) short of consecutive_bad; 0 otherwise
  // (it flips now, moves nothing, or cannot be judged: failed or contended). What fast
  // confirmation asks after each reading. Judged as Observe will, without changing state.
  FlipAhead ReadingsToFlip(const probes::DeviceInfo& device, const probes::LinkPath& path,
                           const probes::ProbeSample& sample) const;

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
  static std::string KeyText(const Key& key) {
    return SeriesKey(std::get<0>(key), std::get<1>(key), std::get<2>(key));
  }
  struct Reading {
    bool below_band = false, below_baseline = false;
    bool Bad() const { return below_band || below_baseline; }
  };
  // The one rule a reading is judged by: the mode's band, and drift against the series'
  // learned history.
  static Reading JudgeReading(const Settings& config, const ExpectedBand& band,
                              const SeriesState& state, const probes::ProbeSample& sample);
  struct DeviceState {
    DeviceHealth last;
    std::map<Key, SeriesState> series;
    // Causes from concurrent runs, per (group, direction); nullopt: the last run showed none.
    std::map<std::pair<std::string, probes::Direction>, std::optional<Diagnosis>> concurrent;
  };

  // Observe's jobs, in order (mutex_ held):
  // The series of `key` on the device, created on its first reading with what the state
  // file held for it.
  SeriesState& SeriesOf(DeviceState& device, const std::string& uuid, const Key& key);
  // One reading folded into its series: judged (JudgeReading), counted toward its verdict
  // and learned into its baseline unless the cycle was busy; failed and contended readings
  // are neither.
  void Fold(SeriesState& state, const probes::ProbeSample& sample, const ExpectedBand& band,
            bool busy);
  // The streaks and the verdict with hysteresis: consecutive_bad readings in a row flip it.
  void Count(SeriesHealth& health) const;
  // A healthy reading into the baseline's window.
  void Learn(SeriesState& state, double median) const;
  // Every series of the device into `last`, and their verdicts rolled up per pair.
  static void Publish(DeviceState& device);
  // The causes that hold after the cycle: what it shows, and what the concurrent runs did.
  void Explain(DeviceState& device, const CycleObservation& observation,
               const std::vector<Key>& observed) const;

  mutable std::mutex mutex_;
  Settings config_;
  std::map<std::string, DeviceState> devices_;  // by UUID
  BaselineSet restored_;                        // loaded, not yet matched to a series
};

}  // namespace xferd::core
