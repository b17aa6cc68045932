// Every metric family xferd exports, as one table (families.def): its id, name, type, what
// the fleet profile keeps of it (docs/metrics.md, "Profiles") and its help. The code that
// writes a family asks `Families` for it by its id; adding a family is one entry there.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstddef>
#include <string_view>
#include <variant>

namespace xferd::exporter {

// One per family of the table (exporter/families.def), in its order.
enum class FamilyId : std::size_t {
#define XFERD_FAMILY(id, name, type, fleet, help) id,
#include "exporter/families.def"
#undef XFERD_FAMILY
  kCount
};
inline constexpr std::size_t kFamilyCount = static_cast<std::size_t>(FamilyId::kCount);

enum class FamilyType { kGauge, kCounter, kHistogram };

// What the fleet profile exports of a family's series.
struct FleetRule {
  enum class Kind {
    kAll,   // every series
    kNone,  // none: detail for the single-host view
    // Per (gpu, mode, direction): the series of the headline pairs and of the pairs whose
    // verdict (xferd_bandwidth_degraded) is 1; a series without a mode label stays.
    kPairs,
    // One series per the other labels: `fold` over the values of `label`.
    kFold,
  };
  enum class Fold { kSum, kMax, kMin };
  Kind kind = Kind::kAll;
  Fold fold = Fold::kSum;
  std::string_view label;
};
inline constexpr FleetRule kFleetAll{};
inline constexpr FleetRule kFleetNone{FleetRule::Kind::kNone, FleetRule::Fold::kSum, ""};
inline constexpr FleetRule kFleetPairs{FleetRule::Kind::kPairs, FleetRule::Fold::kSum, ""};
constexpr FleetRule FleetFold(FleetRule::Fold fold, std::string_view label) {
  return {FleetRule::Kind::kFold, fold, label};
}

struct FamilySpec {
  FamilyId id;
  std::string_view name;
  FamilyType type;
  FleetRule fleet;
  std::string_view help;
};

// The table, in FamilyId order (families.def).
const std::array<FamilySpec, kFamilyCount>& FamilyTable();
// The row of a family by its exported name; nullptr for none of xferd's (process_*).
const FamilySpec* FindFamily(std::string_view name);

// Every family of the table, registered in one registry.
class Families {
 public:
  explicit Families(prometheus::Registry& registry);

  // The family `id`, of the type its row says (a mismatch is a programming error: it
  // aborts).
  prometheus::Family<prometheus::Gauge>& Gauge(FamilyId id) const;
  prometheus::Family<prometheus::Counter>& Counter(FamilyId id) const;
  prometheus::Family<prometheus::Histogram>& Histogram(FamilyId id) const;

 private:
  using Any =
      std::variant<prometheus::Family<prometheus::Gauge>*, prometheus::Family<prometheus::Counter>*,
                   prometheus::Family<prometheus::Histogram>*>;
  std::array<Any, kFamilyCount> families_{};
};

}  // namespace xferd::exporter
