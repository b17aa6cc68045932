// kind = "hang": every probe blocks until it is cancelled (a hung driver call).
#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class Hang final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kHang; }
  std::string_view Name() const override { return "hang"; }
  void ShapeProbe(const SimFault&, const SimProbe&, SimProbeEffect& effect) const override {
    effect.End(ProbeStatus::kError, "cancelled");  // what it returns once stopped
    effect.hang = true;
  }
};

}  // namespace

const SimFaultKind& HangFault() {
  static const Hang kKind;
  return kKind;
}

}  // namespace xferd::probes
