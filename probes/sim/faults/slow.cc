// kind = "slow": every transfer takes `factor` times longer (factor >= 1), so probes miss
// their deadlines where the factor is large enough.
#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class Slow final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kSlow; }
  std::string_view Name() const override { return "slow"; }
  void ShapeProbe(const SimFault& f, const SimProbe&, SimProbeEffect& effect) const override {
    if (f.factor > 0) effect.duration *= f.factor;
  }
};

}  // namespace

const SimFaultKind& SlowFault() {
  static const Slow kKind;
  return kKind;
}

}  // namespace xferd::probes
