// TOML -> validated Config. Every check that can fail names file, line, key and the fix,
// because the reader of the message is an operator with a text editor, not a developer.
#include "config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <toml++/toml.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>

namespace xferd::config {
namespace {

using std::chrono::milliseconds;

constexpr std::uint64_t kKiB = 1ull << 10;
constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;
// Config files are a few KiB; anything this large is the wrong file.
constexpr std::size_t kMaxConfigBytes = 1u << 20;

// The schema: every section and the keys it may hold. Unknown keys are looked up here
// for a "did you mean" suggestion, across sections too (a key in the wrong section).
struct Section {
  std::string_view name;
  std::vector<std::string_view> keys;
};
const std::vector<Section>& Schema() {
  static const std::vector<Section> kSchema = {
      {"", {"web", "daemon", "probe", "busy", "health", "simulate"}},
      {"web", {"listen_address", "telemetry_path", "config_file"}},
      {"daemon", {"state_dir", "textfile_path", "log_level"}},
      {"probe",
       {"interval", "jitter", "modes", "bidirectional", "sizes", "iterations", "warmup", "deadline",
        "cycle_budget", "max_duty_cycle", "streams", "chunk", "pinned_cap", "gpus"}},
      {"busy", {"enabled", "gpu_utilization_percent", "pcie_bytes_per_second"}},
      {"health",
       {"consecutive_bad", "baseline_window", "drift_fraction", "band_lower_fraction",
        "band_upper_fraction", "band"}},
      {"health.band", {"gpu", "lower", "upper"}},
      {"simulate",
       {"enabled", "devices", "seed", "link", "link_gen", "link_width", "integrated", "time_scale",
        "fault", "gpu_utilization_percent", "pcie_bytes_per_second", "unsupported"}},
      {"simulate.fault", {"kind", "device", "factor", "gen", "width", "every"}},
  };
  return kSchema;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (text.size() > 80) out += "...";
  return out + "\"";
}

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
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

}  // namespace

// ---------------------------------------------------------------------------------------
// Value syntaxes shared with other parts (durations, bandwidths) live here, in the one
// place that parses config.

std::optional<milliseconds> ParseDuration(std::string_view text) {
  // <number><unit>, unit one of ms, s, m, h; fractions allowed ("1.5s").
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0 || i == text.size()) return std::nullopt;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || ptr != text.data() + i || !std::isfinite(value)) return std::nullopt;
  const std::string_view unit = text.substr(i);
  double scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1e3;
  else if (unit == "m")
    scale = 60e3;
  else if (unit == "h")
    scale = 3600e3;
  else
    return std::nullopt;
  const double ms = value * scale;
  if (ms > 365.0 * 24 * 3600e3) return std::nullopt;  // also keeps the cast below defined
  return milliseconds(static_cast<std::int64_t>(std::llround(ms)));
}

