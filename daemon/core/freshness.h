// How long a reading counts: the age past which a series' reading no longer carries a
// verdict, and the delays of fast confirmation that the recovery bound is made of. One
// place for the rule the health tracker applies, the scheduler keeps to (it re-measures
// what is under watch every cycle) and the status API shows (docs/health.md, "Current
// readings").
#pragma once

#include <chrono>

#include "core/settings.h"

namespace xferd::core {

// Fast confirmation waits a random delay in this range before re-measuring (at most half
// the interval): long enough that a dip of a second or two is not confirmed, short enough
// that consecutive_bad readings take well under a minute.
inline constexpr std::chrono::seconds kConfirmDelayMin{5}, kConfirmDelayMax{15};

// The rotation's bound: a rotating series is measured within this (15 minutes at the
// default interval on every link, docs/health.md "Coverage"), so twice that is old.
inline constexpr std::chrono::minutes kRotatingCurrentFor{30};

struct FreshnessBounds {
  // A headline reading (pinned h2d and d2h, every cycle) counts for 3 intervals and the
  // cycle budget: as long as the probe loop itself counts as alive (/healthz).
  double headline_s = 0;
  // Any other reading: 30 minutes, or 30 intervals where that is longer.
  double rotating_s = 0;
  // A DEGRADED verdict rests on a bad reading at most this old: two intervals and two
  // confirmation delays, the time a cleared fault takes to read ok again. Past it the
  // series is ok again if it read well since, else stale.
  double degraded_s = 0;
};
FreshnessBounds FreshnessOf(const Settings& settings);

}  // namespace xferd::core
