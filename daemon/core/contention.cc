#include "core/contention.h"

#include <fmt/format.h>

#include <algorithm>

namespace xferd::core {

ContentionThresholds ContentionThresholdsOf(const Settings& settings, double link_bytes_per_s) {
  return {settings.busy_pcie_bytes_per_s, link_bytes_per_s, settings.band_lower_fraction};
}

double LinkForeignThreshold(double link_bytes_per_s, double band_lower_fraction) {
  if (!(link_bytes_per_s > 0)) return 0.0;
  return kNeighbourShareOfHeadroom * std::clamp(1.0 - band_lower_fraction, 0.0, 1.0) *
         link_bytes_per_s;
}

double ForeignTrafficLimit(const ContentionThresholds& thresholds, double own_bytes_per_s) {
  double limit = thresholds.foreign_bytes_per_s;
  if (const double link =
          LinkForeignThreshold(thresholds.link_bytes_per_s, thresholds.band_lower_fraction);
      link > 0) {
    limit = std::min(limit, link);
  }
  return std::max(limit, kForeignNoiseShare * own_bytes_per_s);
}

probes::Contention JudgeContention(const probes::ProbeSample& sample,
                                   const ContentionThresholds& thresholds) {
  probes::Contention c;
  if (!sample.traffic) {
    c.reason = "link traffic not readable";
    return c;
  }
  if (sample.status != probes::ProbeStatus::kOk) {
    c.reason = "the probe did not finish";
    return c;
  }
  const probes::LinkTraffic& t = *sample.traffic;
  if (!(t.window_s > 0)) {
    c.reason = "empty traffic window";
    return c;
  }
  const auto [own_h2d, own_d2h] = sample.OwnLinkBytes();
  if (!t.sampled_rates && ((own_h2d > 0 && t.rx_bytes < kOwnTrafficMinSeen * own_h2d) ||
                           (own_d2h > 0 && t.tx_bytes < kOwnTrafficMinSeen * own_d2h))) {
    c.reason = fmt::format(
        "the link counters missed the probe's own bytes (h2d {:.0f} of {:.0f} MB, d2h {:.0f} of "
        "{:.0f} MB): link load not readable",
        t.rx_bytes / 1e6, own_h2d / 1e6, t.tx_bytes / 1e6, own_d2h / 1e6);
    return c;
  }
  // What the counters may show of the probe itself, per direction (rx = host to device).
  const double expected_rx = kOwnTrafficOverhead * own_h2d + kOwnTrafficReverse * own_d2h;
  const double expected_tx = kOwnTrafficOverhead * own_d2h + kOwnTrafficReverse * own_h2d;
  // Sampled rates describe the link while the probe kept it busy: over the device time its
  // copies ran, not over the whole window with its set-up and synchronisation in it, nor
  // over device time spent computing alone (pinned_async's overlap timing), when the link
  // was idle.
  double seen_rx = t.rx_bytes, seen_tx = t.tx_bytes;
  const double busy_s = sample.device_time_s - sample.compute_only_s;
  if (t.sampled_rates && busy_s > 0 && busy_s < t.window_s) {
    seen_rx *= busy_s / t.window_s;
    seen_tx *= busy_s / t.window_s;
  }
  const double window_h2d = std::max(0.0, seen_rx - expected_rx);
  const double window_d2h = std::max(0.0, seen_tx - expected_tx);
  // Right after the probe only foreign traffic flows, except for the probe's own bytes the
  // counters had not caught up with by the window's end.
  double after_h2d = 0, after_d2h = 0;
  if (t.after_s > 0) {
    const double late_rx = std::max(0.0, expected_rx - seen_rx);
    const double late_tx = std::max(0.0, expected_tx - seen_tx);
    after_h2d = std::max(0.0, t.after_rx_bytes - late_rx) / t.after_s;
    after_d2h = std::max(0.0, t.after_tx_bytes - late_tx) / t.after_s;
  }
  const double window_rate = (window_h2d + window_d2h) / t.window_s;
  const double after_rate = after_h2d + after_d2h;
  // Published: the larger of the two views, per direction.
  c.foreign_h2d_bytes_per_s = std::max(window_h2d / t.window_s, after_h2d);
  c.foreign_d2h_bytes_per_s = std::max(window_d2h / t.window_s, after_d2h);

  const double own_rate = (own_h2d + own_d2h) / t.window_s;
  if (window_rate >= ForeignTrafficLimit(thresholds, own_rate)) {
    c.state = probes::ContentionState::kContended;
    c.reason = fmt::format("{:.1f} GB/s foreign traffic during the probe (h2d {:.1f}, d2h {:.1f})",
                           window_rate / 1e9, window_h2d / t.window_s / 1e9,
                           window_d2h / t.window_s / 1e9);
  } else if (after_rate >= ForeignTrafficLimit(thresholds, 0)) {
    c.state = probes::ContentionState::kContended;
    c.reason =
        fmt::format("{:.1f} GB/s foreign traffic right after the probe (h2d {:.1f}, d2h {:.1f})",
                    after_rate / 1e9, after_h2d / 1e9, after_d2h / 1e9);
  } else {
    c.state = probes::ContentionState::kClear;
  }
  return c;
}

}  // namespace xferd::core
