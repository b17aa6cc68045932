#include "probes/sim/foreign_traffic.h"

#include <algorithm>
#include <limits>

namespace xferd::probes {
namespace {

constexpr double kMeanBurstS = (kSimBurstMinS + kSimBurstMaxS) / 2;
// Bursts that ended this long before the latest time asked about are folded into a total.
constexpr double kHorizonS = 600;

bool SameWay(Direction probe, Direction foreign) {
  return probe == Direction::kBidirectional || foreign == Direction::kBidirectional ||
         probe == foreign;
}

}  // namespace

SimLinkTraffic::SimLinkTraffic(const ForeignTrafficOptions& options, std::uint64_t seed)
    : options_(options), rng_(seed) {
  options_.duty = std::clamp(options_.duty, 0.0, 1.0);
  options_.bytes_per_s = std::max(options_.bytes_per_s, 0.0);
  if (options_.bytes_per_s > 0 && options_.duty >= 1.0) {
    // Steady: one burst for ever.
    bursts_.push_back({0.0, std::numeric_limits<double>::infinity()});
    generated_until_s_ = std::numeric_limits<double>::infinity();
  }
}

void SimLinkTraffic::Generate(double until_s) {
  if (options_.bytes_per_s <= 0 || options_.duty <= 0 || options_.duty >= 1) {
    generated_until_s_ = std::max(generated_until_s_, until_s);
    return;  // none, or the one steady burst made at construction
  }
  // Gaps are exponential (a burst may begin at any moment) with the mean that makes the
  // bursts cover `duty` of the time.
  std::exponential_distribution<double> gap(options_.duty / (kMeanBurstS * (1 - options_.duty)));
  std::uniform_real_distribution<double> length(kSimBurstMinS, kSimBurstMaxS);
  while (generated_until_s_ < until_s) {
    const double start = generated_until_s_ + gap(rng_);
    const double end = start + length(rng_);
    bursts_.push_back({start, end});
    generated_until_s_ = end;
  }
  // Fold what lies well behind.
  const double horizon = until_s - kHorizonS;
  while (!bursts_.empty() && bursts_.front().end_s < horizon) {
    folded_active_s_ += bursts_.front().end_s - bursts_.front().start_s;
    folded_until_s_ = bursts_.front().end_s;
    bursts_.pop_front();
  }
}

double SimLinkTraffic::ActiveSeconds(double a, double b) {
  if (b <= a) return 0;
  Generate(b);
  double on = 0;
  for (const Burst& burst : bursts_) {
    if (burst.start_s >= b) break;
    const double lo = std::max(a, burst.start_s), hi = std::min(b, burst.end_s);
    if (hi > lo) on += hi - lo;
  }
  return on;
}

std::pair<double, double> SimLinkTraffic::PerDirection(double bytes) const {
  switch (options_.direction) {
    case Direction::kH2D: return {bytes, 0.0};
    case Direction::kD2H: return {0.0, bytes};
    case Direction::kBidirectional: return {bytes, bytes};
  }
  return {0.0, 0.0};
}

double SimLinkTraffic::Stretch(double start_s, double alone_s, Direction direction,
                               double own_bytes_per_s, double capacity_bytes_per_s) {
  if (alone_s <= 0 || options_.bytes_per_s <= 0 || capacity_bytes_per_s <= 0 ||
      !SameWay(direction, options_.direction)) {
    return alone_s;
  }
  const double on = ActiveSeconds(start_s, start_s + alone_s) / alone_s;
  if (on <= 0) return alone_s;
  // Both streams want more than the link carries: each gets its share of it.
  const double slower =
      std::max(1.0, (own_bytes_per_s + options_.bytes_per_s) / capacity_bytes_per_s);
  return alone_s * (1 - on + on * slower);
}

void SimLinkTraffic::Book(double h2d_bytes, double d2h_bytes) {
  own_rx_ += kSimCounterOverhead * h2d_bytes + kSimCounterReverse * d2h_bytes;
  own_tx_ += kSimCounterOverhead * d2h_bytes + kSimCounterReverse * h2d_bytes;
}

std::pair<double, double> SimLinkTraffic::Counters(double at_s) {
  Generate(at_s);
  double on = folded_active_s_;
  if (at_s > folded_until_s_) on += ActiveSeconds(folded_until_s_, at_s);
  const auto [h2d, d2h] = PerDirection(on * options_.bytes_per_s);
  return {own_rx_ + kSimCounterOverhead * h2d + kSimCounterReverse * d2h,
          own_tx_ + kSimCounterOverhead * d2h + kSimCounterReverse * h2d};
}

std::pair<double, double> SimLinkTraffic::ForeignRate(double at_s) {
  Generate(at_s + 1e-9);
  for (const Burst& burst : bursts_) {
    if (burst.start_s > at_s) break;
    if (at_s < burst.end_s) return PerDirection(options_.bytes_per_s);
  }
  return {0.0, 0.0};
}

}  // namespace xferd::probes
