#include "exporter/process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "platform/files.h"

namespace xferd::exporter {
namespace {

// procfs files of a process are a few KiB; /proc/stat grows with CPUs and interrupts.
constexpr std::size_t kMaxProcFileBytes = 4u << 20;

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  return platform::TryReadFileBounded(path, kMaxProcFileBytes);
}

prometheus::MetricFamily One(std::string name, std::string help, prometheus::MetricType type,
                             double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

// /proc/PID/stat fields from the third on (state), after the command name, which may hold
// spaces and parentheses: everything up to the last ')' is skipped.
std::optional<std::vector<std::string>> StatFields(const std::string& stat) {
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(stat.substr(close + 1));
  std::vector<std::string> fields;
  std::string field;
  while (in >> field) fields.push_back(field);
  if (fields.size() < 22) return std::nullopt;  // up to rss (field 24)
  return fields;
}

std::optional<double> Number(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return value;
}

std::optional<double> BootTime(const std::filesystem::path& proc_root) {
  const auto stat = ReadFile(proc_root / "stat");
  if (!stat) return std::nullopt;
  std::istringstream in(*stat);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) return Number(line.substr(6));
  }
  return std::nullopt;
}

// The soft limit of "Max open files" in /proc/PID/limits.
std::optional<double> MaxOpenFiles(const std::filesystem::path& limits_path) {
  const auto limits = ReadFile(limits_path);
  if (!limits) return std::nullopt;
  std::istringstream in(*limits);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream fields(line.substr(std::string("Max open files").size()));
    std::string soft;
    fields >> soft;
    return Number(soft);  // "unlimited" -> none
  }
  return std::nullopt;
}

std::optional<double> OwnMaxOpenFiles() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<double>(limit.rlim_cur);
}

// Entries of /proc/PID/fd, not counting the descriptor this listing itself holds open.
std::optional<double> OpenFds(const std::filesystem::path& fd_dir, bool self) {
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return std::nullopt;
  const std::string own = std::to_string(dirfd(dir));
  double count = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (self && name == own) continue;
    ++count;
  }
  closedir(dir);
  return count;
}

}  // namespace

ProcessMetrics::ProcessMetrics(std::filesystem::path proc_root, std::string pid)
    : proc_root_(std::move(proc_root)), pid_(std::move(pid)) {}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  const std::filesystem::path process = proc_root_ / pid_;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));

  if (const auto stat = ReadFile(process / "stat")) {
    if (const auto f = StatFields(*stat)) {
      // Index 0 is field 3 (state): utime 14, stime 15, num_threads 20, starttime 22,
      // vsize 23, rss 24.
      const auto utime = Number((*f)[11]);
      const auto stime = Number((*f)[12]);
      const auto threads = Number((*f)[17]);
      const auto start = Number((*f)[19]);
      const auto vsize = Number((*f)[20]);
      const auto rss = Number((*f)[21]);
      if (utime && stime) {
        out.push_back(One("process_cpu_seconds_total",
                          "Total user and system CPU time spent in seconds.", MetricType::Counter,
                          (*utime + *stime) / ticks));
      }
      if (rss) {
        out.push_back(One("process_resident_memory_bytes", "Resident memory size in bytes.",
                          MetricType::Gauge, *rss * page));
      }
      if (vsize) {
        out.push_back(One("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                          MetricType::Gauge, *vsize));
      }
      std::optional<double> boot;
      {
        std::lock_guard lock(boot_time_mutex_);
        if (!boot_time_) boot_time_ = BootTime(proc_root_);
        boot = boot_time_;
      }
      if (boot && start) {
        out.push_back(One("process_start_time_seconds",
                          "Start time of the process since unix epoch in seconds.",
                          MetricType::Gauge, *boot + *start / ticks));
      }
      if (threads) {
        out.push_back(One("xferd_process_threads", "Threads of the xferd process.",
                          MetricType::Gauge, *threads));
      }
    }
  }
  const bool self = proc_root_ == "/proc" && pid_ == "self";
  if (const auto fds = OpenFds(process / "fd", self)) {
    out.push_back(
        One("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, *fds));
  }
  // This process's own limit needs no file: getrlimit is one cheap call per scrape where
  // the kernel formats all of /proc/PID/limits for a read.
  if (const auto max = self ? OwnMaxOpenFiles() : MaxOpenFiles(process / "limits")) {
    out.push_back(One("process_max_fds", "Maximum number of open file descriptors.",
                      MetricType::Gauge, *max));
  }
  return out;
}

}  // namespace xferd::exporter
