// The expected band: what a GPU's link should carry, and the rules that hold a result to
// it. Every band xferd shows or judges by comes from here: `xferd probe` (its verdict
// column), `xferd run` (below_band, the verdict, the diagnosis, the exported band series),
// `xferd probe --concurrent` and the concurrent groups (a group's aggregate band), and
// check-config's plan. probes/ only says what the hardware is (the path, each link's rate,
// whether a mode is bounded by the host rather than the link); the band is decided here.
//
// Each rule has one place, the one to change when the rule changes:
//   the rate a band is a share of ........ BandRate (one link), HostLinkRate (a GPU's path)
//   a GPU's band ......................... ResolveBand (an override, else BandFromPath)
//   each mode's share of the band ........ ProfileOf (one table: band_scale, and the
//                                          smallest size held, for modes whose small
//                                          transfers are bounded by per-copy overhead)
//   which results the band holds ......... HoldOf (size, per-copy cost on the link, a figure
//                                          on NVLink-C2C); BandExempt and HasOwnBand (of the
//                                          pairs probed: OwnBandPairs) for the series
//                                          exported beside them
//   the verdict .......................... JudgeBand (per direction, ModeBand's lower bound)
//   a concurrent group's band ............ GroupBand, AggregateHeldToBand
// Figures: docs/health.md ("Per-mode bands") and docs/gpu-results.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/settings.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::core {

struct HostGroup;

// ---- What a band is a share of ------------------------------------------------------------

// What one PCIe link carries per direction when healthy: the lower of its two ends'
// maxima (a Gen5 GPU in a Gen4 slot is held to the slot); this end's alone when the path
// has no other end (a GPU on a virtual machine's root bus). 0 when a maximum on the path
// cannot be read.
double CapabilityRate(const probes::PcieLink& link);

// The per-direction rate of one PCIe link that bands are a share of: its CapabilityRate,
// not the rate it trained to, so a link trained down (from the start or later) reads below
// its band and link_downtrained names the cause; links that slow down at idle to save
// power do not move it. Where the capability is unknown, the rate the link trained to
// (said once in the log, and in the band's source).
double BandRate(const probes::PcieLink& link);

// The rate of a GPU's way to host memory that its band is a share of: NVLink-C2C's rate for
// a C2C path, else the lowest BandRate on its PCIe path; 0 when none is known (an integrated
// GPU, an unreadable path). Also what `xferd probe`'s "% link" column divides by.
double HostLinkRate(const probes::LinkPath& path);

// ---- A GPU's band -------------------------------------------------------------------------

struct ExpectedBand {
  double lower_bytes_per_s = 0;
  double upper_bytes_per_s = 0;
  // "config", "link Gen4 x16 at 0000:00:01.0" (what it can carry; ", trained Gen4 x4" when
  // it runs below that), "link Gen4 x4 as trained at ... (maximum unreadable)", "unknown: ..."
  std::string source;
  // What each mode's share of the band follows from (BandHold): the rate and kind of the
  // link the band is a share of (BandFromPath; 0 where none is known), and the chunk
  // pinned_async copies in (ResolveBand, from the settings; 0 = not known).
  double link_bytes_per_s = 0;
  bool c2c = false;
  std::uint64_t chunk_bytes = 0;
  // Confidential computing on (ResolveBand): copies are bounce-buffered, the link's band
  // does not apply; lower/upper are a published CC figure's where one exists (CcFigureOf),
  // else unknown, and HoldOf holds only what that figure grounds.
  bool confidential = false;
  // A MIG GPU probed through instances that own fewer copy engines than the whole GPU
  // (ResolveBand): no measured figure says they fill the link; no band (lower and upper 0,
  // the source says why), each mode held to its baseline.
  bool few_copy_engines = false;
  bool Known() const { return upper_bytes_per_s > 0; }
};

// A published host<->device figure of a GPU model in confidential-computing mode: what
// grounds holding its pinned copies to a share under CC (docs/health.md names each source).
struct CcFigure {
  std::string_view model;  // matched in the GPU's name
  double h2d_bytes_per_s = 0, d2h_bytes_per_s = 0;
  std::string_view source;
};
// The figure for `device_name`, nullptr when none is published.
const CcFigure* CcFigureOf(std::string_view device_name);

// [lower_fraction, upper_fraction] x HostLinkRate(path), named after the link it follows
// (the seed's 20-26 GB/s for Gen4 x16 at 0.63-0.83; an NVLink-C2C path's 284-374 GB/s).
// Unknown (zeros, the source says why) when no rate is known.
ExpectedBand BandFromPath(const probes::LinkPath& path, double lower_fraction,
                          double upper_fraction);