std::string FormatDuration(milliseconds duration) {
  const std::int64_t ms = duration.count();
  if (ms != 0 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms != 0 && ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::optional<double> ParseBandwidth(std::string_view text) {
  // A number (decimal or exponent) then an optional unit: bytes per second, SI or binary.
  std::size_t start = 0;
  while (start < text.size() && text[start] == ' ') ++start;
  text.remove_prefix(start);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data() || !std::isfinite(value) || value < 0)
    return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  while (!unit.empty() && unit.back() == ' ') unit.remove_suffix(1);
  static const std::pair<std::string_view, double> kUnits[] = {{"", 1},
                                                               {"B/s", 1},
                                                               {"KB/s", 1e3},
                                                               {"MB/s", 1e6},
                                                               {"GB/s", 1e9},
                                                               {"TB/s", 1e12},
                                                               {"KiB/s", 1024.0},
                                                               {"MiB/s", 1048576.0},
                                                               {"GiB/s", 1073741824.0},
                                                               {"TiB/s", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) return value * scale;
  }
  return std::nullopt;
}

std::string FormatBandwidth(double bytes_per_s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4gGB/s", bytes_per_s / 1e9);
  return buf;
}

// ---------------------------------------------------------------------------------------

namespace {

std::string ErrorText(const std::string& file, int line, const std::string& key,
                      const std::string& problem, const std::string& fix) {
  std::string text = file.empty() ? "<config>" : file;
  if (line > 0) text += ":" + std::to_string(line);
  text += ": ";
  if (!key.empty()) text += key + ": ";
  text += problem;
  if (!fix.empty()) text += "; fix: " + fix;
  return text;
}

}  // namespace

ConfigError::ConfigError(std::string file, int line, std::string key, std::string problem,
                         std::string fix)
    : std::runtime_error(ErrorText(file, line, key, problem, fix)),
      file_(std::move(file)),
      line_(line),
      key_(std::move(key)),
      problem_(std::move(problem)),
      fix_(std::move(fix)) {}

namespace {

// Reads one TOML table against the schema: typed getters that throw ConfigError with the
// key's line, and a final check that rejects keys nobody asked for.
class TableReader {
 public:
  TableReader(std::string file, const toml::table& table, std::string section)
      : file_(std::move(file)), table_(table), section_(std::move(section)) {}

  // `display` overrides the key prefix in messages ("health.band[1]" for an array entry).
  void SetDisplayPrefix(std::string prefix) { display_ = std::move(prefix); }

  std::string KeyName(std::string_view key) const {
    const std::string& prefix = display_.empty() ? section_ : display_;
    return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
  }

  int TableLine() const { return LineOf(table_); }

  [[noreturn]] void Fail(const toml::node& node, std::string_view key, std::string problem,
                         std::string fix) const {
    throw ConfigError(file_, LineOf(node), KeyName(key), std::move(problem), std::move(fix));
  }
  [[noreturn]] void FailAt(int line, std::string_view key, std::string problem,
                           std::string fix) const {
    throw ConfigError(file_, line, KeyName(key), std::move(problem), std::move(fix));
  }

  const toml::node* Find(std::string_view key) const { return table_.get(key); }

  std::optional<bool> Bool(std::string_view key) const {
    const toml::node* node = Find(key);
    if (!node) return std::nullopt;
    if (const auto* b = node->as_boolean()) return **b;
    Fail(*node, key, "must be true or false, got " + TypeName(*node),
         "write " + std::string(key) + " = true or " + std::string(key) + " = false (no quotes)");
  }

  std::optional<std::int64_t> Integer(std::string_view key, std::int64_t min, std::int64_t max,
                                      std::int64_t suggestion) const {
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

  // A number (integer or float) in [min, max] or, when `open_min`, in (min, max].
  std::optional<double> Number(std::string_view key, double min, double max, bool open_min,
                               double suggestion) const {
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

  std::optional<std::string> String(std::string_view key, std::string_view example) const {
    const toml::node* node = Find(key);
    if (!node) return std::nullopt;
    if (const auto* s = node->as_string()) return **s;
    Fail(*node, key, "must be a string, got " + TypeName(*node),
         "quote it, e.g. " + std::string(key) + " = " + std::string(example));
  }

  std::optional<milliseconds> Duration(std::string_view key, milliseconds min, milliseconds max,
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

  // One size: a string ("64MiB") or a number of bytes. `example` is the line to suggest.
  std::uint64_t SizeValue(const toml::node& node, std::string_view key, std::uint64_t min,
                          std::uint64_t max, const std::string& example) const {
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

  std::optional<std::uint64_t> Size(std::string_view key, std::uint64_t min, std::uint64_t max,
                                    std::string_view suggestion) const {
    const toml::node* node = Find(key);
    if (!node) return std::nullopt;
    return SizeValue(*node, key, min, max,
                     std::string(key) + " = \"" + std::string(suggestion) + "\"");
  }

  // `allow_zero`: 0 is a meaningful value (an idle simulated link), not a unit mistake.
  std::optional<double> Bandwidth(std::string_view key, std::string_view suggestion,
                                  bool allow_zero = false) const {
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

  // An array whose elements all pass `each`; empty arrays rejected when !allow_empty.
  const toml::array* Array(std::string_view key, bool allow_empty, std::string_view example) const {
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

  // Rejects keys this section does not know, with the closest known one as a suggestion.
  void RejectUnknown() const {
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

 private:
  std::string Suggest(std::string_view key) const {
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

  std::string file_;
  const toml::table& table_;
  std::string section_;
  std::string display_;
};

// A section is optional; when present it must be a table.
const toml::table* SectionTable(const std::string& file, const toml::table& root,
                                std::string_view name) {
  const toml::node* node = root.get(name);
  if (!node) return nullptr;
  if (const auto* table = node->as_table()) return table;
  throw ConfigError(file, LineOf(*node), std::string(name),
                    "must be a section, got " + TypeName(*node),
                    "write it as a [" + std::string(name) + "] header with keys under it");
}

void CheckListenAddress(const TableReader& reader, const toml::node& node,
                        const std::string& address) {
  const std::string fix =
      "write listen_address = \":9742\" (all interfaces), \"127.0.0.1:9742\" or \"[::1]:9742\"";
  const auto bad = [&](const std::string& why) {
    reader.Fail(node, "listen_address", "invalid address " + Quote(address) + ": " + why, fix);
  };
  std::string host, port;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string::npos) bad("'[' without a closing ']'");
    host = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':')
      bad("no :port after the IPv6 address");
    port = address.substr(close + 2);
    in6_addr v6{};
    if (inet_pton(AF_INET6, host.c_str(), &v6) != 1) bad(Quote(host) + " is not an IPv6 address");
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) bad("no port (the form is host:port or :port)");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string::npos) bad("an IPv6 address needs brackets: [::1]:9742");
    for (char c : host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
        bad("the host may hold only letters, digits, '.' and '-'");
      }
    }
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); })) {
    bad("the port must be a number from 0 to 65535");
  }
  if (std::stoi(port) > 65535) bad("the port must be a number from 0 to 65535");
}

std::filesystem::path ResolveAgainst(const std::filesystem::path& base_file,
                                     const std::filesystem::path& path) {
  if (path.empty() || path.is_absolute()) return path;
  return base_file.parent_path() / path;
}

void ReadWeb(const std::string& file, const std::filesystem::path& source, const toml::table& root,
             Config& config) {
  const toml::table* table = SectionTable(file, root, "web");
  if (!table) return;
  TableReader r(file, *table, "web");
  if (auto v = r.String("listen_address", "\":9742\"")) {
    CheckListenAddress(r, *r.Find("listen_address"), *v);
    config.listen_address = *v;
  }
  if (auto v = r.String("telemetry_path", "\"/metrics\"")) {
    const toml::node& node = *r.Find("telemetry_path");
    const std::string fix = "write telemetry_path = \"/metrics\"";
    if (v->empty() || v->front() != '/')
      r.Fail(node, "telemetry_path", "must start with '/', got " + Quote(*v), fix);
    if (*v == "/" || *v == "/healthz") {
      r.Fail(node, "telemetry_path",
             Quote(*v) + " is taken by the " + (*v == "/" ? "landing page" : "health check"), fix);
    }
    for (char c : *v) {
      const auto u = static_cast<unsigned char>(c);
      if (u <= 0x20 || u == 0x7f || c == '?' || c == '#' || c == '%') {
        r.Fail(node, "telemetry_path",
               "must be a plain path without spaces, '?', '#' or '%', got " + Quote(*v), fix);
      }
    }
    config.telemetry_path = *v;
  }
  if (auto v = r.String("config_file", "\"/etc/xferd/web-config.yml\"")) {
    if (v->empty()) {
      r.Fail(*r.Find("config_file"), "config_file", "must not be empty",
             "remove the line for plain HTTP, or name the web-config YAML file");
    }
    config.web_config_file = ResolveAgainst(source, *v);
  }
  r.RejectUnknown();
}

void ReadDaemon(const std::string& file, const std::filesystem::path& source,
                const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "daemon");
  if (!table) return;
  TableReader r(file, *table, "daemon");
  if (auto v = r.String("state_dir", "\"/var/lib/xferd\"")) {
    if (v->empty())
      r.Fail(*r.Find("state_dir"), "state_dir", "must not be empty",
             "write state_dir = \"/var/lib/xferd\"");
    config.state_dir = ResolveAgainst(source, *v);
  }
  if (auto v = r.String("textfile_path", "\"/var/lib/prometheus/node-exporter/xferd.prom\"")) {
    if (!v->empty()) {
      const std::filesystem::path path(*v);
      if (path.extension() != ".prom" || path.filename() == ".prom") {
        r.Fail(*r.Find("textfile_path"), "textfile_path",
               "node_exporter's textfile collector reads only *.prom files, got " + Quote(*v),
               "name a file ending in .prom, e.g. textfile_path = "
               "\"/var/lib/prometheus/node-exporter/xferd.prom\", or \"\" for none");
      }
    }
    config.textfile_path = ResolveAgainst(source, *v);
  }
  if (auto v = r.String("log_level", "\"info\"")) {
    static const std::set<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                  "error", "critical", "off"};
    if (!kLevels.contains(*v)) {
      r.Fail(*r.Find("log_level"), "log_level", "unknown level " + Quote(*v),
             "use one of trace, debug, info, warn, error, critical, off");
    }
    config.log_level = *v;
  }
  r.RejectUnknown();
}

