// The simulator's table of fault kinds (probes/sim/fault_kinds.cc): one row a kind, each
// named once, and the kinds' pieces working together through the backend.
#include "probes/sim/fault_kind.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

TEST(SimFaultKinds, EveryKindHasOneRowAndOneName) {
  const std::vector<SimFault::Kind> kinds = AllSimFaultKinds();
  ASSERT_EQ(kinds.size(), SimFaultKinds().size());
  EXPECT_EQ(kinds.size(), static_cast<std::size_t>(SimFault::Kind::kSlowStaging) + 1);
  std::set<std::string> names;
  for (SimFault::Kind kind : kinds) {
    const SimFaultKind& row = FaultKindOf(kind);
    EXPECT_EQ(row.Kind(), kind);
    EXPECT_EQ(ToString(kind), row.Name());
    EXPECT_EQ(ParseSimFaultKind(row.Name()), kind) << row.Name();
    EXPECT_TRUE(names.insert(std::string(row.Name())).second) << "named twice: " << row.Name();
  }
  EXPECT_EQ(ToString(SimFault::Kind::kSlowStaging), "slow_staging");
  EXPECT_FALSE(ParseSimFaultKind("Degrade").has_value());
}

ProbeSpec FaultPinned() {
  ProbeSpec spec;
  spec.mode = TransferMode::kPinned;
  spec.direction = Direction::kH2D;
  spec.size_bytes = 64ull << 20;
  spec.iterations = 10;
  return spec;
}

SimOptions Fast() {
  SimOptions o;
  o.time_scale = 0;
  return o;
}

// Faults of several kinds on one device act together, each doing its part: bandwidth
// factors multiply, a time factor stretches what is left, and the first fault that ends a
// probe ends it.
TEST(SimFaultKinds, KindsComposeInTheOrderGiven) {
  SimBackend healthy(Fast()), faulted(Fast());
  faulted.SetFaults({{.kind = SimFault::Kind::kDegrade, .factor = 0.5},
                     {.kind = SimFault::Kind::kSlow, .factor = 2},
                     {.kind = SimFault::Kind::kRemoteNuma, .factor = 0.5}});
  const double ratio = faulted.Run(0, FaultPinned()).MedianBandwidth() /
                       healthy.Run(0, FaultPinned()).MedianBandwidth();
  EXPECT_NEAR(ratio, 0.5 * 0.5 / 2, 0.01);

  SimBackend ends(Fast());
  ends.SetFaults({{.kind = SimFault::Kind::kLost}, {.kind = SimFault::Kind::kHang}});
  const ProbeSample lost = ends.Run(0, FaultPinned());  // would block forever if hang came first
  EXPECT_EQ(lost.status, ProbeStatus::kError);
  EXPECT_EQ(lost.message, "device lost (simulated fault)");
}

}  // namespace
}  // namespace xferd::probes