// The expected band of one GPU: a [[health.band]] naming it (by index or UUID, any case),
// else, with confidential computing on, the CC band (a published figure x drift_fraction,
// or none: baselines only), else BandFromPath with the settings' fractions. It is the band
// of pinned copies; ModeBand gives each mode's. A MIG GPU's is its link's, marked
// few_copy_engines where its instances cannot be shown to fill it.
ExpectedBand ResolveBand(const Settings& settings, const probes::DeviceInfo& device,
                         const probes::LinkPath& path);

// ---- Each mode's share of it --------------------------------------------------------------

// Smaller transfers are dominated by their fixed latency (a few us), not the link: they are
// judged against their baseline only. At 4 MiB the floor costs under 5% even on Gen5 x16.
inline constexpr std::uint64_t kBandMinSizeBytes = 4ull << 20;

// `size_bytes` scaled to a link of `link_bytes_per_s` against one of `reference_bytes_per_s`
// (so that a transfer takes as long on it): in whole MiB, rounded down, never under
// kBandMinSizeBytes nor over `size_bytes`. A size of kBandMinSizeBytes or less, a link as
// fast as the reference or faster, or one of unknown rate (0) leave it as it is. The one
// rule behind BandMinSize and PlannedSize (core/plan.h).
std::uint64_t ScaledToLink(std::uint64_t size_bytes, double link_bytes_per_s,
                           double reference_bytes_per_s);

// What each (mode, direction) reaches on healthy hardware, in one table: how far the band
// holds it, and how fast it moves data for a cost estimate.
struct ModeProfile {
  // The share of the GPU's band (the band of pinned copies) a link-bound mode is held to:
  // 1 = the band as it is. managed_prefetch h2d reads 62-71 % of the link on healthy
  // H200s against pinned's 87 %, so the band's 0.63 would sit on its normal spread.
  double band_scale = 1.0;
  // A conservative share of the link's current rate it moves data at, warm-up, page
  // migrations and checks included: an unmeasured probe's device time is estimated from
  // it, so the allowance saves up enough before running it for the first time.
  double cost_fraction = 0.05;
  // The smallest transfer the band holds this mode at on PCIe Gen5 x16, where the figures
  // come from: kBandMinSizeBytes, or more where the mode's share of the link was only
  // measured at larger sizes. managed_prefetch h2d read 27.8-36.0 GB/s at 16 MiB on a
  // healthy H200 (44-57 % of the link, under its band) and 38.9-45.0 at 64 MiB: smaller
  // sizes are held to their baseline only. Those figures fit a fixed cost of ~165 us per
  // transfer beside the link's rate, so on a slower link the size that takes as long is
  // held (BandMinSize): 32 MiB on Gen4 x16, 4 MiB on Gen3 x4.
  std::uint64_t band_min_size_bytes = kBandMinSizeBytes;
  // A mode that moves its data in chunks of its own (pinned_async) pays a fixed cost per
  // copy on top of the link: per_copy_s per chunk, while the bytes stream at copy_share of
  // the link (pinned's). 0 = no per-copy cost beyond the fixed latency band_min_size_bytes
  // already covers. How much of the link it reaches then follows from the link's rate and
  // the chunk (ExpectedLinkShare).
  double per_copy_s = 0;
  double copy_share = 0;
  // Whether a healthy figure of this (mode, direction) over NVLink-C2C exists to hold it
  // to the band there; without one it keeps its baseline only (docs/health.md).
  bool c2c_figure = false;
};
const ModeProfile& ProfileOf(probes::TransferMode mode, probes::Direction direction);

// PCIe Gen5 x16 per direction: the link the profile's figures were measured on.
inline constexpr double kProfileLinkBytesPerSecond = 16 * 32e9 * 128.0 / 130.0 / 8.0;

// The smallest size the band holds (mode, direction) at on a link of `link_bytes_per_s`:
// its profile's band_min_size_bytes, scaled down by the link's rate against Gen5 x16's
// where it is slower (whole MiB, never under kBandMinSizeBytes); as it is on a faster or
// unknown (0) link.
std::uint64_t BandMinSize(probes::TransferMode mode, probes::Direction direction,
                          double link_bytes_per_s);

// The band `mode` and `direction` are held to: `band` scaled by its profile's band_scale.
ExpectedBand ModeBand(const ExpectedBand& band, probes::TransferMode mode,
                      probes::Direction direction);

