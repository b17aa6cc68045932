// [probe]: what is measured, how often, and within what time and device-time budget.
#include <algorithm>
#include <set>

#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "config/units.h"
#include "xferd/probes/types.h"

namespace xferd::config {
namespace {

constexpr std::uint64_t kKiB = 1ull << 10;
constexpr std::uint64_t kGiB = 1ull << 30;

}  // namespace

void ReadProbe(const std::string& file, const toml::table& root, bool simulate, Config& config) {
  const toml::table* table = SectionTable(file, root, "probe");
  static const toml::table kEmpty;  // no [probe]: defaults, still checked against each other
  TableReader r(file, table ? *table : kEmpty, "probe");
  // A real GPU is probed at most once a second; the simulated device may go much faster
  // so tests and soaks can run thousands of cycles.
  const milliseconds min_interval = simulate ? milliseconds(10) : milliseconds(1000);
  if (table) {
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

  const toml::node* sizes_node = r.Find("sizes");
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
  if (auto v = r.Integer("iterations", 1, 10000, 20)) config.iterations = static_cast<int>(*v);
  if (auto v = r.Integer("warmup", 0, 1000, 2)) config.warmup = static_cast<int>(*v);

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

  if (auto v = r.Number("max_duty_cycle", 0, 1, true, 0.01)) config.max_duty_cycle = *v;
  if (auto v = r.Integer("streams", 1, probes::kMaxStreams, 4))
    config.streams = static_cast<int>(*v);
  if (auto v = r.Size("chunk", probes::kMinChunkBytes, kGiB, "1MiB")) config.chunk_bytes = *v;
  const std::uint64_t largest = *std::max_element(config.sizes.begin(), config.sizes.end());
  if (auto v = r.Size("pinned_cap", kKiB, 1ull << 40, "512MiB")) config.pinned_cap_bytes = *v;
  // Pinned probes need one host buffer of the largest size; both-ways needs two.
  const bool pinned_used =
      std::any_of(config.modes.begin(), config.modes.end(), [](probes::TransferMode m) {
        return m == probes::TransferMode::kPinned || m == probes::TransferMode::kPinnedAsync ||
               m == probes::TransferMode::kZeroCopy;
      });
  const bool bidir =
      config.bidirectional && std::find(config.modes.begin(), config.modes.end(),
                                        probes::TransferMode::kPinned) != config.modes.end();
  const std::uint64_t needed = bidir ? 2 * largest : largest;
  if (pinned_used && config.pinned_cap_bytes < needed) {
    const toml::node* cap = r.Find("pinned_cap");
    const std::string problem = "pinned memory cap " + probes::FormatSize(config.pinned_cap_bytes) +
                                " is below the " + probes::FormatSize(needed) +
                                " the probes need (largest size " + probes::FormatSize(largest) +
                                (bidir ? " x 2 for the bidirectional probe)" : ")");
    const std::string fix =
        "set pinned_cap = \"" + probes::FormatSize(needed) + "\" or more, or use smaller sizes";
    if (cap) r.Fail(*cap, "pinned_cap", problem, fix);
    r.FailAt(sizes_node ? LineOf(*sizes_node) : 0, "sizes", problem, fix);
  }

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
  r.RejectUnknown();
}

}  // namespace xferd::config
