// The standard process_* metrics of Prometheus client libraries (prometheus-cpp 1.0.1 has
// none), read from procfs at each scrape, plus xferd_process_threads.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace xferd::exporter {

class ProcessMetrics : public prometheus::Collectable {
 public:
  // `proc_root` and `pid` exist for tests (a fake procfs); the defaults read this process.
  explicit ProcessMetrics(std::filesystem::path proc_root = "/proc", std::string pid = "self");

  // process_cpu_seconds_total, process_resident_memory_bytes,
  // process_virtual_memory_bytes, process_start_time_seconds, process_open_fds,
  // process_max_fds, xferd_process_threads. A source that cannot be read leaves its
  // metrics out rather than reporting a wrong 0.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::filesystem::path proc_root_;
  std::string pid_;
  // The boot time (/proc/stat btime) does not change, and /proc/stat grows with the CPU and
  // interrupt count: it is read until read once, not on every scrape.
  mutable std::mutex boot_time_mutex_;
  mutable std::optional<double> boot_time_;
};

}  // namespace xferd::exporter
