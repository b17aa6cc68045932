#include "config/toml_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "config/messages.h"
#include "config/simulate_faults.h"
#include "config/units.h"
#include "xferd/probes/types.h"

namespace xferd::config {

namespace {

bool LooksLikeGpuId(std::string_view id) {
  if (!id.empty() &&
      std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return id.size() <= 4;
  }
  for (std::string_view prefix : {"GPU-", "MIG-", "SIM-"}) {
    if (id.size() > prefix.size() && id.substr(0, prefix.size()) == prefix) {
      return std::all_of(id.begin() + static_cast<std::ptrdiff_t>(prefix.size()), id.end(),
                         [](unsigned char c) { return std::isxdigit(c) || c == '-' || c == '/'; });
    }
  }
  return false;
}

}  // namespace

const std::vector<Section>& Schema() {
  static const std::vector<Section> kSchema = {
      {"", {"web", "daemon", "probe", "busy", "health", "metrics", "simulate"}},
      {"web",
       {"listen_address", "telemetry_path", "config_file", "reload_may_remove_protection",
        "health_socket"}},
      {"daemon", {"state_dir", "textfile_path", "log_level"}},
      {"probe", {"interval",       "jitter",
                 "modes",          "bidirectional",
                 "sizes",          "sizes_follow_link",
                 "iterations",     "min_iterations",
                 "probe_time",     "warmup",
                 "deadline",       "cycle_budget",
                 "max_duty_cycle", "burst_reserve",
                 "streams",        "chunk",
                 "pinned_cap",     "gpus",
                 "concurrent",     "concurrent_interval",
                 "histograms"}},
      {"busy", {"enabled", "gpu_utilization_percent", "pcie_bytes_per_second"}},
      {"health",
       {"consecutive_bad", "baseline_window", "drift_fraction", "band_lower_fraction",
        "band_upper_fraction", "band", "link_watch_interval", "link_flap_window",
        "link_flap_transitions"}},
      {"health.band", {"gpu", "lower", "upper"}},
      {"metrics", {"profile"}},
      {"simulate",
       {"enabled",
        "devices",
        "seed",
        "link",
        "link_gen",
        "link_width",
        "idle_link_gen",
        "integrated",
        "time_scale",
        "speedup",
        "fault",
        "gpu_utilization_percent",
        "pcie_bytes_per_second",
        "unsupported",
        "sysfs_root",
        "gpus_per_switch",
        "uplink",
        "numa_nodes",
        "c2c",
        "foreign_traffic_bytes_per_second",
        "foreign_traffic_duty",
        "foreign_traffic_direction",
        "confidential_computing",
        "confidential_computing_ready",
        "mig"}},
      {"simulate.fault", SimulateFaultKeys()},
      {"simulate.mig", {"device", "instances"}},
  };
  return kSchema;
}

std::string TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string (" + Quote(**node.as_string()) + ")";
    case toml::node_type::integer:
      return "an integer (" + std::to_string(**node.as_integer()) + ")";
    case toml::node_type::floating_point:
      return "a number (" + FormatNumber(**node.as_floating_point()) + ")";
    case toml::node_type::boolean:
      return std::string("a boolean (") + (**node.as_boolean() ? "true" : "false") + ")";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

int LineOf(const toml::node& node) {
  return static_cast<int>(node.source().begin.line);
}

void RejectControlCharacters(const std::string& file, const toml::table& root) {
  struct Pending {
    const toml::node* node;
    std::string name;
  };
  std::vector<Pending> stack{{&root, ""}};
  const auto join = [](const std::string& prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
  };
  while (!stack.empty()) {
    const Pending item = std::move(stack.back());
    stack.pop_back();
    if (const auto* table = item.node->as_table()) {
      for (const auto& [key, value] : *table) {
        const std::string_view k = key.str();
        if (std::any_of(k.begin(), k.end(),
                        [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
          throw ConfigError(file, static_cast<int>(key.source().begin.line), join(item.name, k),
                            "a key holds a control character (" +
                                std::string(k.find('\0') != k.npos ? "NUL" : "e.g. a newline") +
                                "); no xferd key does",
                            "write the key as plain text; see deploy/xferd.toml for the keys");
        }
        stack.push_back({&value, join(item.name, k)});
      }
    } else if (const auto* array = item.node->as_array()) {
      for (std::size_t i = 0; i < array->size(); ++i) {
        stack.push_back({array->get(i), item.name + "[" + std::to_string(i) + "]"});
      }
    } else if (const auto* text = item.node->as_string()) {
      if ((**text).find('\0') != std::string::npos) {
        throw ConfigError(file, LineOf(*item.node), item.name,
                          "the string holds a NUL character (\\u0000), which would cut it short "
                          "where it is used (a path ends there): " +
                              Quote(**text),
                          "remove the \\u0000 escape (or the NUL byte) from the string");
      }
    }
  }
}

std::string TableReader::KeyName(std::string_view key) const {
  const std::string& prefix = display_.empty() ? section_ : display_;
  return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
}

void TableReader::Fail(const toml::node& node, std::string_view key, std::string problem,
                       std::string fix) const {
  throw ConfigError(file_, LineOf(node), KeyName(key), std::move(problem), std::move(fix));
}

void TableReader::FailAt(int line, std::string_view key, std::string problem,
                         std::string fix) const {
  throw ConfigError(file_, line, KeyName(key), std::move(problem), std::move(fix));
}

std::optional<bool> TableReader::Bool(std::string_view key) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  if (const auto* b = node->as_boolean()) return **b;
  Fail(*node, key, "must be true or false, got " + TypeName(*node),
       "write " + std::string(key) + " = true or " + std::string(key) + " = false (no quotes)");
}

std::optional<std::int64_t> TableReader::Integer(std::string_view key, std::int64_t min,
                                                 std::int64_t max, std::int64_t suggestion) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  const std::string example = std::string(key) + " = " + std::to_string(suggestion);
  const auto* i = node->as_integer();
  if (!i) {
    std::string fix = "write a whole number without quotes, e.g. " + example;
    Fail(*node, key, "must be an integer, got " + TypeName(*node), fix);
  }
  const std::int64_t value = **i;
  if (value < min || value > max) {
    Fail(*node, key,
         "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
             std::to_string(value),
         "set " + example);
  }
  return value;
}

std::optional<double> TableReader::Number(std::string_view key, double min, double max,
                                          bool open_min, double suggestion) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  const std::string example = std::string(key) + " = " + FormatNumber(suggestion);
  double value = 0;
  if (const auto* f = node->as_floating_point())
    value = **f;
  else if (const auto* i = node->as_integer())
    value = static_cast<double>(**i);
  else
    Fail(*node, key, "must be a number, got " + TypeName(*node), "write e.g. " + example);
  const bool low = open_min ? !(value > min) : !(value >= min);
  if (!std::isfinite(value) || low || value > max) {
    std::string range = open_min ? "greater than " + FormatNumber(min) + " and at most "
                                 : "between " + FormatNumber(min) + " and ";
    range += FormatNumber(max);
    Fail(*node, key, "must be " + range + ", got " + FormatNumber(value), "set " + example);
  }
  return value;
}