std::string ModeList() {
  std::string list;
  for (probes::TransferMode mode : probes::kAllModes) {
    if (!list.empty()) list += ", ";
    list += probes::ToString(mode);
  }
  return list;
}

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

// The ID of a GPU in config: an index ("0" or 0) or a UUID string.
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
               "use names from: " + ModeList());
      const auto mode = probes::ParseMode(**s);
      if (!mode)
        r.Fail(element, "modes", "unknown mode " + Quote(**s), "use names from: " + ModeList());
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
    for (const toml::node& element : *sizes) {
      const std::uint64_t bytes = r.SizeValue(element, "sizes", kKiB, kGiB, "sizes = [\"64MiB\"]");
      if (std::find(config.sizes.begin(), config.sizes.end(), bytes) != config.sizes.end()) {
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
  if (auto v = r.Integer("streams", 1, 64, 4)) config.streams = static_cast<int>(*v);
  if (auto v = r.Size("chunk", 256 * kKiB, kGiB, "1MiB")) config.chunk_bytes = *v;
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
    for (const toml::node& element : *gpus) {
      std::string id = GpuId(r, element, "gpus");
      if (std::find(config.gpus.begin(), config.gpus.end(), id) != config.gpus.end()) {
        r.Fail(element, "gpus", "GPU " + Quote(id) + " is listed twice", "list each GPU once");
      }
      config.gpus.push_back(std::move(id));
    }
  }
  r.RejectUnknown();
}

void ReadBusy(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "busy");
  if (!table) return;
  TableReader r(file, *table, "busy");
  if (auto v = r.Bool("enabled")) config.busy_detection = *v;
  if (auto v = r.Number("gpu_utilization_percent", 0, 100, true, 50))
    config.busy_gpu_utilization_percent = *v;
  if (auto v = r.Bandwidth("pcie_bytes_per_second", "2GB/s")) config.busy_pcie_bytes_per_s = *v;
  r.RejectUnknown();
}

