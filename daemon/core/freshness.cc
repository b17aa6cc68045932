#include "core/freshness.h"

#include <algorithm>

namespace xferd::core {

FreshnessBounds FreshnessOf(const Settings& settings) {
  using std::chrono::duration;
  const double interval = duration<double>(settings.interval).count();
  const double budget = duration<double>(settings.cycle_budget).count();
  FreshnessBounds b;
  b.headline_s = 3 * interval + budget;
  b.rotating_s = std::max(duration<double>(kRotatingCurrentFor).count(), 30 * interval);
  // At most half an interval each, as the confirmation delays are (short test intervals).
  const double confirm = std::min(duration<double>(kConfirmDelayMax).count(), interval / 2);
  b.degraded_s = 2 * interval + 2 * confirm;
  return b;
}

}  // namespace xferd::core
