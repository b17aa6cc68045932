// One kind of injected fault ([[simulate.fault]] kind = "..."): what it does to the
// simulated device. Each kind is one file in probes/sim/faults/ and one row of the table in
// fault_kinds.cc; the backend (sim_backend.cc) asks every fault that applies to a device, in
// the order the config gives them, at each of the points below, and knows no kind by name.
// README.md in this folder says how to add a kind.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xferd/probes/backend.h"
#include "xferd/probes/sim_backend.h"
#include "xferd/probes/topology.h"

namespace xferd::probes {

class SimTopology;

// One probe of one device, as the faults see it before it moves data.
struct SimProbe {
  int device = 0;
  const ProbeSpec& spec;
  std::uint64_t number = 0;  // the device's probes so far, this one included
  double now_s = 0;          // when it starts, on the device's timeline
  bool integrated = false;   // the device shares the host's memory (no PCIe link)
};

// What the faults make of one probe, each adding its part in turn.
struct SimProbeEffect {
  // Set: the probe ends here, before it moves data, with this status and message; later
  // faults are not asked.
  std::optional<ProbeStatus> status;
  std::string message;
  bool hang = false;       // with status: it blocks until cancelled (a hung driver call)
  double bandwidth = 1.0;  // x what the link gives the mode
  double duration = 1.0;   // x each transfer's time

  bool Ends() const { return status.has_value(); }
  void End(ProbeStatus end_status, std::string end_message) {
    status = end_status;
    message = std::move(end_message);
  }
};

// Link errors counted between two moments, per (hop on the GPU's path, counter): hop 0 the
// GPU, 1 the port above it, -1 the top of the path (SimFault::hop).
using SimErrorCounts = std::map<std::pair<int, SimFault::ErrorCounter>, double>;

class SimFaultKind {
 public:
  virtual ~SimFaultKind() = default;

  virtual SimFault::Kind Kind() const = 0;
  // The name config and messages use: kind = "degrade".
  virtual std::string_view Name() const = 0;

  // At start-up, for the faults the backend is built with: throws platform::Error (kConfig)
  // naming the fix when `fault` cannot apply to the devices of `topology`.
  virtual void Check(const SimFault& fault, const SimTopology& topology) const;

  // Modes the device cannot do while the fault lasts (Capabilities::unsupported, with the
  // reason); a probe of one ends kUnsupported before any fault's ShapeProbe is asked.
  virtual void ShapeCapabilities(const SimFault& fault, Capabilities& capabilities) const;

  // The device's PCIe path as trained at `now_s` on its timeline (links at their best, the
  // idle downclock applied after the faults).
  virtual void ShapePath(const SimFault& fault, double now_s, LinkPath& path) const;

  // One probe: end it (fail, hang), or scale its bandwidth and each transfer's time.
  virtual void ShapeProbe(const SimFault& fault, const SimProbe& probe,
                          SimProbeEffect& effect) const;

  // A probe that finished ok, after the backend filled it in (`path` as it ran): what else
  // the fault changes in what it reports (the host buffers' NUMA node, ...).
  virtual void ShapeSample(const SimFault& fault, const SimProbe& probe, const LinkPath& path,
                           ProbeSample& sample) const;

  // The link errors the fault made the device count from `from_s` to `to_s` on its timeline,
  // added to `counts`. Counts of a fault a reload replaced are kept, so counters never go
  // back.
  virtual void CountErrors(const SimFault& fault, double from_s, double to_s,
                           SimErrorCounts& counts) const;
};

// The kind behind `kind`: the table's row (fault_kinds.cc).
const SimFaultKind& FaultKindOf(SimFault::Kind kind);

// Every kind, in the order of SimFault::Kind.
const std::vector<const SimFaultKind*>& SimFaultKinds();

}  // namespace xferd::probes
