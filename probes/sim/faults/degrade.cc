// kind = "degrade": every mode's bandwidth x factor (0 < factor <= 1), the link as it was.
#include <algorithm>

#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class Degrade final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kDegrade; }
  std::string_view Name() const override { return "degrade"; }
  void ShapeProbe(const SimFault& f, const SimProbe&, SimProbeEffect& effect) const override {
    if (f.factor > 0) effect.bandwidth *= std::min(f.factor, 1.0);
  }
};

}  // namespace

const SimFaultKind& DegradeFault() {
  static const Degrade kKind;
  return kKind;
}

}  // namespace xferd::probes
