// The series and state budget a file is held to (config/budget.cc): the defaults' figures
// and a refusal that says by how much. The estimate against real expositions:
// series_budget_test.cc.
#include <string>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(ConfigBudget, DefaultsMatchTheDocumentedSeriesAndLimitsAreReported) {
  const SeriesEstimate defaults = EstimateSeries(Settings{});
  EXPECT_EQ(defaults.probes, 13u);
  EXPECT_EQ(defaults.per_gpu, 294u);  // docs/metrics.md, "Series budget"
  EXPECT_LE(defaults.per_gpu, 300u);  // the budget, link errors of a typical path included
  EXPECT_EQ(defaults.link_errors_per_gpu, 21u);
  EXPECT_EQ(defaults.concurrent_per_gpu, 6u);
  EXPECT_EQ(defaults.per_size, 195u);
  EXPECT_EQ(defaults.baseline_values_per_gpu, 13u * 20);
  // The shipped example is far inside every limit.
  EXPECT_LT(EstimateSeries(LoadConfig(kExample)).per_gpu, kMaxSeriesPerGpu / 4);
  // Over: says by how much.
  std::string sizes;
  for (int i = 0; i < 10; ++i) sizes += (i ? ", " : "") + std::to_string(4096 << i);
  const ConfigError e = ErrorOf("[probe]\nsizes = [" + sizes + "]\n");
  EXPECT_EQ(e.key(), "probe.sizes");
  // 10 sizes x 13 probes x 15 + 13 verdicts + 30 run counters + 1 overlap + 2 of the own
  // band + 32 per GPU + 21 of link errors, 6 for the concurrent groups, and every size
  // under 4 MiB: 8 link-bound probes each marked xferd_band_exempt.
  EXPECT_THAT(e.problem(), HasSubstr("exports 2135 series per GPU"));
  EXPECT_THAT(e.problem(), HasSubstr("21 of link errors on a typical path"));
  EXPECT_THAT(e.problem(), HasSubstr("and 80 xferd_band_exempt"));
  EXPECT_THAT(e.problem(), HasSubstr("over the limit of 2000 by 135 (6%)"));
  // One size fewer fits.
  sizes = sizes.substr(0, sizes.rfind(','));
  EXPECT_EQ(Parse("[probe]\nsizes = [" + sizes + "]\n").sizes.size(), 9u);
}

// A file of 120,000 sizes used to be checked for repeats one by one (hours); now it is
// refused for its series in a moment (a hang would fail the test by its timeout).
TEST(ConfigBudget, HugeListsAreRefusedWithoutAQuadraticScan) {
  std::string text = "[probe]\nsizes = [";
  for (int i = 0; i < 120000; ++i) text += (i ? "," : "") + std::to_string(1024 + i);
  text += "]\n";
  EXPECT_EQ(ErrorOf(text).key(), "probe.sizes");
}

}  // namespace
}  // namespace xferd::config
