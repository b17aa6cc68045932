#include "exporter/status_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "platform/printable.h"

namespace xferd::exporter {
namespace {

using nlohmann::json;

// Outside text (a GPU's name, a cause's detail, a path) as the views may print it: control
// bytes escaped, valid UTF-8, cut at this many bytes. The HTML page escapes it again for
// HTML.
constexpr std::size_t kViewTextBytes = 300;

const json& At(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string Str(const json& object, const char* key) {
  const json& v = At(object, key);
  return v.is_string() ? platform::Printable(v.get<std::string>(), kViewTextBytes) : std::string();
}

std::optional<double> Num(const json& object, const char* key) {
  const json& v = At(object, key);
  if (!v.is_number()) return std::nullopt;
  const double d = v.get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

int Int(const json& object, const char* key, int otherwise = 0) {
  const auto v = Num(object, key);
  return v && std::fabs(*v) < 1e9 ? static_cast<int>(*v) : otherwise;
}

bool Bool(const json& object, const char* key, bool otherwise = false) {
  const json& v = At(object, key);
  return v.is_boolean() ? v.get<bool>() : otherwise;
}

const json& List(const json& object, const char* key) {
  static const json kEmpty = json::array();
  const json& v = At(object, key);
  return v.is_array() ? v : kEmpty;
}

// "Gen4 x16", from {"generation": 4, "width": 16}; "" when neither is known.
std::string LinkWords(const json& link) {
  const auto gen = Num(link, "generation");
  const auto width = Num(link, "width");
  if (!gen && !width) return "";
  return fmt::format("{} {}", gen ? fmt::format("Gen{:.0f}", *gen) : "Gen?",
                     width ? fmt::format("x{:.0f}", *width) : "x?");
}

using SeriesKey = std::tuple<std::string, std::string, std::string>;

SeriesKey KeyOf(const json& entry) {
  return {Str(entry, "mode"), Str(entry, "direction"), Str(entry, "size")};
}

SeriesView ReadSeries(const json& s) {
  SeriesView v;
  v.mode = Str(s, "mode");
  v.direction = Str(s, "direction");
  v.size = Str(s, "size");
  v.status = Str(s, "status");
  v.reading = Num(s, "bandwidth_bytes_per_second");
  v.band_lower = Num(s, "band_lower_bytes_per_second");
  v.baseline = Num(s, "baseline_bytes_per_second");
  v.peer_baseline = Num(s, "peer_baseline_bytes_per_second");
  v.baseline_cycles = Int(s, "baseline_cycles");
  v.below_band = Bool(s, "below_band");
  v.below_baseline = Bool(s, "below_baseline");
  v.contended = Bool(s, "contended");
  v.degraded = Bool(s, "degraded");
  v.stale = Bool(s, "stale");
  v.headline = Bool(s, "headline");
  v.age_s = Num(s, "age_seconds");
  const json& recent = At(s, "recent");
  const json& ages = List(recent, "age_seconds");
  const json& rates = List(recent, "bytes_per_second");
  for (std::size_t i = 0; i < std::min(ages.size(), rates.size()); ++i) {
    if (!ages[i].is_number() || !rates[i].is_number()) continue;
    const double age = ages[i].get<double>(), rate = rates[i].get<double>();
    if (std::isfinite(age) && std::isfinite(rate) && rate > 0) v.recent.push_back({age, rate});
  }
  return v;
}

IncidentView ReadIncident(const json& i) {
  IncidentView incident;
  incident.time = Str(i, "time");
  incident.gpu = Int(i, "gpu", -1);
  incident.uuid = Str(i, "uuid");
  incident.from = Str(i, "from");
  incident.to = Str(i, "to");
  for (const json& s : List(i, "series")) {
    incident.series.push_back(Str(s, "mode") + " " + Str(s, "direction"));
  }
  for (const json& c : List(i, "causes"))
    incident.causes.emplace_back(Str(c, "cause"), Str(c, "detail"));
  return incident;
}

// "confidential computing on (GPUs ready); MIG enabled: 2 instances (1g.18gb, 3g.71gb)";
// "" for a plain GPU (CC off or not read, MIG off or not supported).
std::string ShapeWords(const json& shape) {
  std::vector<std::string> parts;
  const json& cc = At(shape, "confidential_computing");
  const std::string cc_state = Str(cc, "state");
  if (cc_state == "on") {
    const json& ready = At(cc, "gpus_ready");
    parts.push_back("confidential computing " + cc_state +
                    (ready.is_boolean()
                         ? (ready.get<bool>() ? " (GPUs ready)" : " (GPUs not ready)")
                         : std::string()));
  }
  const json& mig = At(shape, "mig");
  if (Str(mig, "mode") == "enabled") {
    std::string profiles;
    const json& instances = List(mig, "instances");
    for (const json& i : instances) {
      profiles += (profiles.empty() ? "" : ", ") + Str(i, "profile");
    }
    parts.push_back(fmt::format("MIG enabled: {} instance{}{}", instances.size(),
                                instances.size() == 1 ? "" : "s",
                                profiles.empty() ? "" : " (" + profiles + ")"));
  }
  std::string words;
  for (const std::string& p : parts) words += (words.empty() ? "" : "; ") + p;
  return words;
}

GpuView ReadGpu(const json& g) {
  GpuView v;
  v.index = Int(g, "gpu", -1);
  v.uuid = Str(g, "uuid");
  v.name = Str(g, "name");
  v.pci_bus_id = Str(g, "pci_bus_id");
  v.simulated = Bool(g, "simulated");
  v.verdict = Str(g, "verdict");
  v.verdict_reason = Str(g, "verdict_reason");
  v.code = Str(g, "code");
  v.action = Str(g, "action");
  v.evidence = Str(At(g, "evidence"), "record");
  const json& band = At(g, "band");
  v.band_lower = Num(band, "lower_bytes_per_second");
  v.band_upper = Num(band, "upper_bytes_per_second");
  v.band_source = Str(band, "source");
  v.stale_series = Int(g, "stale_series");

  const json& headline = At(g, "headline");
  if (headline.is_object()) {
    v.has_headline = true;
    v.headline_series =
        Str(headline, "mode") + " " + Str(headline, "direction") + " " + Str(headline, "size");
    v.headline_cause = Str(headline, "cause");
    v.headline_below = Str(headline, "below");
    v.headline_of = Str(headline, "baseline_of");
    v.headline_reading = Num(headline, "reading_bytes_per_second");
    v.headline_reference = Num(headline, "reference_bytes_per_second");
  }

  // The schedule's outlook and the last probes, joined to the series by (mode, direction,
  // size).
  std::map<SeriesKey, const json*> outlook, probes;
  const json& schedule = At(g, "schedule");
  if (schedule.is_object()) {
    v.scheduled = true;
    v.allowance_s = Num(schedule, "allowance_seconds").value_or(0);
    v.allowance_capacity_s = Num(schedule, "allowance_capacity_seconds").value_or(0);
    v.duty_cycle = Num(schedule, "max_duty_cycle").value_or(0);
    v.held_back = Int(schedule, "held_back");
    for (const json& o : List(schedule, "series")) outlook[KeyOf(o)] = &o;
  }
  for (const json& p : List(g, "probes")) probes[KeyOf(p)] = &p;
  for (const json& s : List(g, "series")) {
    SeriesView series = ReadSeries(s);
    const SeriesKey key = KeyOf(s);
    if (const auto it = outlook.find(key); it != outlook.end()) {
      series.scheduled = true;
      series.run_class = Str(*it->second, "class");
      series.held_back = Bool(*it->second, "held_back");
      series.next_run_s = Num(*it->second, "next_run_in_seconds");
    }
    if (const auto it = probes.find(key); it != probes.end()) {
      const std::string result = Str(*it->second, "result");
      if (result != "ok" && result != "contended") {
        series.last_result = result;
        series.last_message = Str(*it->second, "message");
      }
    }
    v.series.push_back(std::move(series));
  }

  for (const json& c : List(g, "causes")) {
    CauseView cause;
    cause.cause = Str(c, "cause");
    cause.detail = Str(c, "detail");
    cause.advice = Str(c, "advice");
    cause.fault = Bool(c, "fault", true);
    cause.leads = Bool(c, "leads");
    v.causes.push_back(std::move(cause));
  }

  const json& link = At(g, "link");
  v.link.host_link = Str(link, "host_link");
  v.link.read = Bool(link, "read");
  const json& pcie = At(link, "pcie");
  if (pcie.is_object()) {
    v.link.pcie = true;
    v.link.address = Str(pcie, "address");
    v.link.current = LinkWords(At(pcie, "current"));
    v.link.max = LinkWords(At(pcie, "max"));
    const json& narrowest = At(pcie, "narrowest");
    v.link.narrowest = LinkWords(narrowest);
    v.link.narrowest_address = Str(narrowest, "address");
    v.link.narrowest_bytes_per_s = Num(narrowest, "bytes_per_second");
    v.link.downtrained = Bool(pcie, "downtrained");
  }
  if (const auto numa = Num(link, "numa_node")) v.link.numa_node = static_cast<int>(*numa);
  v.link.iommu = Str(link, "iommu");
  const json& errors = At(link, "errors");
  v.link.errors_read = Bool(errors, "read");
  v.link.errors_reason = Str(errors, "reason");
  for (const json& c : List(errors, "counters")) {
    CounterView counter;
    counter.device = Str(c, "device");
    counter.counter = Str(c, "counter");
    counter.source = Str(c, "source");
    counter.aer_class = Str(c, "class");
    counter.readable = Bool(c, "readable");
    counter.value = Num(c, "value");
    counter.reason = Str(c, "reason");
    v.link.counters.push_back(std::move(counter));
  }
  const json& watch = At(link, "watch");
  v.link.watching = Bool(watch, "watching");
  v.link.flapping = Bool(watch, "flapping");
  v.link.watch_reason = Str(watch, "reason");
  v.link.watch_last_seen = Str(watch, "last_seen");
  if (v.link.watching) {
    v.link.watch_counts = fmt::format("{:.0f} changes, {:.0f} s reduced in the last {:.0f} s",
                                      Num(watch, "window_transitions").value_or(0),
                                      Num(watch, "window_reduced_seconds").value_or(0),
                                      Num(watch, "window_seconds").value_or(0));
  }
  v.shape = ShapeWords(At(g, "shape"));

  const json& contention = At(g, "contention");
  v.busy = Bool(contention, "busy");
  if (At(contention, "traffic_readable").is_boolean()) {
    v.traffic_readable = Bool(contention, "traffic_readable");
  }
  v.foreign_h2d = Num(contention, "foreign_h2d_bytes_per_second");
  v.foreign_d2h = Num(contention, "foreign_d2h_bytes_per_second");
  return v;
}

std::string Figure(std::optional<double> bytes_per_s) {
  return FormatGbps(bytes_per_s);
}

// The columns of the table of series (SeriesColumns).
constexpr SeriesColumn kSeriesColumns[] = {
    {"series", [](const SeriesView& s) { return s.Name(); }, false},
    {"state", [](const SeriesView& s) { return s.State(); }, false},
    {"reading GB/s", [](const SeriesView& s) { return Figure(s.PerDirection(s.reading)); }, true},
    {"band min GB/s",
     [](const SeriesView& s) { return s.band_lower ? Figure(s.band_lower) : std::string("-"); },
     true},
    {"baseline GB/s",
     [](const SeriesView& s) {
       if (s.peer_baseline) return "peers " + Figure(s.PerDirection(s.peer_baseline));
       if (!s.baseline) return std::string("learning");
       return Figure(s.PerDirection(s.baseline));
     },
     true},
    {"age", [](const SeriesView& s) { return FormatAge(s.age_s); }, true},
    {"next run",
     [](const SeriesView& s) {
       if (s.held_back) return std::string("held back");
       if (!s.scheduled) return std::string("-");
       if (!s.next_run_s) return std::string("not soon");
       return *s.next_run_s <= 0 ? std::string("due") : "in " + FormatAge(s.next_run_s);
     },
     true},
    {"runs as", [](const SeriesView& s) { return s.run_class.empty() ? "-" : s.run_class; }, false},
};

}  // namespace

std::optional<double> SeriesView::PerDirection(std::optional<double> bytes_per_s) const {
  if (!bytes_per_s) return std::nullopt;
  return BothWays() ? *bytes_per_s / 2 : *bytes_per_s;
}

std::string SeriesView::Name() const {
  return mode + " " + direction + " " + size;
}

std::string SeriesView::State() const {
  if (!status.empty() && status != "ok") return status;
  if (!last_result.empty() && last_result != "skipped_busy") return last_result;
  if (degraded) {
    return below_band       ? "DEGRADED, below band"
           : below_baseline ? "DEGRADED, below baseline"
                            : "DEGRADED, recovering";
  }
  if (stale) return "stale";
  if (contended) return "contended";
  if (below_band) return "below band";
  if (below_baseline) return peer_baseline ? "below peers" : "below baseline";
  if (!reading) return "no reading yet";
  if (last_result == "skipped_busy") return "ok, skipped busy";
  return "ok";
}

double LinkView::ErrorsCounted() const {
  double total = 0;
  for (const CounterView& c : counters) {
    if (c.readable && c.value) total += *c.value;
  }
  return total;
}

int LinkView::CountersReadable() const {
  return static_cast<int>(std::count_if(counters.begin(), counters.end(), [](const CounterView& c) {
    return c.readable && c.value.has_value();
  }));
}

std::string GpuView::LeadingCause() const {
  for (const CauseView& c : causes) {
    if (c.leads) return c.cause;
  }
  return headline_cause;
}

std::string VerdictLine(const GpuView& g) {
  if (g.verdict == "ok") {
    return g.stale_series > 0
               ? fmt::format("within band; {} series without a current reading", g.stale_series)
               : "within band";
  }
  if (g.verdict == "degraded") {
    std::string line;
    if (g.has_headline) {
      line = g.headline_series + ": " + FormatGbps(g.headline_reading) + " GB/s";
      if (g.headline_reference && !g.headline_below.empty()) {
        line += fmt::format(" < {} GB/s {}", FormatGbps(g.headline_reference),
                            g.headline_below == "baseline" && g.headline_of == "peers"
                                ? "peers' baseline"
                                : g.headline_below);
      } else {
        line += " (recovering)";
      }
    }
    const std::string cause = g.LeadingCause();
    if (!cause.empty()) line += (line.empty() ? "" : "; ") + std::string("cause ") + cause;
    return line.empty() ? "degraded" : line;
  }
  if (!g.verdict_reason.empty()) return g.verdict_reason;
  if (g.verdict == "pending")
    return "no verdict yet: being judged (first cycles, or after a restart)";
  if (g.verdict == "stale") {
    return "its headline series have no current reading (busy, the cycle budget or failing "
           "probes): not known";
  }
  return "not known";
}

std::optional<StatusView> ReadStatusView(std::string_view document, std::string& problem) {
  StatusView v;
  // Each GPU and incident is read into the view as soon as it is parsed, and dropped from
  // the tree: the parse holds one GPU's tree at a time, never the whole document's (a
  // 64-GPU host's is ~1.3 MB of text and its tree several times that).
  std::string top_key;
  const json::parser_callback_t read = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      top_key = parsed.get<std::string>();
    } else if (depth == 2 && event == json::parse_event_t::object_end) {
      if (top_key == "gpus") {
        v.gpus.push_back(ReadGpu(parsed));
        return false;
      }
      if (top_key == "incidents") {
        v.incidents.push_back(ReadIncident(parsed));
        return false;
      }
    }
    return true;
  };
  const json doc = json::parse(document, read, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    problem = "not a status document (not a JSON object)";
    return std::nullopt;
  }
  v.version = Int(doc, "version");
  v.xferd_version = Str(doc, "xferd_version");
  v.time = Str(doc, "time");
  v.verdict = Str(doc, "verdict");
  v.summary = Str(doc, "summary");
  const json& daemon = At(doc, "daemon");
  v.healthy = Bool(daemon, "healthy", true);
  v.reason = Str(daemon, "reason");
  v.cycles = Num(daemon, "cycles").value_or(0);
  v.uptime_s = Num(daemon, "uptime_seconds").value_or(0);
  v.last_cycle_age_s = Num(daemon, "last_cycle_age_seconds");
  v.stale_after_s = Num(daemon, "stale_after_seconds").value_or(0);
  v.interval_s = Num(daemon, "interval_seconds").value_or(0);
  v.consecutive_bad = Int(daemon, "consecutive_bad");
  const json& reload = At(daemon, "reload");
  if (reload.is_object()) {
    v.has_reload = true;
    v.reload_successful = Bool(reload, "successful", true);
    v.reload_time = Str(reload, "time");
    v.reload_error = Str(reload, "error");
    v.reloads = Int(reload, "reloads");
  }
  // A document whose gpus or incidents are no list: what they held was not read above.
  if (!At(doc, "gpus").is_array()) v.gpus.clear();
  if (!At(doc, "incidents").is_array()) v.incidents.clear();
  return v;
}

std::span<const SeriesColumn> SeriesColumns() {
  return kSeriesColumns;
}

std::string FormatGbps(std::optional<double> bytes_per_s) {
  if (!bytes_per_s) return "-";
  return fmt::format("{:.2f}", *bytes_per_s / 1e9);
}

std::string FormatAge(std::optional<double> seconds) {
  if (!seconds) return "-";
  const double s = std::max(0.0, *seconds);
  // Under 10 s to a tenth (a sub-second interval on the simulated device), whole after.
  if (const double tenths = std::round(s * 10) / 10; s < 10 && tenths != std::floor(tenths)) {
    return fmt::format("{:.1f} s", tenths);
  }
  if (s < 100) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{:.0f} min", s / 60);
  if (s < 86400) {
    const long minutes = std::lround(s / 60);
    return minutes % 60 == 0 ? fmt::format("{} h", minutes / 60)
                             : fmt::format("{} h {} min", minutes / 60, minutes % 60);
  }
  return fmt::format("{:.0f} d", s / 86400);
}

}  // namespace xferd::exporter
