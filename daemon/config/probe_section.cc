// [probe]: what is measured, how often, and within what time and device-time budget.
#include <algorithm>
#include <set>

#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "config/units.h"
#include "core/plan.h"
#include "xferd/probes/types.h"

namespace xferd::config {
namespace {

constexpr std::uint64_t kKiB = 1ull << 10;
constexpr std::uint64_t kGiB = 1ull << 30;

// interval and jitter. A real GPU is probed at most once a second; the simulated device
// may go much faster so tests and soaks can run thousands of cycles.
void ReadInterval(const TableReader& r, bool present, bool simulate, Config& config) {
  const milliseconds min_interval = simulate ? milliseconds(10) : milliseconds(1000);
  if (present) {
    const auto interval = r.Find("interval");
    if (interval && interval->is_string() && !simulate) {
      const auto value = ParseDuration(**interval->as_string());
      if (value && *value < min_interval) {
        r.Fail(*interval, "interval",
               "must be at least 1s, got " + Quote(**interval->as_string()) +
                   " (shorter intervals are only for the simulated device)",
               "set interval = \"60s\" or longer");
      }
    }
  }
  if (auto v = r.Duration("interval", min_interval, milliseconds(24 * 3600 * 1000), "60s"))
    config.interval = *v;
  if (auto v = r.Number("jitter", 0, 0.5, false, 0.1)) config.jitter = *v;
}

void ReadModes(const TableReader& r, Config& config) {
  if (const toml::array* modes = r.Array("modes", false, "[\"pinned\", \"pageable\"]")) {
    config.modes.clear();
    for (const toml::node& element : *modes) {
      const auto* s = element.as_string();
      if (!s)
        r.Fail(element, "modes", "each mode must be a string, got " + TypeName(element),
               "use names from: " + probes::AllModeNames());
      const auto mode = probes::ParseMode(**s);
      if (!mode)
        r.Fail(element, "modes", "unknown mode " + Quote(**s),
               "use names from: " + probes::AllModeNames());
      if (std::find(config.modes.begin(), config.modes.end(), *mode) != config.modes.end()) {
        r.Fail(element, "modes", "mode " + Quote(**s) + " is listed twice", "list each mode once");
      }
      config.modes.push_back(*mode);
    }
  }
  if (auto v = r.Bool("bidirectional")) config.bidirectional = *v;
}

void ReadSizes(const TableReader& r, Config& config) {
  if (const toml::array* sizes = r.Array("sizes", false, "[\"64MiB\"]")) {
    config.sizes.clear();
    std::set<std::uint64_t> seen;  // not a scan per size: a 1 MiB file can list 200,000
    for (const toml::node& element : *sizes) {
      const std::uint64_t bytes = r.SizeValue(element, "sizes", kKiB, kGiB, "sizes = [\"64MiB\"]");
      if (!seen.insert(bytes).second) {
        r.Fail(element, "sizes", "size " + probes::FormatSize(bytes) + " is listed twice",
               "list each size once");
      }
      config.sizes.push_back(bytes);
    }
  }
}

// cycle_budget and deadline, checked against the interval and each other.
void ReadTimers(const TableReader& r, bool simulate, Config& config) {
  // Unset budget and deadline follow a short interval down, so setting interval alone
  // always gives a valid config; explicit values are checked against each other.
  const bool budget_set = r.Find("cycle_budget") != nullptr;
  const bool deadline_set = r.Find("deadline") != nullptr;
  const milliseconds min_timer = simulate ? milliseconds(1) : milliseconds(10);
  if (auto v = r.Duration("cycle_budget", min_timer, milliseconds(24 * 3600 * 1000), "30s"))
    config.cycle_budget = *v;
  else
    config.cycle_budget = std::min(config.cycle_budget, std::max(min_timer, config.interval / 2));
  if (auto v = r.Duration("deadline", min_timer, milliseconds(3600 * 1000), "5s"))
    config.probe_deadline = *v;
  else
    config.probe_deadline = std::min(config.probe_deadline, config.cycle_budget);

  if (budget_set && config.cycle_budget >= config.interval) {
    r.Fail(*r.Find("cycle_budget"), "cycle_budget",
           "must be shorter than interval (" + FormatDuration(config.interval) + "), got " +
               FormatDuration(config.cycle_budget) + "; cycles must never overlap",
           "set cycle_budget to at most half the interval, e.g. cycle_budget = \"" +
               FormatDuration(std::max(min_timer, config.interval / 2)) + "\"");
  }
  if (deadline_set && config.probe_deadline >= config.interval) {
    r.Fail(*r.Find("deadline"), "deadline",
           "must be shorter than interval (" + FormatDuration(config.interval) + "), got " +
               FormatDuration(config.probe_deadline),
           "set deadline = \"" + FormatDuration(std::min(milliseconds(5000), config.cycle_budget)) +
               "\" or shorter");
  }
  if (deadline_set && config.probe_deadline > config.cycle_budget) {
    r.Fail(*r.Find("deadline"), "deadline",
           "one probe's deadline (" + FormatDuration(config.probe_deadline) +
               ") is longer than the whole cycle's budget (" + FormatDuration(config.cycle_budget) +
               ")",
           "set deadline = \"" + FormatDuration(config.cycle_budget) +
               "\" or shorter, or raise cycle_budget");
  }
}

// probe_time and min_iterations: the device-time target each probe runs to, and the fewest
// timed transfers it takes; each checked against iterations and the deadline.
void ReadProbeTime(const TableReader& r, Config& config) {
  // Unset, it follows a short deadline down (as the deadline follows the interval).
  if (auto v = r.Duration("probe_time", milliseconds(0), milliseconds(10000), "25ms")) {
    config.probe_time = *v;
  } else {
    config.probe_time = std::min(config.probe_time, config.probe_deadline / 2);
  }
  if (auto v = r.Integer("min_iterations", 1, 10000, 5)) {
    config.min_iterations = static_cast<int>(*v);
  } else {
    config.min_iterations = std::min(config.min_iterations, config.iterations);
  }
  if (config.min_iterations > config.iterations) {
    r.Fail(*r.Find("min_iterations"), "min_iterations",
           "must be at most iterations (" + std::to_string(config.iterations) + "), got " +
               std::to_string(config.min_iterations),
           "set min_iterations = " + std::to_string(std::min(5, config.iterations)) +
               " or raise iterations");
  }
  if (config.probe_time >= config.probe_deadline && config.probe_time.count() > 0) {
    const toml::node* at = r.Find("probe_time");
    r.FailAt(at ? LineOf(*at) : 0, "probe_time",
             "a probe aims for " + FormatDuration(config.probe_time) +
                 " of device time, not less than its deadline (" +
                 FormatDuration(config.probe_deadline) + "): every probe would time out",
             "set probe_time = \"25ms\" (or \"0s\": exactly `iterations` transfers), or raise "
             "deadline");
  }
}

// The pinned host memory the plan needs must fit under pinned_cap: the largest buffer of
// a pinned, pinned_async or zero_copy probe, two of them for both ways at once.
void CheckPinnedCap(const TableReader& r, const Config& config) {
  std::uint64_t needed = 0, largest = 0;
  bool bidirectional = false;
  for (const probes::ProbeSpec& spec : core::PlanProbes(config)) {
    if (spec.mode != probes::TransferMode::kPinned &&
        spec.mode != probes::TransferMode::kPinnedAsync &&
        spec.mode != probes::TransferMode::kZeroCopy) {
      continue;
    }
    const bool both = spec.direction == probes::Direction::kBidirectional;
    bidirectional = bidirectional || both;
    largest = std::max(largest, spec.size_bytes);
    needed = std::max(needed, both ? 2 * spec.size_bytes : spec.size_bytes);
  }
  if (config.pinned_cap_bytes >= needed) return;
  const std::string problem = "pinned memory cap " + probes::FormatSize(config.pinned_cap_bytes) +
                              " is below the " + probes::FormatSize(needed) +
                              " the probes need (largest size " + probes::FormatSize(largest) +
                              (bidirectional ? " x 2 for the bidirectional probe)" : ")");
  const std::string fix =
      "set pinned_cap = \"" + probes::FormatSize(needed) + "\" or more, or use smaller sizes";
  if (const toml::node* cap = r.Find("pinned_cap")) r.Fail(*cap, "pinned_cap", problem, fix);
  const toml::node* sizes = r.Find("sizes");
  r.FailAt(sizes ? LineOf(*sizes) : 0, "sizes", problem, fix);
}

void ReadGpus(const TableReader& r, Config& config) {
  if (const toml::array* gpus = r.Array("gpus", true, "[\"0\"]")) {
    config.gpus.clear();
    std::set<std::string> seen;
    for (const toml::node& element : *gpus) {
      std::string id = GpuId(r, element, "gpus");
      if (!seen.insert(id).second) {
        r.Fail(element, "gpus", "GPU " + Quote(id) + " is listed twice", "list each GPU once");
      }
      config.gpus.push_back(std::move(id));
    }
  }
}

// Concurrent groups and how many histograms are kept.
void ReadConcurrentAndHistograms(const TableReader& r, bool simulate, Config& config) {
  if (auto v = r.Bool("concurrent")) config.concurrent = *v;
  const milliseconds min_interval = simulate ? milliseconds(10) : milliseconds(1000);
  if (auto v =
          r.Duration("concurrent_interval", min_interval, milliseconds(24 * 3600 * 1000), "15m")) {
    config.concurrent_interval = *v;
  }
  if (auto v = r.String("histograms", "\"all\"")) {
    if (*v == "all") {
      config.histograms = core::Settings::Histograms::kAll;
    } else if (*v == "headline") {
      config.histograms = core::Settings::Histograms::kHeadline;
    } else {
      r.Fail(*r.Find("histograms"), "histograms", "unknown profile " + Quote(*v),
             "write histograms = \"all\" (every probe) or \"headline\" (pinned h2d and d2h "
             "only)");
    }
  }
}

}  // namespace

void ReadProbe(const std::string& file, const toml::table& root, bool simulate, Config& config) {
  const toml::table* table = SectionTable(file, root, "probe");
  static const toml::table kEmpty;  // no [probe]: defaults, still checked against each other
  TableReader r(file, table ? *table : kEmpty, "probe");
  ReadInterval(r, table != nullptr, simulate, config);
  ReadModes(r, config);
  if (auto v = r.Bool("bidirectional")) config.bidirectional = *v;
  ReadSizes(r, config);
  if (auto v = r.Bool("sizes_follow_link")) config.sizes_follow_link = *v;
  if (auto v = r.Integer("iterations", 1, 10000, 20)) config.iterations = static_cast<int>(*v);
  if (auto v = r.Integer("warmup", 0, 1000, 2)) config.warmup = static_cast<int>(*v);
  ReadTimers(r, simulate, config);
  ReadProbeTime(r, config);
  if (auto v = r.Number("max_duty_cycle", 0, 1, true, 0.01)) config.max_duty_cycle = *v;
  // Device time kept for fast confirmation; more than a few seconds would let a fault burst
  // far past the duty cycle.
  if (auto v = r.Duration("burst_reserve", milliseconds(0), milliseconds(10000), "1s")) {
    config.burst_reserve_s = std::chrono::duration<double>(*v).count();
  }
  if (auto v = r.Integer("streams", 1, probes::kMaxStreams, 4)) {
    config.streams = static_cast<int>(*v);
  }
  if (auto v = r.Size("chunk", probes::kMinChunkBytes, kGiB, "1MiB")) config.chunk_bytes = *v;
  if (auto v = r.Size("pinned_cap", kKiB, 1ull << 40, "512MiB")) config.pinned_cap_bytes = *v;
  CheckPinnedCap(r, config);
  ReadGpus(r, config);
  ReadConcurrentAndHistograms(r, simulate, config);
  r.RejectUnknown();
}

}  // namespace xferd::config
