#include "exporter/profile.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "core/plan.h"
#include "exporter/families.h"

namespace xferd::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using Fold = FleetRule::Fold;

std::string_view LabelOf(const ClientMetric& m, std::string_view name) {
  for (const ClientMetric::Label& l : m.label) {
    if (l.name == name) return l.value;
  }
  return {};
}

using GpuPair = std::tuple<std::string, std::string, std::string>;  // gpu, mode, direction

GpuPair PairOf(const ClientMetric& m) {
  return {std::string(LabelOf(m, "gpu")), std::string(LabelOf(m, "mode")),
          std::string(LabelOf(m, "direction"))};
}

// The (gpu, mode, direction) whose verdict is degraded.
std::set<GpuPair> DegradedPairs(const std::vector<MetricFamily>& families) {
  const std::string_view name = FamilyTable()[static_cast<std::size_t>(FamilyId::kDegraded)].name;
  std::set<GpuPair> out;
  for (const MetricFamily& f : families) {
    if (f.name != name) continue;
    for (const ClientMetric& m : f.metric) {
      if (m.gauge.value == 1) out.insert(PairOf(m));
    }
  }
  return out;
}

double ValueOf(const MetricFamily& f, const ClientMetric& m) {
  return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
}

void SetValue(const MetricFamily& f, ClientMetric& m, double value) {
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
}

// What a folded family's help says of its values, by Fold.
constexpr std::array<std::string_view, 3> kFoldWords = {"the sum", "the largest value",
                                                        "the smallest value"};

// One series per the labels other than `rule.label`, in the order first seen.
void FoldFamily(MetricFamily& f, const FleetRule& rule) {
  std::map<std::vector<ClientMetric::Label>, std::size_t> index;
  std::vector<ClientMetric> out;
  for (ClientMetric& m : f.metric) {
    std::erase_if(m.label, [&](const ClientMetric::Label& l) { return l.name == rule.label; });
    const auto [it, fresh] = index.try_emplace(m.label, out.size());
    if (fresh) {
      out.push_back(std::move(m));
      continue;
    }
    ClientMetric& into = out[it->second];
    const double a = ValueOf(f, into), b = ValueOf(f, m);
    switch (rule.fold) {
      case Fold::kSum: SetValue(f, into, a + b); break;
      case Fold::kMax: SetValue(f, into, std::max(a, b)); break;
      case Fold::kMin: SetValue(f, into, std::min(a, b)); break;
    }
  }
  f.metric = std::move(out);
  f.help += " Fleet profile: " + std::string(kFoldWords.at(static_cast<std::size_t>(rule.fold))) +
            " over " + std::string(rule.label) + ".";
}

}  // namespace

std::string_view ToString(MetricsProfile profile) {
  return profile == MetricsProfile::kFleet ? "fleet" : "full";
}

std::set<PairLabels> HeadlinePairs(const core::Settings& settings) {
  std::set<PairLabels> out;
  for (const probes::ProbeSpec& spec : core::PlanProbes(settings)) {
    if (core::IsHeadline(spec, settings)) {
      out.emplace(probes::ToString(spec.mode), probes::ToString(spec.direction));
    }
  }
  return out;
}

std::vector<MetricFamily> FleetView(std::vector<MetricFamily> families,
                                    const std::set<PairLabels>& headline) {
  const std::set<GpuPair> degraded = DegradedPairs(families);
  std::vector<MetricFamily> out;
  out.reserve(families.size());
  for (MetricFamily& f : families) {
    const FamilySpec* spec = FindFamily(f.name);
    const FleetRule rule = spec != nullptr ? spec->fleet : kFleetAll;
    switch (rule.kind) {
      case FleetRule::Kind::kAll: break;
      case FleetRule::Kind::kNone: continue;
      case FleetRule::Kind::kPairs:
        std::erase_if(f.metric, [&](const ClientMetric& m) {
          const GpuPair pair = PairOf(m);
          const auto& [gpu, mode, direction] = pair;
          if (mode.empty()) return false;  // the GPU's own band
          return !headline.contains({mode, direction}) && !degraded.contains(pair);
        });
        break;
      case FleetRule::Kind::kFold: FoldFamily(f, rule); break;
    }
    out.push_back(std::move(f));
  }
  return out;
}

void ProfiledRegistry::Set(MetricsProfile profile, std::set<PairLabels> headline) {
  std::lock_guard lock(mutex_);
  profile_ = profile;
  headline_ = std::move(headline);
}

std::vector<prometheus::MetricFamily> ProfiledRegistry::Collect() const {
  MetricsProfile profile;
  std::set<PairLabels> headline;
  {
    std::lock_guard lock(mutex_);
    profile = profile_;
    if (profile == MetricsProfile::kFleet) headline = headline_;
  }
  std::vector<prometheus::MetricFamily> families = registry_.Collect();
  if (profile == MetricsProfile::kFull) return families;
  return FleetView(std::move(families), headline);
}

}  // namespace xferd::exporter
