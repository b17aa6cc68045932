// kind = "lost": the device is gone; every probe fails with "device lost".
#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class Lost final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kLost; }
  std::string_view Name() const override { return "lost"; }
  void ShapeProbe(const SimFault&, const SimProbe&, SimProbeEffect& effect) const override {
    effect.End(ProbeStatus::kError, "device lost (simulated fault)");
  }
};

}  // namespace

const SimFaultKind& LostFault() {
  static const Lost kKind;
  return kKind;
}

}  // namespace xferd::probes
