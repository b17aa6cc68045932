// Statistics over probe samples: medians, exact quantiles, robust baselines.
#pragma once

#include <span>
#include <vector>

namespace xferd::probes {

// Median of the values (mean of the middle two for an even count); 0 for none.
double Median(std::span<const double> values);

// Exact quantile q in [0, 1] by linear interpolation between closest ranks (the R-7 /
// numpy "linear" definition); 0 for none.
double Quantile(std::span<const double> values, double q);

// Mean and coefficient of variation (stddev / mean); 0 for fewer than two values.
double Mean(std::span<const double> values);
double CoefficientOfVariation(std::span<const double> values);

// A robust baseline of recent cycle medians: drop values further than `mad_limit` scaled
// median absolute deviations from the median, then take the median of what is left.
// 0 for none.
double RobustBaseline(std::span<const double> recent_medians, double mad_limit = 3.5);

}  // namespace xferd::probes
