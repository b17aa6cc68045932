#include "exporter/families.h"

#include <cstdio>
#include <cstdlib>

namespace xferd::exporter {
namespace {

using Fold = FleetRule::Fold;
using enum FamilyType;

// The enum and the table are made of the same list, so they cannot disagree.
constexpr std::array<FamilySpec, kFamilyCount> kTable = {{
#define XFERD_FAMILY(id, name, type, fleet, help) {FamilyId::id, name, type, fleet, help},
#include "exporter/families.def"
#undef XFERD_FAMILY
}};

template <typename Builder>
auto* Register(Builder builder, const FamilySpec& spec, prometheus::Registry& registry) {
  return &builder.Name(std::string(spec.name)).Help(std::string(spec.help)).Register(registry);
}

template <typename Metric, typename Any>
prometheus::Family<Metric>& Get(const Any& any, FamilyId id) {
  auto* const* family = std::get_if<prometheus::Family<Metric>*>(&any);
  if (family == nullptr) {
    const std::string_view name = kTable[static_cast<std::size_t>(id)].name;
    std::fprintf(stderr, "xferd: the metric family %.*s asked for as another type\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return **family;
}

}  // namespace

const std::array<FamilySpec, kFamilyCount>& FamilyTable() {
  return kTable;
}

const FamilySpec* FindFamily(std::string_view name) {
  for (const FamilySpec& spec : kTable) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

Families::Families(prometheus::Registry& registry) {
  for (const FamilySpec& spec : kTable) {
    Any& slot = families_[static_cast<std::size_t>(spec.id)];
    switch (spec.type) {
      case kGauge: slot = Register(prometheus::BuildGauge(), spec, registry); break;
      case kCounter: slot = Register(prometheus::BuildCounter(), spec, registry); break;
      case kHistogram: slot = Register(prometheus::BuildHistogram(), spec, registry); break;
    }
  }
}

prometheus::Family<prometheus::Gauge>& Families::Gauge(FamilyId id) const {
  return Get<prometheus::Gauge>(families_[static_cast<std::size_t>(id)], id);
}
prometheus::Family<prometheus::Counter>& Families::Counter(FamilyId id) const {
  return Get<prometheus::Counter>(families_[static_cast<std::size_t>(id)], id);
}
prometheus::Family<prometheus::Histogram>& Families::Histogram(FamilyId id) const {
  return Get<prometheus::Histogram>(families_[static_cast<std::size_t>(id)], id);
}

}  // namespace xferd::exporter
