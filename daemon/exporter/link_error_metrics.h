// The link's error counters on each GPU's PCIe path as series (docs/metrics.md, "Link
// errors"): the kernel's AER counts of every device on the path, the root port's totals,
// NVML's replay counter, and whether each source is readable. A source that cannot be read
// has no counter series and readable 0: never a zero count.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "core/link_errors.h"
#include "exporter/families.h"
#include "xferd/probes/types.h"

namespace xferd::exporter {

class LinkErrorMetrics {
 public:
  explicit LinkErrorMetrics(const Families& families);

  // One GPU's judged reading: every counter as read (a value below the last one published
  // restarts the series, which rate() takes as a counter reset), readable per source; the
  // series of devices no longer on the path go.
  void Record(const probes::DeviceInfo& device, const core::LinkErrorReading& reading);

 private:
  // A counter series that shows the value read, as long as it only grows.
  void Mirror(prometheus::Family<prometheus::Counter>& family, const prometheus::Labels& labels,
              std::uint64_t value);
  void Drop(prometheus::Family<prometheus::Counter>& family, const prometheus::Labels& labels);

  prometheus::Family<prometheus::Counter>& aer_;
  prometheus::Family<prometheus::Counter>& rootport_;
  prometheus::Family<prometheus::Counter>& replays_;
  prometheus::Family<prometheus::Gauge>& readable_;

  std::mutex mutex_;
  // What each counter series shows, by family and labels.
  std::map<std::pair<const void*, prometheus::Labels>, std::uint64_t> shown_;
  std::map<int, std::set<std::string>> devices_;  // per GPU: the devices with series
};

}  // namespace xferd::exporter