void ReadHealth(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "health");
  if (!table) return;
  TableReader r(file, *table, "health");
  if (auto v = r.Integer("consecutive_bad", 1, 1000, 3))
    config.consecutive_bad = static_cast<int>(*v);
  if (auto v = r.Integer("baseline_window", 1, 10000, 20))
    config.baseline_window = static_cast<int>(*v);
  if (auto v = r.Number("drift_fraction", 0, 1, true, 0.8)) config.drift_fraction = *v;
  if (auto v = r.Number("band_lower_fraction", 0, 1, true, 0.63)) config.band_lower_fraction = *v;
  if (auto v = r.Number("band_upper_fraction", 0, 1, true, 0.83)) config.band_upper_fraction = *v;
  if (config.band_lower_fraction > config.band_upper_fraction) {
    const char* key = r.Find("band_lower_fraction") ? "band_lower_fraction" : "band_upper_fraction";
    r.Fail(*r.Find(key), key,
           "band_lower_fraction (" + FormatNumber(config.band_lower_fraction) +
               ") is above band_upper_fraction (" + FormatNumber(config.band_upper_fraction) + ")",
           "keep lower below upper, e.g. 0.63 and 0.83");
  }

  if (const toml::node* bands_node = r.Find("band")) {
    const auto* bands = bands_node->as_array();
    if (!bands || !bands->is_array_of_tables()) {
      r.Fail(*bands_node, "band",
             "must be a list of [[health.band]] tables, got " + TypeName(*bands_node),
             "write each band as\n  [[health.band]]\n  gpu = \"0\"\n  lower = \"20GB/s\"\n  upper "
             "= \"26GB/s\"");
    }
    config.bands.clear();
    for (std::size_t i = 0; i < bands->size(); ++i) {
      const toml::table& band_table = *bands->get(i)->as_table();
      TableReader b(file, band_table, "health.band");
      b.SetDisplayPrefix("health.band[" + std::to_string(i) + "]");
      BandOverride band;
      const toml::node* gpu = b.Find("gpu");
      if (!gpu)
        b.FailAt(b.TableLine(), "gpu", "missing: which GPU the band is for",
                 "add gpu = \"0\" (an index or a UUID)");
      band.gpu = GpuId(b, *gpu, "gpu");
      const auto lower = b.Bandwidth("lower", "20GB/s");
      const auto upper = b.Bandwidth("upper", "26GB/s");
      if (!lower)
        b.FailAt(b.TableLine(), "lower", "missing: the band's lower bound",
                 "add lower = \"20GB/s\"");
      if (!upper)
        b.FailAt(b.TableLine(), "upper", "missing: the band's upper bound",
                 "add upper = \"26GB/s\"");
      if (*lower > *upper) {
        b.Fail(*b.Find("lower"), "lower",
               "lower bound " + FormatBandwidth(*lower) + " is above the upper bound " +
                   FormatBandwidth(*upper),
               "swap them or correct the units");
      }
      for (const BandOverride& other : config.bands) {
        if (other.gpu == band.gpu) {
          b.Fail(*gpu, "gpu", "GPU " + Quote(band.gpu) + " already has a band",
                 "keep one [[health.band]] per GPU");
        }
      }
      band.lower_bytes_per_s = *lower;
      band.upper_bytes_per_s = *upper;
      b.RejectUnknown();
      config.bands.push_back(std::move(band));
    }
  }
  r.RejectUnknown();
}

bool ValidWidth(std::int64_t width) {
  return width == 1 || width == 2 || width == 4 || width == 8 || width == 12 || width == 16 ||
         width == 32;
}