// The share of `band`'s link a (mode, direction) reaches on healthy hardware where its
// profile models it (per_copy_s): chunk / (chunk / copy_share + per_copy_s x link rate).
// 0 where it is not modelled or the link's rate or the chunk is not known.
double ExpectedLinkShare(probes::TransferMode mode, probes::Direction direction,
                         const ExpectedBand& band);

// Where a modelled mode's expected share comes closer than this to the lower bound it would
// be held to (as shares of the link), the per-copy cost, not the link, bounds it: the
// spread of healthy readings would cross the band (the H200's pinned_async keeps 0.12).
inline constexpr double kPerCopyMargin = 0.10;

// ---- Which results it holds ---------------------------------------------------------------

// Whether a result is held to its GPU's band, or why not. One rule for the verdict, the
// status API, the exported xferd_band_exempt and the dashboards' view of it.
enum class BandHold {
  kHeld,
  kNotLinkBound,    // bounded by staging or page faults (probes::IsLinkBound)
  kUnderSize,       // smaller than its profile's band_min_size_bytes: fixed latency bounds it
  kPerCopyBound,    // its chunks' per-copy cost bounds it on this link (kPerCopyMargin)
  kNoLinkFigure,    // no healthy figure of it over NVLink-C2C (ModeProfile::c2c_figure)
  kConfidential,    // CC on and no published CC figure grounds it: baseline only
  kFewCopyEngines,  // probed through MIG instances with fewer copy engines than the GPU
};
// "held", "not link-bound", "under the band's size", "per-copy bound", "no figure on this link"
std::string_view ToString(BandHold hold);

// The hold of a (mode, direction, size) on `band`'s link. A band whose link is not known
// (zeros: a budget, a plan) applies the size rule only.
BandHold HoldOf(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes,
                const ExpectedBand& band);

// Whether a result of this (mode, direction, size) is held to the band at all: HoldOf is
// kHeld.
bool HeldToBand(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes,
                const ExpectedBand& band = {});

// A link-bound probe not held to its band (under its size, per-copy bound, no figure on
// its link): judged against its baseline only (xferd_band_exempt).
bool BandExempt(probes::TransferMode mode, probes::Direction direction, std::uint64_t size_bytes,
                const ExpectedBand& band = {});

// A link-bound (mode, direction) held to a share of the band other than 1: its band is
// exported as a series of its own beside the GPU's.
bool HasOwnBand(probes::TransferMode mode, probes::Direction direction);
// The (mode, direction) pairs `settings` probes that HasOwnBand, in plan order: the own-band
// series a GPU exports (none for a pair the config does not probe).
std::vector<std::pair<probes::TransferMode, probes::Direction>> OwnBandPairs(
    const Settings& settings);

// ---- The verdict --------------------------------------------------------------------------

// What the band (per direction) is compared with: both directions at once count the bytes
// of both, so half of them.
double PerDirection(probes::Direction direction, double bytes_per_s);

enum class BandVerdict {
  kOk,              // at or above the band's lower bound
  kBelowBand,       // under it: a bad cycle for the verdict
  kNotLinkBound,    // the mode is bounded by staging or page faults, not the link
  kNoBand,          // no band is known for this GPU
  kLatencyBound,    // smaller than the mode's band_min_size_bytes
  kPerCopyBound,    // BandHold::kPerCopyBound: baseline only
  kNoLinkFigure,    // BandHold::kNoLinkFigure: baseline only
  kConfidential,    // BandHold::kConfidential: baseline only
  kFewCopyEngines,  // BandHold::kFewCopyEngines: baseline only
};
// "ok", "below band", "n/a (not link-bound)", "n/a (no expected band)",
// "n/a (under the band's size)", "n/a (per-copy bound: baseline only)",
// "n/a (no figure on NVLink-C2C: baseline only)": the words of `xferd probe`'s verdict column.
std::string_view ToString(BandVerdict verdict);

// The band rule for a result of `median_bytes_per_s`: results HoldOf holds only, compared
// per direction with the lower bound of the mode's band (ModeBand of the GPU's `band`).
BandVerdict JudgeBand(probes::TransferMode mode, probes::Direction direction,
                      std::uint64_t size_bytes, double median_bytes_per_s,
                      const ExpectedBand& band);

// ---- A concurrent group's band ------------------------------------------------------------

// The expected aggregate per direction: the band fractions x what the members' paths carry
// together (HostGroup::capacity_bytes_per_s, of BandRate); unknown when the capacity is.
ExpectedBand GroupBand(const HostGroup& group, const Settings& settings);

// Whether a group's aggregate in `direction` is held to its band: per direction only; both
// ways at once is bounded by the host's memory, not a link.
bool AggregateHeldToBand(probes::Direction direction);

}  // namespace xferd::core