std::optional<std::string> TableReader::String(std::string_view key,
                                               std::string_view example) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  if (const auto* s = node->as_string()) return **s;
  Fail(*node, key, "must be a string, got " + TypeName(*node),
       "quote it, e.g. " + std::string(key) + " = " + std::string(example));
}

std::optional<milliseconds> TableReader::Duration(std::string_view key, milliseconds min,
                                                  milliseconds max,
                                                  std::string_view suggestion) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  const std::string example = std::string(key) + " = \"" + std::string(suggestion) + "\"";
  const auto* s = node->as_string();
  if (!s) {
    Fail(*node, key, "must be a duration string like \"60s\", got " + TypeName(*node),
         "write " + example + " (units: ms, s, m, h)");
  }
  const auto value = ParseDuration(**s);
  if (!value) {
    Fail(*node, key, "is not a duration: " + Quote(**s),
         "write " + example + " (a number and one of the units ms, s, m, h)");
  }
  if (*value < min) {
    Fail(*node, key, "must be at least " + FormatDuration(min) + ", got " + Quote(**s),
         "set " + example + " or longer");
  }
  if (*value > max) {
    Fail(*node, key, "must be at most " + FormatDuration(max) + ", got " + Quote(**s),
         "set " + example + " or shorter");
  }
  return value;
}

std::uint64_t TableReader::SizeValue(const toml::node& node, std::string_view key,
                                     std::uint64_t min, std::uint64_t max,
                                     const std::string& example) const {
  std::optional<std::uint64_t> bytes;
  std::string shown;
  if (const auto* s = node.as_string()) {
    bytes = probes::ParseSize(**s);
    shown = Quote(**s);
    if (!bytes) {
      Fail(node, key, "is not a size: " + shown,
           "write e.g. " + example + " (a whole number and B, KiB, MiB or GiB)");
    }
  } else if (const auto* i = node.as_integer()) {
    if (**i < 0)
      Fail(node, key, "must not be negative, got " + std::to_string(**i), "write " + example);
    bytes = static_cast<std::uint64_t>(**i);
    shown = std::to_string(**i);
  } else {
    Fail(node, key, "must be a size like \"64MiB\", got " + TypeName(node), "write " + example);
  }
  if (*bytes < min || *bytes > max) {
    Fail(node, key,
         "must be between " + probes::FormatSize(min) + " and " + probes::FormatSize(max) +
             ", got " + shown,
         "set " + example);
  }
  return *bytes;
}

std::optional<std::uint64_t> TableReader::Size(std::string_view key, std::uint64_t min,
                                               std::uint64_t max,
                                               std::string_view suggestion) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  return SizeValue(*node, key, min, max,
                   std::string(key) + " = \"" + std::string(suggestion) + "\"");
}

