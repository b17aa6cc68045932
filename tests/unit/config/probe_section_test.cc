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

// A probe's device-time target, the fewest timed transfers, and the sizes that follow the
// link: defaults, what follows a short deadline down, and what is refused with its fix.
TEST(Config, ProbeTimeAndMinIterations) {
  const Config d = Parse("[probe]\n");
  EXPECT_EQ(d.probe_time, milliseconds(25));
  EXPECT_EQ(d.min_iterations, 5);
  EXPECT_TRUE(d.sizes_follow_link);
  const Config off = Parse("[probe]\nprobe_time = \"0s\"\nsizes_follow_link = false\n");
  EXPECT_EQ(off.probe_time, milliseconds(0));
  EXPECT_FALSE(off.sizes_follow_link);
  // Unset, it follows a short deadline down.
  const Config fast = Parse("[simulate]\nenabled = true\n[probe]\ninterval = \"20ms\"\n");
  EXPECT_LT(fast.probe_time, fast.probe_deadline);
  // Fewer iterations than the floor: the floor follows them down.
  EXPECT_EQ(Parse("[probe]\niterations = 3\n").min_iterations, 3);
  const ConfigError above = ErrorOf("[probe]\niterations = 3\nmin_iterations = 4\n");
  EXPECT_EQ(above.key(), "probe.min_iterations");
  EXPECT_THAT(above.what(), HasSubstr("must be at most iterations (3)"));
  const ConfigError late = ErrorOf("[probe]\ndeadline = \"100ms\"\nprobe_time = \"200ms\"\n");
  EXPECT_EQ(late.key(), "probe.probe_time");
  EXPECT_THAT(late.what(), HasSubstr("every probe would time out"));
}

TEST(Config, SimulatedTimeSpeedup) {
  EXPECT_EQ(Parse("[probe]\n").sim_speedup, 0);
  EXPECT_EQ(Parse("[simulate]\nenabled = true\nspeedup = 120\n").sim_speedup, 120);
  EXPECT_EQ(ErrorOf("[simulate]\nenabled = true\nspeedup = 0.5\n").key(), "simulate.speedup");
}

}  // namespace
}  // namespace xferd::config
