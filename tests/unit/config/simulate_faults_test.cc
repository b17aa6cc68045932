// [[simulate.fault]] (config/simulate_faults.cc): one reader per kind of the simulator's
// table, and each kind's parameters only where that kind takes them.
#include "config/simulate_faults.h"

#include <algorithm>
#include <string>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(SimulateFaults, EveryKindOfTheSimulatorHasAReader) {
  const auto& readers = FaultReaders();
  for (probes::SimFault::Kind kind : probes::AllSimFaultKinds()) {
    EXPECT_EQ(std::count_if(readers.begin(), readers.end(),
                            [kind](const FaultReader& r) { return r.kind == kind; }),
              1)
        << probes::ToString(kind);
  }
  EXPECT_EQ(readers.size(), probes::AllSimFaultKinds().size());
}

TEST(SimulateFaults, EachParameterIsRefusedByTheKindsThatDoNotTakeIt) {
  const std::vector<std::string_view> keys = SimulateFaultKeys();
  EXPECT_EQ(keys.front(), "kind");
  for (const FaultReader& reader : FaultReaders()) {
    const std::string kind(probes::ToString(reader.kind));
    for (std::string_view key : keys) {
      if (key == "kind" || key == "device") continue;
      if (std::find(reader.keys.begin(), reader.keys.end(), key) != reader.keys.end()) continue;
      const ConfigError e = ErrorOf("[[simulate.fault]]\nkind = \"" + kind + "\"\n" +
                                    std::string(key) + " = 1\n");
      EXPECT_EQ(e.key(), "simulate.fault[0]." + std::string(key)) << kind;
      EXPECT_THAT(e.problem(), HasSubstr("takes no " + std::string(key))) << kind;
    }
  }
}

TEST(SimulateFaults, UnknownKindListsEveryKind) {
  const ConfigError e = ErrorOf("[[simulate.fault]]\nkind = \"melt\"\n");
  EXPECT_EQ(e.key(), "simulate.fault[0].kind");
  for (probes::SimFault::Kind kind : probes::AllSimFaultKinds()) {
    EXPECT_THAT(e.fix(), HasSubstr(std::string(probes::ToString(kind))));
  }
}

}  // namespace
}  // namespace xferd::config