std::optional<double> TableReader::Bandwidth(std::string_view key, std::string_view suggestion,
                                             bool allow_zero) const {
  const toml::node* node = Find(key);
  if (!node) return std::nullopt;
  const std::string example = std::string(key) + " = \"" + std::string(suggestion) + "\"";
  double value = 0;
  if (const auto* s = node->as_string()) {
    const auto parsed = ParseBandwidth(**s);
    if (!parsed) {
      Fail(*node, key, "is not a bandwidth: " + Quote(**s),
           "write e.g. " + example +
               " (units B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, "
               "GiB/s, TiB/s; or a number of bytes per second)");
    }
    value = *parsed;
  } else if (const auto* f = node->as_floating_point()) {
    value = **f;
  } else if (const auto* i = node->as_integer()) {
    value = static_cast<double>(**i);
  } else {
    Fail(*node, key, "must be a bandwidth like \"20GB/s\", got " + TypeName(*node),
         "write " + example);
  }
  // 1 KB/s .. 10 TB/s: anything outside is a unit mistake, not a real link.
  if (allow_zero && value == 0) return value;
  if (!std::isfinite(value) || value < 1e3 || value > 1e13) {
    Fail(*node, key, "must be between 1KB/s and 10TB/s, got " + FormatNumber(value) + " bytes/s",
         "write " + example + " (plain numbers are bytes per second)");
  }
  return value;
}

const toml::array* TableReader::Array(std::string_view key, bool allow_empty,
                                      std::string_view example) const {
  const toml::node* node = Find(key);
  if (!node) return nullptr;
  const auto* array = node->as_array();
  if (!array) {
    Fail(*node, key, "must be an array, got " + TypeName(*node),
         "write " + std::string(key) + " = " + std::string(example));
  }
  if (array->empty() && !allow_empty) {
    Fail(*node, key, "must not be empty",
         "list at least one, e.g. " + std::string(key) + " = " + std::string(example));
  }
  return array;
}

void TableReader::RejectUnknown() const {
  const Section* section = nullptr;
  for (const Section& s : Schema()) {
    if (s.name == section_) section = &s;
  }
  for (const auto& [k, node] : table_) {
    const std::string_view key = k.str();
    if (section &&
        std::find(section->keys.begin(), section->keys.end(), key) != section->keys.end())
      continue;
    const int line = static_cast<int>(k.source().begin.line);
    std::string fix = Suggest(key);
    if (section_.empty()) {
      throw ConfigError(file_, line, std::string(key), "unknown section or key at the top level",
                        fix);
    }
    throw ConfigError(file_, line, KeyName(key), "unknown key", fix);
  }
}

std::string TableReader::Suggest(std::string_view key) const {
  // Same section first, then a key of that exact name elsewhere, then sections.
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, key.size() / 3) + 1;
  for (const Section& s : Schema()) {
    if (s.name != section_) continue;
    for (std::string_view known : s.keys) {
      const std::size_t d = EditDistance(key, known);
      if (d < best_distance) best_distance = d, best = std::string(known);
    }
  }
  if (!best.empty() && section_.empty()) return "did you mean [" + best + "]?";
  if (!best.empty()) return "did you mean " + best + "? (check the spelling)";
  for (const Section& s : Schema()) {
    if (s.name == section_) continue;
    for (std::string_view known : s.keys) {
      if (known == key) {
        return std::string(key) + " belongs in [" + std::string(s.name) + "]; move it there";
      }
    }
  }
  if (section_.empty()) {
    return "remove it; the sections are [web], [daemon], [probe], [busy], [health] and "
           "[simulate] (see deploy/xferd.toml)";
  }
  std::string known_list;
  for (const Section& s : Schema()) {
    if (s.name != section_) continue;
    for (std::string_view known : s.keys) {
      if (!known_list.empty()) known_list += ", ";
      known_list += known;
    }
  }
  return "remove it; [" + section_ + "] knows " + known_list;
}

const toml::table* SectionTable(const std::string& file, const toml::table& root,
                                std::string_view name) {
  const toml::node* node = root.get(name);
  if (!node) return nullptr;
  if (const auto* table = node->as_table()) return table;
  throw ConfigError(file, LineOf(*node), std::string(name),
                    "must be a section, got " + TypeName(*node),
                    "write it as a [" + std::string(name) + "] header with keys under it");
}

std::string GpuId(const TableReader& r, const toml::node& node, std::string_view key) {
  std::string id;
  if (const auto* i = node.as_integer()) {
    if (**i < 0 || **i > 9999)
      r.Fail(node, key, "GPU index must be 0 or more, got " + std::to_string(**i),
             "use the index nvidia-smi shows, e.g. \"0\"");
    id = std::to_string(**i);
  } else if (const auto* s = node.as_string()) {
    id = **s;
  } else {
    r.Fail(node, key, "a GPU must be an index or a UUID string, got " + TypeName(node),
           "write e.g. \"0\" or \"GPU-5c3b6a2e-...\" (nvidia-smi -L shows both)");
  }
  if (!LooksLikeGpuId(id)) {
    r.Fail(node, key, Quote(id) + " is neither a GPU index nor a UUID",
           "write an index such as \"0\" or a UUID such as \"GPU-5c3b6a2e-...\" (nvidia-smi -L "
           "shows both)");
  }
  return id;
}

}  // namespace xferd::config
