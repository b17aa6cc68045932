// kind = "remote_numa": the host buffers land on a NUMA node other than the GPU's. Every
// copy crosses the socket link (each mode's bandwidth x factor), and the placement a probe
// reports is the far node, what `get_mempolicy` would say.
#include <algorithm>
#include <string>

#include "platform/exit_codes.h"
#include "probes/sim/fault_kind.h"
#include "probes/sim/sim_topology.h"

namespace xferd::probes {
namespace {

class RemoteNuma final : public SimFaultKind {
 public:
  SimFault::Kind Kind() const override { return SimFault::Kind::kRemoteNuma; }
  std::string_view Name() const override { return "remote_numa"; }

  void Check(const SimFault& f, const SimTopology& topology) const override {
    for (int d = 0; d < topology.size(); ++d) {
      if ((f.device < 0 || f.device == d) && topology.Path(d).numa_node < 0) {
        throw platform::Error(
            platform::Failure::kConfig,
            "a remote_numa [[simulate.fault]] applies to device " + std::to_string(d) +
                " but the " + topology.Describe() +
                " gives it no NUMA node (numa_node -1: a single-node host), so there is no "
                "far node for its host buffers; limit the fault to a GPU with a NUMA node "
                "(device = N), or give the tree's GPU a numa_node");
      }
    }
  }

  void ShapeProbe(const SimFault& f, const SimProbe&, SimProbeEffect& effect) const override {
    if (f.factor > 0) effect.bandwidth *= std::min(f.factor, 1.0);
  }

  // Node 0's neighbour is 1, every other node's is 0; a single-node host or an integrated
  // GPU has no other node to place them on.
  void ShapeSample(const SimFault&, const SimProbe& probe, const LinkPath& path,
                   ProbeSample& sample) const override {
    if (!probe.integrated && path.numa_node >= 0) {
      sample.host_numa_node = path.numa_node == 0 ? 1 : 0;
    }
  }
};

}  // namespace

const SimFaultKind& RemoteNumaFault() {
  static const RemoteNuma kKind;
  return kKind;
}

}  // namespace xferd::probes