void ReadSimulate(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "simulate");
  if (!table) return;
  TableReader r(file, *table, "simulate");
  if (auto v = r.Bool("enabled")) config.simulate = *v;
  if (auto v = r.Integer("devices", 1, 64, 1)) config.sim.devices = static_cast<int>(*v);
  if (auto v = r.Integer("seed", 0, INT64_MAX, 1)) config.sim.seed = static_cast<std::uint64_t>(*v);
  const toml::node* link = r.Find("link");
  if (link && (r.Find("link_gen") || r.Find("link_width"))) {
    r.Fail(*link, "link", "set either link or link_gen/link_width, not both",
           "keep link = \"gen4x16\" and remove link_gen and link_width");
  }
  if (auto v = r.String("link", "\"gen4x16\"")) {
    // "gen4x16": the generation and lane count the simulated GPU trained to at best.
    static const std::regex kLink("[Gg][Ee][Nn]([1-6])[Xx]([0-9]{1,2})");
    std::smatch m;
    if (!std::regex_match(*v, m, kLink) || !ValidWidth(std::stoi(m[2].str()))) {
      r.Fail(*link, "link", "not a PCIe link: " + Quote(*v),
             "write link = \"gen4x16\" (gen 1-6, width 1, 2, 4, 8, 12, 16 or 32)");
    }
    config.sim.link_gen = std::stoi(m[1].str());
    config.sim.link_width = std::stoi(m[2].str());
  }
  if (auto v = r.Integer("link_gen", 1, 6, 4)) config.sim.link_gen = static_cast<int>(*v);
  if (auto v = r.Integer("link_width", 1, 32, 16)) {
    if (!ValidWidth(*v))
      r.Fail(*r.Find("link_width"), "link_width", "PCIe has no x" + std::to_string(*v) + " link",
             "use 1, 2, 4, 8, 12, 16 or 32");
    config.sim.link_width = static_cast<int>(*v);
  }
  if (auto v = r.Bool("integrated")) config.sim.integrated = *v;
  if (auto v = r.Number("time_scale", 0, 1000, false, 1)) config.sim.time_scale = *v;
  // The load the simulated GPUs report to busy detection (in place of NVML).
  if (auto v = r.Number("gpu_utilization_percent", 0, 100, false, 90))
    config.sim_gpu_utilization_percent = *v;
  if (auto v = r.Bandwidth("pcie_bytes_per_second", "10GB/s", true))
    config.sim_pcie_bytes_per_s = *v;

  // [simulate.unsupported]: mode = "reason", modes every simulated device cannot do.
  if (const toml::node* node = r.Find("unsupported")) {
    const auto* modes = node->as_table();
    if (!modes) {
      r.Fail(*node, "unsupported", "must be a table of mode = \"reason\", got " + TypeName(*node),
             "write e.g. unsupported = { managed = \"no concurrentManagedAccess\" }");
    }
    for (const auto& [k, reason] : *modes) {
      const std::string key = "unsupported." + std::string(k.str());
      const auto mode = probes::ParseMode(k.str());
      if (!mode)
        r.FailAt(static_cast<int>(k.source().begin.line), key, "unknown mode",
                 "use names from: " + ModeList());
      const auto* text = reason.as_string();
      if (!text || (*text)->empty()) {
        r.Fail(reason, key, "must be the reason as a non-empty string, got " + TypeName(reason),
               "write " + std::string(k.str()) + " = \"why the simulated device cannot do it\"");
      }
      config.sim.unsupported[*mode] = **text;
    }
  }

  if (const toml::node* faults_node = r.Find("fault")) {
    const auto* faults = faults_node->as_array();
    if (!faults || !faults->is_array_of_tables()) {
      r.Fail(*faults_node, "fault",
             "must be a list of [[simulate.fault]] tables, got " + TypeName(*faults_node),
             "write each fault as\n  [[simulate.fault]]\n  kind = \"degrade\"\n  factor = 0.5");
    }
    config.sim.faults.clear();
    for (std::size_t i = 0; i < faults->size(); ++i) {
      const toml::table& fault_table = *faults->get(i)->as_table();
      TableReader f(file, fault_table, "simulate.fault");
      f.SetDisplayPrefix("simulate.fault[" + std::to_string(i) + "]");
      probes::SimFault fault;
      const auto kind_text = f.String("kind", "\"degrade\"");
      std::string kinds;
      for (auto k : {probes::SimFault::Kind::kDegrade, probes::SimFault::Kind::kDownTrain,
                     probes::SimFault::Kind::kErrorEvery, probes::SimFault::Kind::kHang,
                     probes::SimFault::Kind::kSlow, probes::SimFault::Kind::kLost}) {
        kinds += (kinds.empty() ? "" : ", ") + std::string(probes::ToString(k));
      }
      if (!kind_text)
        f.FailAt(f.TableLine(), "kind", "missing: what fault to inject",
                 "add kind = one of " + kinds);
      const auto kind = probes::ParseSimFaultKind(*kind_text);
      if (!kind)
        f.Fail(*f.Find("kind"), "kind", "unknown fault kind " + Quote(*kind_text),
               "use one of " + kinds);
      fault.kind = *kind;
      if (auto v = f.Integer("device", -1, config.sim.devices - 1, -1))
        fault.device = static_cast<int>(*v);
      // Each kind takes only its own parameters, so a misplaced one is not silently ignored.
      const auto only = [&](std::initializer_list<std::string_view> allowed) {
        for (std::string_view key : {"factor", "gen", "width", "every"}) {
          const toml::node* node = f.Find(key);
          if (node && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
            f.Fail(*node, key, "kind " + Quote(*kind_text) + " takes no " + std::string(key),
                   "remove it");
          }
        }
      };
      using Kind = probes::SimFault::Kind;
      switch (fault.kind) {
        case Kind::kDegrade: {
          only({"factor"});
          const auto factor = f.Number("factor", 0, 1, true, 0.5);
          if (!factor)
            f.FailAt(f.TableLine(), "factor", "missing: how much bandwidth is left",
                     "add factor = 0.5 (0 < factor <= 1)");
          fault.factor = *factor;
          break;
        }
        case Kind::kSlow: {
          only({"factor"});
          const auto factor = f.Number("factor", 1, 1e6, false, 10);
          if (!factor)
            f.FailAt(f.TableLine(), "factor", "missing: how many times slower",
                     "add factor = 10 (factor >= 1)");
          fault.factor = *factor;
          break;
        }
        case Kind::kDownTrain: {
          only({"gen", "width"});
          const auto gen = f.Integer("gen", 1, 6, 3);
          const auto width = f.Integer("width", 1, 32, 8);
          if (!gen && !width)
            f.FailAt(f.TableLine(), "gen", "missing: the link it trained down to",
                     "add gen = 3 and/or width = 8");
          if (width && !ValidWidth(*width))
            f.Fail(*f.Find("width"), "width", "PCIe has no x" + std::to_string(*width) + " link",
                   "use 1, 2, 4, 8, 12, 16 or 32");
          fault.gen = gen ? static_cast<int>(*gen) : config.sim.link_gen;
          fault.width = width ? static_cast<int>(*width) : config.sim.link_width;
          break;
        }
        case Kind::kErrorEvery: {
          only({"every"});
          const auto every = f.Integer("every", 1, 1000000, 3);
          if (!every)
            f.FailAt(f.TableLine(), "every", "missing: every how many probes one fails",
                     "add every = 3");
          fault.every = static_cast<int>(*every);
          break;
        }
        case Kind::kHang:
        case Kind::kLost: only({}); break;
      }
      f.RejectUnknown();
      config.sim.faults.push_back(fault);
    }
  }
  r.RejectUnknown();
}

