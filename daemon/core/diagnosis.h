// What one cycle saw on a GPU, what it made of each series, and the likely causes of a low
// reading that the daemon can see (link, NUMA, IOMMU, staging, a busy GPU). The cause
// names are labels of xferd_diagnosis: alerts and dashboards match on them.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/band.h"
#include "core/clock.h"
#include "core/link_errors.h"
#include "core/link_watch.h"
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
  kGpuBusy,              // "gpu_busy": the busy detector saw other work before the probes
  kBelowBand,            // "below_band": a link-bound mode under the band's lower bound
  kBelowBaseline,        // "below_baseline": a mode under drift_fraction x its baseline
  kSharedUplink,         // "shared_uplink": far below solo while the GPUs behind its switch
                         // move data, because they share the switch's uplink
  kLinkShared,           // "link_shared": foreign traffic on the link during a probe
  kCapabilityMismatch,   // "capability_mismatch": the GPU can do more than its path allows
  kLinkErrors,           // "link_errors": the path's error counters grew around a low reading
  kLinkFlapping,         // "link_flapping": a link on the path flapped between probes
};
inline constexpr std::array<DiagnosisCause, 12> kAllDiagnosisCauses = {
    DiagnosisCause::kLinkDowntrained,  DiagnosisCause::kNumaRemote,
    DiagnosisCause::kIommuTranslating, DiagnosisCause::kPinnedPageableRatio,
    DiagnosisCause::kGpuBusy,          DiagnosisCause::kBelowBand,
    DiagnosisCause::kBelowBaseline,    DiagnosisCause::kSharedUplink,
    DiagnosisCause::kLinkShared,       DiagnosisCause::kCapabilityMismatch,
    DiagnosisCause::kLinkErrors,       DiagnosisCause::kLinkFlapping};
std::string_view ToString(DiagnosisCause cause);
std::optional<DiagnosisCause> ParseDiagnosisCause(std::string_view label);

// Which causes name a fault and which are standing notes, and which leads: the one rule
// the STATUS line, the status API, `xferd health` (the drain reason, the NPD condition) and
// the incident log rank causes by (docs/health.md, "Which cause leads").
//   - A note is a cause the docs call "not a fault": capability_mismatch (the slot caps the
//     GPU), shared_uplink (GPUs sharing a switch's uplink), link_shared (another process's
//     traffic: those readings were set aside), gpu_busy (nothing was measured). A note never
//     leads a verdict; it is listed after the faults.
//   - Faults rank by how directly they explain a low reading: a link that trained down,
//     then one that flaps between probes (link_flapping: a fault even when every reading
//     is within band), then one erring, the IOMMU translating, buffers on the far NUMA node, the
//     pinned/pageable ratio; then the reading itself: below_band before below_baseline.
bool IsNote(DiagnosisCause cause);
int CauseRank(DiagnosisCause cause);  // lower leads; every note ranks after every fault
// `causes` ordered by CauseRank (stable).
void RankCauses(std::vector<struct Diagnosis>& causes);

// The pinned/pageable h2d ratio outside which kPinnedPageableRatio fires. The usual figure
// is 2-4x; the window is wider because pageable copies vary with the host's memory system
// (the H200 test box shows 8.5x: see docs/health.md), and a false cause is worse than none.
inline constexpr double kPinnedPageableRatioLow = 1.5;
inline constexpr double kPinnedPageableRatioHigh = 10.0;

struct Diagnosis {
  DiagnosisCause cause;
  std::string detail;  // "0000:00:01.0 Gen4 x8, max Gen4 x16": short, for STATUS lines
  std::string advice;  // a sentence naming what to check
};

