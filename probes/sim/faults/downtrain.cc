// kind = "downtrain": the GPU's own link trained down to (gen, width); the bandwidth follows
// the link, since the backend's model takes the path's rate.
#include <algorithm>

#include "probes/sim/fault_kind.h"

namespace xferd::probes {
namespace {

class DownTrain final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kDownTrain; }
  std::string_view Name() const override { return "downtrain"; }
  void ShapePath(const SimFault& f, double, LinkPath& path) const override {
    if (path.links.empty()) return;
    PcieLink& own = path.links.front();
    if (f.gen > 0) own.current_gen = own.current_gen > 0 ? std::min(own.current_gen, f.gen) : f.gen;
    if (f.width > 0)
      own.current_width = own.current_width > 0 ? std::min(own.current_width, f.width) : f.width;
  }
};

}  // namespace

const SimFaultKind& DownTrainFault() {
  static const DownTrain kKind;
  return kKind;
}

}  // namespace xferd::probes
