// kind = "link_errors": a link error counter grows at `rate` per second of the device's
// timeline on device `hop` of the GPU's path, and the replays and retries cost bandwidth as
// they grow (x factor; 1 = errors alone).
#include <algorithm>

#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class LinkErrorsKind final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kLinkErrors; }
  std::string_view Name() const override { return "link_errors"; }
  void ShapeProbe(const SimFault& f, const SimProbe&, SimProbeEffect& effect) const override {
    if (f.factor > 0) effect.bandwidth *= std::min(f.factor, 1.0);
  }
  void CountErrors(const SimFault& f, double from_s, double to_s,
                   SimErrorCounts& counts) const override {
    counts[{f.hop, f.counter}] += f.rate * std::max(0.0, to_s - from_s);
  }
};

}  // namespace

const SimFaultKind& LinkErrorsFault() {
  static const LinkErrorsKind kKind;
  return kKind;
}

std::string_view ToString(SimFault::ErrorCounter counter) {
  switch (counter) {
    case SimFault::ErrorCounter::kCorrectable: return "correctable";
    case SimFault::ErrorCounter::kNonFatal: return "nonfatal";
    case SimFault::ErrorCounter::kFatal: return "fatal";
    case SimFault::ErrorCounter::kReplay: return "replay";
  }
  return "correctable";
}

std::optional<SimFault::ErrorCounter> ParseSimErrorCounter(std::string_view text) {
  for (auto counter : {SimFault::ErrorCounter::kCorrectable, SimFault::ErrorCounter::kNonFatal,
                       SimFault::ErrorCounter::kFatal, SimFault::ErrorCounter::kReplay}) {
    if (ToString(counter) == text) return counter;
  }
  return std::nullopt;
}

}  // namespace xferd::probes
