#include "core/link_errors.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <utility>

namespace xferd::core {
namespace {

using probes::AerClass;

std::size_t Index(AerClass aer_class) {
  return static_cast<std::size_t>(aer_class);
}

// Where the device at `index` of a path of `size` sits, in words for logs and causes.
std::string Where(std::size_t index, std::size_t size, bool top_is_root_port) {
  if (index == 0) return "the GPU";
  if (index + 1 == size && top_is_root_port) return "the root port";
  if (index == 1) return "the port above the GPU";
  return "a switch port";
}

// The counts of `now` that went below `before`, as words; "" when none did.
std::string WentBack(const probes::AerCounts& before, const probes::AerCounts& now,
                     const char* what) {
  std::string out;
  for (AerClass c : probes::kAllAerClasses) {
    const std::size_t i = Index(c);
    if (before[i] && now[i] && *now[i] < *before[i]) {
      out += fmt::format("{}{} {} went back from {} to {}", out.empty() ? "" : ", ", what,
                         probes::ToString(c), *before[i], *now[i]);
    }
  }
  return out;
}

}  // namespace

std::string DescribeLinkErrors(const LinkErrorReading& reading) {
  std::string out = reading.replays_readable
                        ? fmt::format("PCIe replays {} (NVML)", *reading.replays)
                        : "PCIe replays not readable (" + reading.replays_problem + ")";
  const bool root = !reading.aer.empty() && reading.aer.back().read.root_port;
  for (std::size_t i = 0; i < reading.aer.size(); ++i) {
    const LinkErrorDevice& d = reading.aer[i];
    out += fmt::format("; {} ({}) AER ", d.read.bdf, Where(i, reading.aer.size(), root));
    std::string counts;
    for (AerClass c : probes::kAllAerClasses) {
      if (const auto& v = d.read.device[Index(c)]) {
        counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", *v, probes::ToString(c));
      }
    }
    if (d.read.root_port && d.read.rootport[0]) {
      counts += fmt::format("; root port totals {} correctable, {} nonfatal, {} fatal",
                            d.read.rootport[0].value_or(0), d.read.rootport[1].value_or(0),
                            d.read.rootport[2].value_or(0));
    }
    out += counts;
    if (!d.readable)
      out += (counts.empty() ? "" : ", ") + std::string("not readable: ") + d.problem;
  }
  return out;
}

bool LinkErrorGrowth::Significant() const {
  if (!(window_s > 0)) return false;
  if (aer[Index(AerClass::kNonFatal)] + aer[Index(AerClass::kFatal)] > 0) return true;
  const double limit = kLinkErrorsPerMinute * std::max(window_s / 60.0, 1.0);
  return static_cast<double>(replays) >= limit ||
         static_cast<double>(aer[Index(AerClass::kCorrectable)]) >= limit;
}

void LinkErrorTracker::Say(SourceLog& log, const std::string& state, const std::string& line,
                           bool expected, SteadyTime now) {
  if (state != log.state) {
    log.state = state;
    ++log.unsaid;
  }
  if (log.unsaid == 0) return;
  if (!log.window_start || now - *log.window_start >= kLinkErrorLogQuiet) {
    log.window_start = now;
    log.lines_in_window = 0;
  }
  if (log.lines_in_window >= 2) return;  // said when the spell ends, with the count
  const std::string flips =
      log.unsaid > 1 ? fmt::format(" ({} changes since the last line about it)", log.unsaid) : "";
  spdlog::log(state.empty() || expected ? spdlog::level::info : spdlog::level::warn, "{}{}", line,
              flips);
  ++log.lines_in_window;
  log.unsaid = 0;
}

LinkErrorReading LinkErrorTracker::Observe(const probes::DeviceInfo& device,
                                           const probes::LinkErrors& read, SteadyTime now) {
  std::lock_guard lock(mutex_);
  Gpu& gpu = gpus_[device.uuid];
  LinkErrorReading out;
  out.interval_s = gpu.last ? std::chrono::duration<double>(now - *gpu.last).count() : 0;
  Interval interval;
  interval.seconds = out.interval_s;

  gpu.path.clear();
  gpu.top_is_root_port = !read.aer.empty() && read.aer.back().root_port;
  std::set<std::string> on_path;
  for (std::size_t index = 0; index < read.aer.size(); ++index) {
    const probes::AerCounters& c = read.aer[index];
    gpu.path.push_back(c.bdf);
    on_path.insert(c.bdf);
    LinkErrorDevice j = ObserveDevice(
        device, c, Where(index, read.aer.size(), gpu.top_is_root_port), gpu.devices[c.bdf], now);
    interval.aer[c.bdf] = j.grown;
    interval.kinds[c.bdf] = j.kinds_grown;
    out.aer.push_back(std::move(j));
  }
  std::erase_if(gpu.devices, [&](const auto& entry) { return !on_path.contains(entry.first); });

  ObserveReplays(device, read.replays, gpu, out, now);
  interval.replays = out.replays_grown;

  if (gpu.last) {
    gpu.recent.push_back(std::move(interval));
    while (gpu.recent.size() > kLinkErrorReadings) gpu.recent.pop_front();
  } else {
    // Once, so that the log shows what this host lets xferd read of its links.
    spdlog::info("link errors: GPU {} reads {}", device.index, DescribeLinkErrors(out));
  }
  gpu.last = now;
  return out;
}

LinkErrorDevice LinkErrorTracker::ObserveDevice(const probes::DeviceInfo& device,
                                                const probes::AerCounters& c,
                                                const std::string& where, Device& d,
                                                SteadyTime now) {
  LinkErrorDevice j;
  j.read = c;
  j.problem = c.problem;
  std::string state = c.missing ? "missing" : c.problem;
  const std::string back =
      WentBack(d.device, c.device, "TOTAL_ERR") + WentBack(d.rootport, c.rootport, "rootport");
  if (!back.empty()) {
    // A device reset or re-enumerated starts from 0 again; a file that is not the
    // kernel's may say anything. Either way this reading is no count of errors: the new
    // values are the base the next reading is compared with.
    j.problem += (j.problem.empty() ? "" : "; ") + back +
                 " (the device was reset or re-enumerated, or the file is not the kernel's)";
    state = "backwards";
    d.device = c.device;
    d.rootport = c.rootport;
    d.kinds.clear();
    for (const probes::AerKind& k : c.kinds) d.kinds[{k.aer_class, k.name}] = k.count;
    d.rebase = true;
  } else {
    const bool rebase = std::exchange(d.rebase, false);
    if (rebase) d.kinds.clear();
    for (AerClass cls : probes::kAllAerClasses) {
      const std::size_t i = Index(cls);
      if (!c.device[i]) continue;
      if (d.device[i] && !rebase) j.grown[i] = *c.device[i] - *d.device[i];
      d.device[i] = c.device[i];
      if (c.rootport[i]) d.rootport[i] = c.rootport[i];
    }
    for (const probes::AerKind& k : c.kinds) {
      auto [it, fresh] = d.kinds.try_emplace({k.aer_class, k.name}, k.count);
      if (!fresh && k.count > it->second) {
        j.kinds_grown.push_back({k.aer_class, k.name, k.count - it->second});
      }
      it->second = std::max(it->second, k.count);
    }
  }
  j.readable = j.problem.empty();
  Say(d.log, state,
      j.readable  ? fmt::format("link errors: GPU {} {} ({}): AER counters readable again",
                                device.index, c.bdf, where)
      : c.missing ? fmt::format("link errors: GPU {} {} ({}): {}; its AER counts are not readable "
                                "here (xferd_pcie_error_source_readable 0), which is no fault",
                                device.index, c.bdf, where, j.problem)
                  : fmt::format("link errors: GPU {} {} ({}): AER counters not readable: {}; "
                                "xferd_pcie_error_source_readable{{gpu=\"{}\",device=\"{}\"}} is 0 "
                                "until they read sanely again",
                                device.index, c.bdf, where, j.problem, device.index, c.bdf),
      c.missing, now);
  return j;
}

void LinkErrorTracker::ObserveReplays(const probes::DeviceInfo& device,
                                      const probes::ReplayCounter& replays, Gpu& gpu,
                                      LinkErrorReading& out, SteadyTime now) {
  out.replays = replays.value;
  out.replays_problem = replays.problem;
  if (replays.value) {
    if (gpu.replays && *replays.value < *gpu.replays) {
      out.replays_problem = fmt::format(
          "the replay counter went back from {} to {} (it wrapped at 2^32 or the driver "
          "reset it)",
          *gpu.replays, *replays.value);
      gpu.replays_rebase = true;
    } else if (gpu.replays && !std::exchange(gpu.replays_rebase, false)) {
      out.replays_grown = *replays.value - *gpu.replays;
    }
    gpu.replays = replays.value;
  }
  out.replays_readable = out.replays_problem.empty() && out.replays.has_value();
  if (!out.replays && out.replays_problem.empty()) out.replays_problem = "not read";
  Say(gpu.replay_log, out.replays_readable ? "" : out.replays_problem,
      out.replays_readable
          ? fmt::format("link errors: GPU {}: NVML's PCIe replay counter readable again",
                        device.index)
          : fmt::format("link errors: GPU {}: NVML's PCIe replay counter not readable: {} "
                        "(xferd_pcie_error_source_readable{{gpu=\"{}\",source=\"nvml_replay\"}} 0)",
                        device.index, out.replays_problem, device.index),
      replays.missing, now);
}

LinkErrorGrowth LinkErrorTracker::Growth(const std::string& uuid) const {
  std::lock_guard lock(mutex_);
  LinkErrorGrowth g;
  auto it = gpus_.find(uuid);
  if (it == gpus_.end()) return g;
  const Gpu& gpu = it->second;
  // Per device: its uncorrectable errors, then all of them: the worst device is the one
  // that lost transactions, else the one that retried most.
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> per_device;
  std::map<std::string, std::map<std::pair<AerClass, std::string>, std::uint64_t>> kinds;
  for (const Interval& interval : gpu.recent) {
    g.window_s += interval.seconds;
    g.replays += interval.replays;
    for (const auto& [bdf, grown] : interval.aer) {
      for (AerClass c : probes::kAllAerClasses) {
        g.aer[Index(c)] += grown[Index(c)];
        if (c != AerClass::kCorrectable) per_device[bdf].first += grown[Index(c)];
        per_device[bdf].second += grown[Index(c)];
      }
    }
    for (const auto& [bdf, list] : interval.kinds) {
      for (const probes::AerKind& k : list) kinds[bdf][{k.aer_class, k.name}] += k.count;
    }
  }
  std::pair<std::uint64_t, std::uint64_t> most{0, 0};
  for (std::size_t i = 0; i < gpu.path.size(); ++i) {
    const auto found = per_device.find(gpu.path[i]);
    if (found == per_device.end() || found->second <= most) continue;
    most = found->second;
    g.worst_bdf = gpu.path[i];
    g.worst_where = Where(i, gpu.path.size(), gpu.top_is_root_port);
  }
  if (!g.worst_bdf.empty()) {
    for (const auto& [key, count] : kinds[g.worst_bdf]) {
      g.worst_kinds.push_back({key.first, key.second, count});
    }
  }
  return g;
}

}  // namespace xferd::core