// The keys defined in the text, by line, for parse errors (which toml++ reports by
// position only): `visit(line, key)` for each line up to `last_line` that starts a
// [table] (key = the table) or a bare key (key = table.key); visit returns false to stop.
// One pass: a file may be 1 MiB.
template <typename Visit>
void ForEachKeyLine(std::string_view text, int last_line, Visit visit) {
  std::string table;
  int line = 1;
  std::size_t pos = 0;
  while (pos <= text.size() && line <= last_line) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view row = text.substr(pos, end - pos);
    while (!row.empty() && (row.front() == ' ' || row.front() == '\t')) row.remove_prefix(1);
    if (!row.empty() && row.front() == '[') {
      const std::size_t close = row.find(']');
      std::string_view name = row.substr(0, close == std::string_view::npos ? row.size() : close);
      while (!name.empty() && (name.front() == '[' || name.front() == ' ')) name.remove_prefix(1);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      table = std::string(name);
      if (!visit(line, table)) return;
    } else {
      std::size_t n = 0;
      while (n < row.size() && (std::isalnum(static_cast<unsigned char>(row[n])) || row[n] == '_' ||
                                row[n] == '-' || row[n] == '.')) {
        ++n;
      }
      // A bare key followed by '=' or a blank ("interval "60s"" lacks its '=').
      if (n > 0 && (n == row.size() || row[n] == '=' || row[n] == ' ' || row[n] == '\t')) {
        const std::string key(row.substr(0, n));
        if (!visit(line, table.empty() ? key : table + "." + key)) return;
      }
    }
    if (end == text.size()) break;
    pos = end + 1;
    ++line;
  }
}

// The key defined on `line`, or "".
std::string KeyAtLine(std::string_view text, int line) {
  std::string found;
  ForEachKeyLine(text, line, [&](int at, const std::string& key) {
    if (at == line) found = key;
    return true;
  });
  return found;
}

// The last line at or above `line` that defines a key, and the key; {0, ""} if none.
std::pair<int, std::string> LastKeyAtOrAbove(std::string_view text, int line) {
  std::pair<int, std::string> last{0, ""};
  ForEachKeyLine(text, line, [&](int at, const std::string& key) {
    last = {at, key};
    return true;
  });
  return last;
}

// The line that defines `key` ("web.config_file"), or 0.
int LineOfKey(std::string_view text, std::string_view key) {
  int found = 0;
  ForEachKeyLine(text, INT_MAX, [&](int at, const std::string& k) {
    if (k == key) found = at;
    return found == 0;
  });
  return found;
}

// toml++ places some invalid UTF-8 on the line before; find the first bad byte ourselves.
// Returns 0 when the text is valid UTF-8, else the 1-based line of the first bad byte.
int FirstInvalidUtf8Line(std::string_view text, unsigned* byte) {
  int line = 1;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t min = 0;
    if (c < 0x80) {
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    if ((c & 0xe0) == 0xc0)
      length = 2, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
      length = 3, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
      length = 4, min = 0x10000;
    std::uint32_t code = length == 2 ? c & 0x1f : length == 3 ? c & 0x0f : c & 0x07;
    bool ok = length != 0 && i + length <= text.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      ok = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    if (!ok || code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      *byte = c;
      return line;
    }
    i += length;
  }
  return 0;
}

// TOML allows non-ASCII text only inside strings and comments. Such a character anywhere
// else is rejected here, before toml++ 3.3 sees it: its whitespace classifier reaches
// __builtin_unreachable() for some of them (U+00A1..U+0499; found by fuzz/config_fuzzer).
// Returns the 1-based line of the first one, or 0.
int FirstNonAsciiOutsideStrings(std::string_view text) {
  int line = 1;
  std::size_t i = 0;
  const auto starts = [&](std::string_view token) { return text.substr(i, token.size()) == token; };
  // Skips to just past `close` (not escaped when `escapes`), counting lines; a single-line
  // string also ends at a newline (toml++ reports that error itself). Returns false for a
  // backslash before a non-ASCII byte: never a valid escape, and toml++ would test that
  // byte for whitespace.
  const auto skip_string = [&](std::string_view close, bool escapes, bool multiline) {
    while (i < text.size()) {
      if (escapes && text[i] == '\\') {
        if (i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80) return false;
        if (i + 1 < text.size() && text[i + 1] == '\n') ++line;
        i += 2;
        continue;
      }
      if (starts(close)) {
        i += close.size();
        return true;
      }
      if (text[i] == '\n') {
        if (!multiline) return true;
        ++line;
      }
      ++i;
    }
    return true;
  };
  // A quote opens a string only where TOML allows one (a key or a value: after a line
  // start, '=', '[', '{', ',' or '.'), so `5"..."` is not mistaken for one.
  char previous = '\n';
  while (i < text.size()) {
    const char c = text[i];
    const bool may_open = previous == '\n' || previous == '=' || previous == '[' ||
                          previous == '{' || previous == ',' || previous == '.';
    if (c == '\n') {
      ++line;
      ++i;
      previous = '\n';
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (may_open && (c == '"' || c == '\'')) {
      const std::string_view triple = c == '"' ? "\"\"\"" : "'''";
      const bool multiline = starts(triple);
      i += multiline ? 3 : 1;
      if (!skip_string(multiline ? triple : triple.substr(0, 1), c == '"', multiline)) return line;
      previous = c;
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      return line;
    } else {
      previous = c;
      ++i;
    }
  }
  return 0;
}

bool IsBlank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  });
}

}  // namespace

