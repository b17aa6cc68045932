// [probe] (config/probe_section.cc): budgets and deadlines that follow a short interval,
// the simulated device's faster cadence, and the pinned memory the sizes need.
#include <chrono>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

using std::chrono::milliseconds;

TEST(Config, ShortIntervalScalesUnsetBudgetAndDeadline) {
  const Config c = Parse("[probe]\ninterval = \"4s\"\n");
  EXPECT_EQ(c.cycle_budget, milliseconds(2000));
  EXPECT_EQ(c.probe_deadline, milliseconds(2000));
  const Config d = Parse("[probe]\ninterval = \"20s\"\ncycle_budget = \"15s\"\n");
  EXPECT_EQ(d.probe_deadline, milliseconds(5000));
}

TEST(Config, SimulatedDeviceMayProbeFast) {
  const Config c =
      Parse("[simulate]\nenabled = true\ntime_scale = 0\n[probe]\ninterval = \"20ms\"\n");
  EXPECT_EQ(c.interval, milliseconds(20));
  EXPECT_LT(c.cycle_budget, c.interval);
  EXPECT_LE(c.probe_deadline, c.cycle_budget);
  // The same interval on real GPUs is refused.
  EXPECT_EQ(ErrorOf("[probe]\ninterval = \"20ms\"\n").key(), "probe.interval");
}

TEST(ConfigValidation, PinnedCapMustHoldLargestSize) {
  EXPECT_EQ(ErrorOf("[probe]\nsizes = [\"1GiB\"]\n").key(), "probe.sizes");  // default cap 512MiB
  EXPECT_NO_THROW(Parse("[probe]\nsizes = [\"256MiB\"]\n"));                 // x2 for bidirectional
  EXPECT_NO_THROW(Parse("[probe]\nsizes = [\"512MiB\"]\nbidirectional = false\n"));
  // Modes without pinned host buffers need no pinned memory.
  EXPECT_NO_THROW(Parse("[probe]\nsizes = [\"1GiB\"]\nmodes = [\"pageable\", \"managed\"]\n"));
}

}  // namespace
}  // namespace xferd::config
