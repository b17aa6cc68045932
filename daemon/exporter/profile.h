// What each metrics profile ([metrics] profile) exports of the registry Metrics writes
// (docs/metrics.md, "Profiles"). The registry always holds every series; a profile is a
// view of it, taken at each render, so a reload that changes the profile leaves nothing
// stale behind and the status API (fed apart) is the same in both.
//   full:  every series, as written.
//   fleet: each family as its row of the family table says (exporter/families.def): the
//          per-pair gauges of the headline pairs and of the degraded pairs only, the run
//          counters summed over modes, the link's error counters over the path, no
//          histograms and none of the single-host detail.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/settings.h"

namespace xferd::exporter {

using MetricsProfile = core::Settings::MetricsProfile;
std::string_view ToString(MetricsProfile profile);  // "full", "fleet"

// A (mode, direction) as the labels write them: {"pinned", "h2d"}.
using PairLabels = std::pair<std::string, std::string>;

// The pairs a profile always keeps per GPU: those of the probes that run every cycle
// (core::IsHeadline: pinned h2d and d2h when pinned is probed).
std::set<PairLabels> HeadlinePairs(const core::Settings& settings);

// The fleet profile's view of `families` (the full registry's, collected): each family as
// its FleetRule says; families xferd does not name pass as they are.
std::vector<prometheus::MetricFamily> FleetView(std::vector<prometheus::MetricFamily> families,
                                                const std::set<PairLabels>& headline);

// The registry as the profile in force exports it: what /metrics and the textfile render.
class ProfiledRegistry : public prometheus::Collectable {
 public:
  explicit ProfiledRegistry(const prometheus::Registry& registry) : registry_(registry) {}

  // The profile and its headline pairs, at the start and after each reload.
  void Set(MetricsProfile profile, std::set<PairLabels> headline);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const prometheus::Registry& registry_;
  mutable std::mutex mutex_;  // guards the two below
  MetricsProfile profile_ = MetricsProfile::kFull;
  std::set<PairLabels> headline_;
};

}  // namespace xferd::exporter
