// The table of fault kinds: one row a kind, in the order of SimFault::Kind. A new kind is an
// enumerator in sim_backend.h, its file in faults/ and its row here (README.md).
#include <stdexcept>
#include <string>

#include "probes/sim/fault_kind.h"

namespace xferd::probes {

// Each defined in faults/<name>.cc.
const SimFaultKind& DegradeFault();
const SimFaultKind& DownTrainFault();
const SimFaultKind& ErrorEveryFault();
const SimFaultKind& HangFault();
const SimFaultKind& SlowFault();
const SimFaultKind& LostFault();
const SimFaultKind& LinkErrorsFault();
const SimFaultKind& RemoteNumaFault();
const SimFaultKind& SlowStagingFault();

const std::vector<const SimFaultKind*>& SimFaultKinds() {
  static const std::vector<const SimFaultKind*> kKinds = [] {
    std::vector<const SimFaultKind*> kinds = {
        &DegradeFault(), &DownTrainFault(),  &ErrorEveryFault(), &HangFault(),        &SlowFault(),
        &LostFault(),    &LinkErrorsFault(), &RemoteNumaFault(), &SlowStagingFault(),
    };
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (static_cast<std::size_t>(kinds[i]->Kind()) != i) {
        throw std::logic_error("probes/sim/fault_kinds.cc: the row of fault kind \"" +
                               std::string(kinds[i]->Name()) +
                               "\" is out of SimFault::Kind's order");
      }
    }
    return kinds;
  }();
  return kKinds;
}

const SimFaultKind& FaultKindOf(SimFault::Kind kind) {
  return *SimFaultKinds().at(static_cast<std::size_t>(kind));
}

std::vector<SimFault::Kind> AllSimFaultKinds() {
  std::vector<SimFault::Kind> out;
  for (const SimFaultKind* kind : SimFaultKinds()) out.push_back(kind->Kind());
  return out;
}

std::string_view ToString(SimFault::Kind kind) {
  const auto& kinds = SimFaultKinds();
  const auto i = static_cast<std::size_t>(kind);
  return i < kinds.size() ? kinds[i]->Name() : "unknown";
}

std::optional<SimFault::Kind> ParseSimFaultKind(std::string_view text) {
  for (const SimFaultKind* kind : SimFaultKinds()) {
    if (kind->Name() == text) return kind->Kind();
  }
  return std::nullopt;
}

// What a kind does not change, it leaves as it is.
void SimFaultKind::Check(const SimFault&, const SimTopology&) const {}
void SimFaultKind::ShapeCapabilities(const SimFault&, Capabilities&) const {}
void SimFaultKind::ShapePath(const SimFault&, double, LinkPath&) const {}
void SimFaultKind::ShapeProbe(const SimFault&, const SimProbe&, SimProbeEffect&) const {}
void SimFaultKind::ShapeSample(const SimFault&, const SimProbe&, const LinkPath&,
                               ProbeSample&) const {}
void SimFaultKind::CountErrors(const SimFault&, double, double, SimErrorCounts&) const {}

}  // namespace xferd::probes
