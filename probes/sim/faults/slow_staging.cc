// kind = "slow_staging": the pageable path's staging through the driver's bounce buffer is
// starved (host memory bandwidth, pressure): pageable bandwidth x factor, pinned as before.
#include <algorithm>

#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class SlowStaging final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kSlowStaging; }
  std::string_view Name() const override { return "slow_staging"; }
  void ShapeProbe(const SimFault& f, const SimProbe& probe, SimProbeEffect& effect) const override {
    if (probe.spec.mode == TransferMode::kPageable && f.factor > 0)
      effect.bandwidth *= std::min(f.factor, 1.0);
  }
};

}  // namespace

const SimFaultKind& SlowStagingFault() {
  static const SlowStaging kKind;
  return kKind;
}

}  // namespace xferd::probes
