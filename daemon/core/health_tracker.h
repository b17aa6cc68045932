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
#include "core/freshness.h"
#include "core/host_groups.h"
#include "core/plan.h"
#include "core/settings.h"
#include "core/state_file.h"

namespace xferd::core {

// A baseline is learned from healthy readings of distinct cycles (never a confirmation
// round's, never one judged bad). Readings are held to it from its second reading on (a
// drop in a GPU's first cycles is caught), and it counts as the series' own, exported and
// no longer checked against its peers, from its fifth.
inline constexpr int kProvisionalBaselineCycles = 2;
inline constexpr int kMinBaselineCycles = 5;

// The verdict rolled up per (mode, direction): degraded when any size is, else stale when
// any size is.
struct PairVerdict {
  probes::TransferMode mode = probes::TransferMode::kPinned;
  probes::Direction direction = probes::Direction::kH2D;
  bool degraded = false;
  bool stale = false;    // no current reading of some size, none degraded: not known
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
  std::vector<Diagnosis> diagnoses;   // the causes that hold after the last cycle, ranked
  // The GPU's shape as last observed (confidential computing, MIG) and, when it cannot be
  // judged at all, why (probes::UnjudgeableReason): its verdict is then unknown.
  probes::ConfidentialComputing cc;
  probes::MigState mig;
  std::string unjudgeable;
  // Any (mode, direction) degraded, or a flapping link (link_flapping).
  bool Degraded() const;
  // Not degraded, and it cannot be judged as it is (`unjudgeable`): verdict unknown. A
  // fault seen without a probe (a flapping link) still makes it degraded.
  bool Unknown() const;
  // Not degraded nor unknown, and a headline series has no current reading: the GPU went
  // unmeasured (busy, the cycle budget, failing probes), so its verdict is not known.
  bool Stale() const;
  int StaleSeries() const;  // series with no current reading
  bool Has(DiagnosisCause cause) const;
};

std::string SeriesKey(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes);

// The shape a GPU's readings are taken in, where it changes what they can be: "" for a
// plain GPU; "cc" with confidential computing on (bounce-buffered copies); "mig-3ce" for a
// MIG GPU probed through instances of 3 copy engines ("mig" when their count is unknown);
// "cc+mig-3ce" for both. Readings of two shapes are not comparable: a baseline learns and
// judges one shape only (its key in the state file carries it: "pinned/h2d/64MiB@cc"), and
// peers are GPUs of the same model, link and shape (docs/health.md).
std::string ReadingShape(const probes::DeviceInfo& device);
// The state file's key of a series' baseline in `shape`: SeriesKey, then "@shape" unless
// the shape is plain.
std::string BaselineKey(probes::TransferMode mode, probes::Direction direction,
                        std::uint64_t size_bytes, const std::string& shape);

// The degraded series that is most severe: below its band before below its baseline, a
// link-bound mode before a host-bound one, then the largest shortfall; a degraded series
// whose last reading was good again comes last. The headline of the STATUS line, the
// status API, `xferd health` and the incident log. nullptr when no series is degraded.
const SeriesHealth* WorstDegraded(const DeviceHealth& health);

// The cause a degraded GPU's verdict names first (the drain reason's, the incident's): the
// highest-ranked fault among its causes (CauseRank; a note never), else the reading of its
// worst series (below_band, below_baseline); link_flapping for a GPU degraded by its link
// alone (no series low); nullopt when it is not degraded.
std::optional<DiagnosisCause> LeadingCause(const DeviceHealth& health);

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

  // Time passing between cycles: each GPU's readings judged again at `now` (a DEGRADED
  // verdict whose bad reading grew too old, a reading past its bound: core/freshness.h),
  // so a cleared fault reads ok, and an unmeasured GPU stale, when the bound says, not at
  // the next cycle. Returns the GPUs whose verdict changed. NextExpiry: the earliest moment
  // one of them would (nullopt: none pending).
  std::vector<DeviceHealth> Expire(SteadyTime now);
  std::optional<SteadyTime> NextExpiry() const;

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

