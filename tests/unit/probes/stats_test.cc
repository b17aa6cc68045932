#include "xferd/probes/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace xferd::probes {
namespace {

TEST(Stats, MedianOfOddAndEvenCounts) {
  const std::vector<double> odd{5, 1, 3};
  EXPECT_DOUBLE_EQ(Median(odd), 3.0);
  const std::vector<double> even{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Median(even), 2.5);
  EXPECT_DOUBLE_EQ(Median(std::vector<double>{}), 0.0);
}

TEST(Stats, QuantilesMatchHandComputedLinearInterpolation) {
  // 1..10: rank = q * 9. p90 -> rank 8.1 -> 9 + 0.1 * (10 - 9) = 9.1.
  std::vector<double> v{10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(Quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 1.0), 10.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.9), 9.1);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.25), 3.25);  // rank 2.25 -> 3 + 0.25
  // p99 of 1..100: rank 98.01 -> 99 + 0.01 * 1 = 99.01
  std::vector<double> h;
  for (int i = 1; i <= 100; ++i) h.push_back(i);
  EXPECT_NEAR(Quantile(h, 0.99), 99.01, 1e-9);
  EXPECT_NEAR(Quantile(h, 0.999), 99.901, 1e-9);
}

TEST(Stats, CoefficientOfVariation) {
  // mean 5, sample stddev sqrt(32/7) for 2,4,4,4,5,5,7,9
  std::vector<double> v{2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_NEAR(CoefficientOfVariation(v), std::sqrt(32.0 / 7.0) / 5.0, 1e-12);
  EXPECT_DOUBLE_EQ(CoefficientOfVariation(std::vector<double>{3}), 0.0);
}

TEST(Stats, RobustBaselineDropsOutliers) {
  // One cycle that saw a busy GPU must not drag the baseline down.
  std::vector<double> v{25.0, 25.2, 24.9, 25.1, 3.0, 25.0, 24.8};
  EXPECT_NEAR(RobustBaseline(v), 25.0, 0.06);
  // The plain median of the same values would be the same here; a run of outliers on one
  // side moves a median but the MAD filter drops them.
  std::vector<double> w{25.0, 25.0, 25.1, 24.9, 1.0, 1.0, 25.0, 25.05, 24.95};
  EXPECT_NEAR(RobustBaseline(w), 25.0, 0.06);
  EXPECT_DOUBLE_EQ(RobustBaseline(std::vector<double>{}), 0.0);
}

}  // namespace
}  // namespace xferd::probes
