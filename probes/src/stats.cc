#include "xferd/probes/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace xferd::probes {

double Quantile(std::span<const double> values, double q) {
  if (values.empty()) return 0.0;
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = static_cast<std::size_t>(std::ceil(rank));
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double Median(std::span<const double> values) { return Quantile(values, 0.5); }

double Mean(std::span<const double> values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double CoefficientOfVariation(std::span<const double> values) {
  if (values.size() < 2) return 0.0;
  const double mean = Mean(values);
  if (mean == 0.0) return 0.0;
  double sum_sq = 0.0;
  for (double v : values) sum_sq += (v - mean) * (v - mean);
  return std::sqrt(sum_sq / static_cast<double>(values.size() - 1)) / std::abs(mean);
}

double RobustBaseline(std::span<const double> recent_medians, double mad_limit) {
  if (recent_medians.empty()) return 0.0;
  const double median = Median(recent_medians);
  std::vector<double> deviations;
  deviations.reserve(recent_medians.size());
  for (double v : recent_medians) deviations.push_back(std::abs(v - median));
  // 1.4826 makes the MAD estimate a normal distribution's standard deviation.
  const double scaled_mad = 1.4826 * Median(deviations);
  if (scaled_mad == 0.0) return median;
  std::vector<double> kept;
  for (double v : recent_medians) {
    if (std::abs(v - median) <= mad_limit * scaled_mad) kept.push_back(v);
  }
  return kept.empty() ? median : Median(kept);
}

}  // namespace xferd::probes