  // One line for sd_notify STATUS and the log: "ok: 13/13 within band" (", 2 stale" when
  // some have no current reading; plus causes that hold on a healthy device: "; gpu0
  // capability_mismatch (...)"), "STALE gpu1: not measured for 4m (...)" for a GPU gone
  // unmeasured, or "DEGRADED gpu0 pinned h2d 12.1 GB/s < 20.0 GB/s band; likely:
  // link_downtrained (...)", the causes ranked (LeadingCause first, notes never).
  std::string Summary() const;

  std::vector<DeviceHealth> Devices() const;

  BaselineSet Snapshot() const;
  void Restore(const BaselineSet& baselines);

 private:
  struct SeriesState {
    std::deque<double> medians;  // recent learned cycle medians, oldest first
    SeriesHealth health;
    bool degraded = false;               // the verdict with hysteresis, before freshness
    std::optional<SteadyTime> last_bad;  // when its last bad reading was taken
    std::optional<SteadyTime> since;     // when the tracker first knew of it
    bool probed = false;                 // a probe of it came back (any outcome)
  };
  using Key = ProbeKey;
  static std::string KeyText(const Key& key, const std::string& shape) {
    return BaselineKey(std::get<0>(key), std::get<1>(key), std::get<2>(key), shape);
  }
  struct Reading {
    bool below_band = false, below_baseline = false;
    double peers = 0;  // the peers' baseline it fell under (0: it did not, or none)
    bool Bad() const { return below_band || below_baseline; }
  };
  struct DeviceState {
    DeviceHealth last;
    std::string name;                     // the GPU model: who its peers are
    double link_rate = 0;                 // and on which link (HostLinkRate)
    std::string shape;                    // and in which shape (ReadingShape)
    std::optional<SteadyTime> judged_at;  // when freshness was last judged (Refresh)
    std::map<Key, SeriesState> series;
    // Causes from concurrent runs, per (group, direction); nullopt: the last run showed none.
    std::map<std::pair<std::string, probes::Direction>, std::optional<Diagnosis>> concurrent;
  };
  // The one rule a reading is judged by (mutex_ held): the mode's band, and drift against
  // the series' learned baseline (from its second reading) and, while that learns, its
  // peers' (PeerBaseline).
  Reading JudgeReading(const DeviceState& device, const Key& key, const ExpectedBand& band,
                       const SeriesState& state, const probes::ProbeSample& sample) const;
  // The median of the baselines of `key` on the other GPUs of the same model on the same
  // link, in the same shape, of this host (each resting on at least one reading); 0 when
  // there is none.
  double PeerBaseline(const DeviceState& device, const Key& key) const;

  // Observe's jobs, in order (mutex_ held):
  // Readings of another shape than the device's series learned in (ReadingShape): each
  // series starts over, what it learned kept under its shape's key.
  void Reshape(DeviceState& device, const std::string& uuid, const std::string& shape);
  // The series of `key` on the device, created on its first reading (or when the plan
  // names it) with what the state file held for it.
  SeriesState& SeriesOf(DeviceState& device, const std::string& uuid, const Key& key,
                        const CycleObservation& obs);
  // One reading folded into its series: judged (JudgeReading), counted toward its verdict
  // and learned into its baseline when it may be (healthy, not a confirmation round's, the
  // GPU not busy); failed and contended readings are neither.
  void Fold(DeviceState& device, const Key& key, SeriesState& state,
            const probes::ProbeSample& sample, const CycleObservation& obs);
  // The streaks and the verdict with hysteresis: consecutive_bad readings in a row flip it.
  void Count(SeriesState& state) const;
  // A healthy reading into the baseline's window.
  void Learn(SeriesState& state, double median) const;
  // How old each series' reading is at `at` (core/freshness.h): current, degraded only on
  // a current bad reading, stale past its bound.
  void Refresh(DeviceState& device, const std::optional<SteadyTime>& at);
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
