// kind = "error_every": every nth probe on the device fails with kError.
#include <string>

#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class ErrorEvery final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kErrorEvery; }
  std::string_view Name() const override { return "error_every"; }
  void ShapeProbe(const SimFault& f, const SimProbe& probe, SimProbeEffect& effect) const override {
    if (f.every > 0 && probe.number % static_cast<std::uint64_t>(f.every) == 0) {
      effect.End(ProbeStatus::kError, "simulated error on probe " + std::to_string(probe.number) +
                                          " (fault: every " + std::to_string(f.every) + ")");
    }
  }
};

}  // namespace

const SimFaultKind& ErrorEveryFault() {
  static const ErrorEvery kKind;
  return kKind;
}

}  // namespace xferd::probes