Config ParseConfig(std::string_view text, const std::filesystem::path& source) {
  const std::string file = source.string();
  if (IsBlank(text)) {
    throw ConfigError(file, 0, "", "the file is empty",
                      "start from the annotated example deploy/xferd.toml (installed as "
                      "/etc/xferd/xferd.toml), which spells out every default");
  }
  if (text.size() > kMaxConfigBytes) {
    throw ConfigError(
        file, 0, "", "the file is " + std::to_string(text.size()) + " bytes; a config is a few KiB",
        "check that this is the xferd configuration (start from deploy/xferd.toml)");
  }
  unsigned bad_byte = 0;
  if (const int line = FirstInvalidUtf8Line(text, &bad_byte)) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", bad_byte);
    throw ConfigError(
        file, line, KeyAtLine(text, line),
        std::string("not valid TOML: invalid UTF-8 (byte ") + byte + "); is this a binary file?",
        "save the file as UTF-8 text; start from deploy/xferd.toml");
  }
  if (const int line = FirstNonAsciiOutsideStrings(text)) {
    throw ConfigError(file, line, KeyAtLine(text, line),
                      "not valid TOML: a non-ASCII character outside a string or comment",
                      "keys and values other than strings are plain ASCII; quote text, or remove "
                      "the stray character (often a non-breaking space pasted from a web page)");
  }
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    int line = static_cast<int>(e.source().begin.line);
    std::string problem(e.description());
    std::string key = KeyAtLine(text, line);
    // Something left open at the end of the file (a string, an array) began at the last
    // key above: name that one.
    if (key.empty() && problem.find("end-of-file") != std::string::npos) {
      auto [above, above_key] = LastKeyAtOrAbove(text, line);
      if (above > 0) line = above, key = std::move(above_key);
    }
    if (!problem.empty())
      problem[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(problem[0])));
    throw ConfigError(file, line, key, "not valid TOML: " + problem,
                      "correct the syntax on that line (strings need \"quotes\", one key per line, "
                      "each key and [section] once; see deploy/xferd.toml)");
  }

  Config config;
  config.source = source;
  TableReader top(file, root, "");
  top.RejectUnknown();

  // [simulate] first: whether the device is simulated changes the limits in [probe].
  ReadSimulate(file, root, config);
  ReadWeb(file, source, root, config);
  ReadDaemon(file, source, root, config);
  ReadProbe(file, root, config.simulate, config);
  ReadBusy(file, root, config);
  ReadHealth(file, root, config);
  return config;
}

namespace {

// The whole file, or a ConfigError naming why it cannot be read (errno's text).
std::string ReadFile(const std::filesystem::path& path, std::size_t limit) {
  const std::string file = path.string();
  const auto fail = [&](int error, const std::string& fix) {
    throw ConfigError(file, 0, "", std::string("cannot read the file: ") + std::strerror(error),
                      fix);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) fail(error, "check the path; the example config is deploy/xferd.toml");
    if (error == EACCES)
      fail(
          error,
          "make it readable by the user xferd runs as (chmod 0644, or chgrp xferd and chmod 0640)");
    fail(error, "check the path and its permissions");
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      fail(error, error == EISDIR ? "name the file, not its directory"
                                  : "check the path and its permissions");
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > limit) {
      ::close(fd);
      throw ConfigError(
          file, 0, "",
          "the file is larger than " + std::to_string(limit) + " bytes; a config is a few KiB",
          "check that this is the right file");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace

Config LoadConfig(const std::filesystem::path& path) {
  const std::string text = ReadFile(path, kMaxConfigBytes);
  Config config = ParseConfig(text, path);
  if (config.web_config_file.empty()) return config;
  try {
    config.web = LoadWebConfig(config.web_config_file);
  } catch (const ConfigError& e) {
    // A YAML file that cannot be read at all is a mistake in this file's web.config_file.
    if (e.line() != 0 || e.file() != config.web_config_file.string()) throw;
    throw ConfigError(path.string(), LineOfKey(text, "web.config_file"), "web.config_file",
                      "cannot use " + e.file() + ": " + e.problem(),
                      "check the path (relative paths are relative to this file's directory), or "
                      "remove config_file for plain HTTP");
  }
  return config;
}

// ---------------------------------------------------------------------------------------
// exporter-toolkit web config (YAML).

namespace {

int YamlLine(const YAML::Node& node) {
  return node.Mark().is_null() ? 0 : node.Mark().line + 1;
}

std::string YamlScalar(const std::string& file, const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) {
    throw ConfigError(file, YamlLine(node), key, "must be a single value (a string)",
                      "write " + key.substr(key.rfind('.') + 1) + ": <value>");
  }
  return node.Scalar();
}

std::filesystem::path ReadableFile(const std::string& file, const std::filesystem::path& yaml_path,
                                   const YAML::Node& node, const std::string& key) {
  const std::string value = YamlScalar(file, node, key);
  if (value.empty())
    throw ConfigError(file, YamlLine(node), key, "must not be empty", "name the PEM file");
  const std::filesystem::path path = ResolveAgainst(yaml_path, value);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw ConfigError(file, YamlLine(node), key,
                      "cannot read " + path.string() + ": " + std::strerror(error),
                      "check the path (relative paths are relative to " +
                          (yaml_path.parent_path().empty() ? std::string(".")
                                                           : yaml_path.parent_path().string()) +
                          ") and that xferd's user can read it");
  }
  ::close(fd);
  return path;
}

// bcrypt as exporter-toolkit accepts it: $2a$, $2b$ or $2y$, a two-digit cost, 53 chars.
bool IsBcrypt(const std::string& hash, int* cost) {
  static const std::regex kBcrypt(R"(\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{53})");
  std::smatch m;
  if (!std::regex_match(hash, m, kBcrypt)) return false;
  *cost = std::stoi(m[1].str());
  return true;
}

}  // namespace