// What one cycle saw on one GPU.
struct CycleObservation {
  probes::DeviceInfo device;
  probes::LinkPath link_path;  // read while probing (idle links train down)
  // Modes not probed this cycle are left out; a series may appear more than once (fast
  // confirmation re-measures it), in the order measured.
  std::vector<probes::ProbeSample> samples;
  bool busy = false;  // the busy detector said busy before the probes: none ran
  // The node the probe's host buffers are on; -1 = take it from the samples'
  // host_numa_node (the backend's finding), else unknown.
  int host_numa_node = -1;
  // What the path's error counters grew by around this cycle (core/link_errors.h); empty
  // when they were not read.
  LinkErrorGrowth link_errors = {};
  // The counters as read and judged this cycle (what the growth is of); nullopt when they
  // were not read. Kept with an incident's evidence (core/evidence.h).
  std::optional<LinkErrorReading> link_error_reading = {};
  // When it was taken (the scheduler's clock) and the host's time then: what the age of
  // each reading is counted from (core/freshness.h). nullopt: no clock (a one-shot run):
  // every reading counts as current.
  std::optional<SteadyTime> at;
  std::chrono::system_clock::time_point at_wall{};
  // A fast-confirmation round, not a cycle: its readings judge, never teach a baseline.
  bool confirmation = false;
  // The GPU's planned probes: series known before their first reading (and stale when the
  // rotation does not reach them in time). Empty: the series measured so far.
  std::vector<probes::ProbeSpec> planned;
  // What the link watch saw between probes over its last window (core/link_watch.h);
  // empty when it does not watch.
  LinkWatchState link_watch = {};
};

// One (mode, direction, size) series after a cycle.
struct SeriesHealth {
  probes::TransferMode mode = probes::TransferMode::kPinned;
  probes::Direction direction = probes::Direction::kH2D;
  std::uint64_t size_bytes = 0;
  probes::ProbeStatus status = probes::ProbeStatus::kOk;  // of the last probe
  double median_bytes_per_s = 0;    // the last judged probe's median; 0 before any
  double baseline_bytes_per_s = 0;  // 0 until learned
  int baseline_cycles = 0;          // cycles the baseline rests on
  bool below_band = false;          // its last reading this cycle
  bool below_baseline = false;      // its last reading this cycle
  bool contended = false;           // its last reading this cycle shared the link
  int bad_streak = 0, good_streak = 0;
  // The verdict, with hysteresis, resting on a current bad reading (FreshnessBounds): a
  // series whose readings are too old is `stale`, never degraded.
  bool degraded = false;
  // No current reading: its verdict is not known (core/freshness.h). Never degraded.
  bool stale = false;
  bool headline = false;  // a headline probe (measured every cycle)
  // While its own baseline rests on fewer than kMinBaselineCycles readings it is held to
  // its peers' too (the same GPU model on the same link, on this host): their baseline
  // when its last reading fell under it; 0 otherwise.
  double peer_baseline_bytes_per_s = 0;
  // When its last judged reading was taken (the scheduler's clock and the host's); nullopt
  // before the first.
  std::optional<SteadyTime> measured_at;
  std::optional<std::chrono::system_clock::time_point> measured_wall;
  bool Bad() const { return below_band || below_baseline; }
  // The baseline its last reading is held to: its peers' where it fell under theirs while
  // learning, else its own (0 before any).
  double BaselineReference() const {
    return peer_baseline_bytes_per_s > 0 ? peer_baseline_bytes_per_s : baseline_bytes_per_s;
  }
};

// What one more reading of a series would do to its verdict: `readings` more readings
// like the last one (after it counts) flip it, toward degraded or back to ok; 0 = none
// pending. Fast confirmation re-measures while readings > 0.
struct FlipAhead {
  int readings = 0;
  bool to_degraded = false;
  // The series after this reading: degraded, or the reading was bad. The scheduler
  // re-measures such a series every cycle (ahead of the rotation) until it clears.
  bool watch = false;
  bool degraded = false;
};

// The causes one cycle shows on one device: `observed` are the series this cycle measured
// (their below_band / below_baseline already judged), `band` the device's expected band.
std::vector<Diagnosis> Diagnose(const CycleObservation& observation, const ExpectedBand& band,
                                const std::vector<const SeriesHealth*>& observed,
                                double drift_fraction);

// "12.1 GB/s"; "pinned h2d"; a series' reading as the band sees it ("45.0 GB/s per
// direction" for both ways at once): the words of STATUS lines and causes.
std::string FormatGBps(double bytes_per_s);
std::string PairName(probes::TransferMode mode, probes::Direction direction);
std::string BandReading(const SeriesHealth& series);

}  // namespace xferd::core