WebConfig LoadWebConfig(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = ReadFile(path, kMaxConfigBytes);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, e.mark.is_null() ? 0 : e.mark.line + 1, "", "not valid YAML: " + e.msg,
                      "correct the syntax on that line (see docs/configuration.md for the format)");
  }
  WebConfig web;
  // An empty file is what exporter-toolkit accepts too: plain HTTP, no auth.
  if (root.IsNull()) return web;
  if (!root.IsMap()) {
    throw ConfigError(file, YamlLine(root), "",
                      "must be a map of tls_server_config and basic_auth_users",
                      "see docs/configuration.md for the format");
  }
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      const YAML::Node& value = entry.second;
      const int line = YamlLine(entry.first);
      if (key == "tls_server_config") {
        if (value.IsNull()) continue;
        if (!value.IsMap())
          throw ConfigError(file, line, key, "must be a map with cert_file and key_file",
                            "indent cert_file: and key_file: under it");
        for (const auto& tls : value) {
          const std::string tls_key = tls.first.Scalar();
          const std::string name = key + "." + tls_key;
          if (tls_key == "cert_file") {
            web.cert_file = ReadableFile(file, path, tls.second, name);
          } else if (tls_key == "key_file") {
            web.key_file = ReadableFile(file, path, tls.second, name);
          } else {
            throw ConfigError(file, YamlLine(tls.first), name,
                              "not supported by xferd (it supports cert_file and key_file only)",
                              "remove it; for client certificates put a TLS proxy in front");
          }
        }
        if (web.cert_file.empty() != web.key_file.empty()) {
          throw ConfigError(file, line, key + (web.cert_file.empty() ? ".cert_file" : ".key_file"),
                            "TLS needs both cert_file and key_file",
                            "add the missing one, or remove tls_server_config for plain HTTP");
        }
      } else if (key == "basic_auth_users") {
        if (value.IsNull()) continue;
        if (!value.IsMap())
          throw ConfigError(file, line, key, "must be a map of user: bcrypt-hash",
                            "write one line per user, e.g.  prometheus: $2y$10$...");
        for (const auto& user : value) {
          const std::string name = user.first.Scalar();
          const std::string full = key + "." + name;
          if (name.empty() || name.find(':') != std::string::npos) {
            throw ConfigError(file, YamlLine(user.first), full,
                              "a user name must be non-empty and hold no ':'", "rename the user");
          }
          const std::string hash = YamlScalar(file, user.second, full);
          int cost = 0;
          if (!IsBcrypt(hash, &cost)) {
            throw ConfigError(file, YamlLine(user.second), full,
                              "not a bcrypt hash (a plain-text password?); passwords are stored "
                              "only as bcrypt hashes",
                              "generate one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'  and paste "
                              "it (quoted) as the value");
          }
          if (cost < 4 || cost > 31) {
            throw ConfigError(file, YamlLine(user.second), full,
                              "bcrypt cost " + std::to_string(cost) + " is outside 4..31",
                              "generate a new hash with: htpasswd -nBC 10 \"\" | tr -d ':\\n'");
          }
          if (!web.basic_auth_users.emplace(name, hash).second) {
            throw ConfigError(file, YamlLine(user.first), full, "user listed twice",
                              "keep one entry per user");
          }
        }
      } else if (key == "http_server_config") {
        // Rejected rather than ignored: an operator who asked for headers or HTTP/2 must
        // not believe they are in effect.
        throw ConfigError(file, line, key,
                          "not supported by xferd (HTTP/2 and custom headers are not implemented)",
                          "remove the http_server_config block");
      } else {
        std::string fix = "remove it; xferd reads tls_server_config and basic_auth_users";
        for (std::string_view known :
             {"tls_server_config", "basic_auth_users", "http_server_config"}) {
          if (EditDistance(key, known) <= 3) fix = "did you mean " + std::string(known) + "?";
        }
        throw ConfigError(file, line, key, "unknown key", fix);
      }
    }
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, e.mark.is_null() ? 0 : e.mark.line + 1, "",
                      "unexpected structure: " + e.msg, "see docs/configuration.md for the format");
  }
  return web;
}

}  // namespace xferd::config
