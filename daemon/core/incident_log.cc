#include "core/incident_log.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/fault_codes.h"
#include "core/health_tracker.h"
#include "platform/printable.h"

namespace xferd::core {
namespace {

using std::chrono::system_clock;

// What one incident may hold when read back: more than xferd writes (10 causes, 13 pairs).
constexpr std::size_t kMaxTextBytes = 300;
constexpr std::size_t kMaxListEntries = 64;

// Outside text (a state file, a sysfs name in a detail) as the log keeps it: printable and
// short, so the state file and the status document stay valid UTF-8 and bounded.
std::string Kept(std::string_view text) {
  return platform::Printable(text, kMaxTextBytes);
}

Incident::Cause CauseOf(const Diagnosis& d) {
  const FaultCode& fault = FaultOf(d.cause);
  return {std::string(ToString(d.cause)), Kept(d.detail), fault.Code(),
          std::string(ToString(fault.action))};
}

// An evidence record's name as the log keeps it: a file name of the evidence directory,
// never a path (EvidenceStore names them so; anything else read back is not kept).
bool IsRecordName(std::string_view name) {
  return !name.empty() && name.size() <= 64 && name.front() != '.' &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  c == '-' || c == '.' || c == '_';
         });
}

}  // namespace

std::string_view ToString(DeviceVerdict verdict) {
  switch (verdict) {
    case DeviceVerdict::kPending: return "pending";
    case DeviceVerdict::kOk: return "ok";
    case DeviceVerdict::kDegraded: return "degraded";
    case DeviceVerdict::kStale: return "stale";
    case DeviceVerdict::kUnknown: return "unknown";
  }
  return "pending";
}

std::optional<DeviceVerdict> ParseDeviceVerdict(std::string_view text) {
  for (DeviceVerdict v : kAllDeviceVerdicts) {
    if (text == ToString(v)) return v;
  }
  return std::nullopt;
}

DeviceVerdict NodeVerdict(const std::vector<DeviceVerdict>& gpus) {
  for (DeviceVerdict v : kAllDeviceVerdicts) {
    if (std::find(gpus.begin(), gpus.end(), v) != gpus.end()) return v;
  }
  return DeviceVerdict::kOk;
}

std::string FormatUtcTime(system_clock::time_point time) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  const int millis = static_cast<int>(ms - static_cast<long long>(seconds) * 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[48];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", millis);
  return buf;
}

std::optional<system_clock::time_point> ParseUtcTime(std::string_view text) {
  // "YYYY-MM-DDTHH:MM:SS" then an optional ".fff" (1-9 digits) and "Z".
  if (text.size() < 20 || text.size() > 40 || text.back() != 'Z') return std::nullopt;
  const std::string s(text);
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  long long nanos = 0;
  if (*end == '.') {
    int digits = 0;
    for (++end; *end >= '0' && *end <= '9'; ++end) {
      if (++digits > 9) return std::nullopt;
      nanos = nanos * 10 + (*end - '0');
    }
    if (digits == 0) return std::nullopt;
    for (; digits < 9; ++digits) nanos *= 10;
  }
  if (std::string_view(end) != "Z") return std::nullopt;
  const std::time_t seconds = timegm(&tm);
  return system_clock::time_point(std::chrono::duration_cast<system_clock::duration>(
      std::chrono::seconds(seconds) + std::chrono::nanoseconds(nanos)));
}

IncidentLog::IncidentLog(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}

void IncidentLog::Restore(std::vector<Incident> incidents) {
  std::lock_guard lock(mutex_);
  for (Incident& incident : incidents) {
    DeviceRecord& device = devices_[incident.uuid];
    // Only what the restart left unproven: a GPU judged since keeps its own verdict.
    if (device.judged == 0 && incident.to != DeviceVerdict::kPending) {
      device.settled = incident.to;
      device.recheck = incident.to == DeviceVerdict::kDegraded;
      device.degraded_pairs = device.recheck ? incident.pairs : decltype(incident.pairs){};
    }
    incidents_.push_back(std::move(incident));
  }
  while (incidents_.size() > capacity_) incidents_.pop_front();
}

DeviceVerdict IncidentLog::Observe(const DeviceHealth& health, bool busy, int consecutive_bad,
                                   system_clock::time_point now, std::optional<Incident>* logged) {
  std::lock_guard lock(mutex_);
  if (logged != nullptr) logged->reset();
  DeviceRecord& device = devices_[health.uuid];
  if (!busy) ++device.judged;
  DeviceVerdict verdict = DeviceVerdict::kOk;
  if (health.Degraded()) {
    verdict = DeviceVerdict::kDegraded;
  } else if (health.Unknown()) {
    // Nothing to judge it by (MIG with no instance, CC GPUs not ready): before pending, as
    // a GPU that cannot be measured cannot be re-judged either.
    verdict = DeviceVerdict::kUnknown;
  } else if (health.Stale()) {
    verdict = DeviceVerdict::kStale;
  } else if (device.recheck && device.judged < std::max(1, consecutive_bad)) {
    // DEGRADED when the daemon stopped: not ok until judged as many times as it takes to
    // flip a verdict, so a restart does not resume a drained node on one good reading.
    verdict = DeviceVerdict::kPending;
  }
  device.now = verdict;
  // Not known: no incident, and the next verdict is held against the last one known.
  if (verdict == DeviceVerdict::kPending || verdict == DeviceVerdict::kStale ||
      verdict == DeviceVerdict::kUnknown) {
    return verdict;
  }
  device.recheck = false;

  // The most severe pair first, then the rest in order.
  std::vector<std::pair<probes::TransferMode, probes::Direction>> degraded;
  if (const SeriesHealth* worst = WorstDegraded(health)) {
    degraded.emplace_back(worst->mode, worst->direction);
  }
  for (const PairVerdict& v : health.verdicts) {
    if (v.degraded && std::find(degraded.begin(), degraded.end(), std::pair(v.mode, v.direction)) ==
                          degraded.end()) {
      degraded.emplace_back(v.mode, v.direction);
    }
  }
  // A GPU's first verdict is news only when it is bad.
  const bool changed = device.settled == DeviceVerdict::kPending
                           ? verdict == DeviceVerdict::kDegraded
                           : verdict != device.settled;
  if (changed) {
    Incident incident;
    incident.time = now;
    incident.gpu = health.gpu;
    incident.uuid = Kept(health.uuid);
    incident.from = device.settled;
    incident.to = verdict;
    incident.pairs = verdict == DeviceVerdict::kDegraded ? degraded : device.degraded_pairs;
    // Ranked (HealthTracker keeps them so): the cause that leads first, notes last.
    if (const auto lead = LeadingCause(health)) {
      for (const Diagnosis& d : health.diagnoses) {
        if (d.cause == *lead) incident.causes.push_back(CauseOf(d));
      }
    }
    for (const Diagnosis& d : health.diagnoses) {
      if (incident.causes.empty() || incident.causes.front().cause != ToString(d.cause)) {
        incident.causes.push_back(CauseOf(d));
      }
    }
    if (logged != nullptr) *logged = incident;
    incidents_.push_back(std::move(incident));
    while (incidents_.size() > capacity_) incidents_.pop_front();
  }
  device.settled = verdict;
  device.degraded_pairs = std::move(degraded);
  return verdict;
}

bool IncidentLog::AttachEvidence(const std::string& uuid, system_clock::time_point time,
                                 const std::string& record) {
  std::lock_guard lock(mutex_);
  for (auto it = incidents_.rbegin(); it != incidents_.rend(); ++it) {
    if (it->uuid == uuid && it->time == time) {
      it->evidence = IsRecordName(record) ? record : "";
      return true;
    }
  }
  return false;
}

DeviceVerdict IncidentLog::Verdict(const std::string& uuid) const {
  std::lock_guard lock(mutex_);
  const auto it = devices_.find(uuid);
  return it == devices_.end() ? DeviceVerdict::kPending : it->second.now;
}

std::vector<Incident> IncidentLog::Incidents() const {
  std::lock_guard lock(mutex_);
  return {incidents_.begin(), incidents_.end()};
}

nlohmann::json IncidentToJson(const Incident& incident) {
  nlohmann::json series = nlohmann::json::array();
  for (const auto& [mode, direction] : incident.pairs) {
    series.push_back(
        {{"mode", probes::ToString(mode)}, {"direction", probes::ToString(direction)}});
  }
  nlohmann::json causes = nlohmann::json::array();
  for (const Incident::Cause& c : incident.causes) {
    causes.push_back(
        {{"cause", c.cause},
         {"code", c.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.code)},
         {"action", c.action.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.action)},
         {"detail", c.detail}});
  }
  return {{"time", FormatUtcTime(incident.time)},
          {"gpu", incident.gpu},
          {"uuid", incident.uuid},
          {"from", ToString(incident.from)},
          {"to", ToString(incident.to)},
          {"series", std::move(series)},
          {"causes", std::move(causes)},
          {"evidence", incident.evidence.empty() ? nlohmann::json(nullptr)
                                                 : nlohmann::json(incident.evidence)}};
}

std::optional<Incident> IncidentFromJson(const nlohmann::json& value, std::string& problem) {
  auto text = [&](const nlohmann::json& object, const char* key) -> std::optional<std::string> {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_string()) {
      problem = std::string("no string \"") + key + "\"";
      return std::nullopt;
    }
    return it->get<std::string>();
  };
  if (!value.is_object()) {
    problem = "not an object";
    return std::nullopt;
  }
  Incident incident;
  const auto time = text(value, "time");
  if (!time) return std::nullopt;
  const auto parsed = ParseUtcTime(*time);
  if (!parsed) {
    problem = "time \"" + Kept(*time) + "\" is not an RFC 3339 UTC time";
    return std::nullopt;
  }
  incident.time = *parsed;
  const auto gpu = value.find("gpu");
  if (gpu == value.end() || !gpu->is_number_integer() || gpu->get<long long>() < 0 ||
      gpu->get<long long>() > 1'000'000) {
    problem = "no GPU index";
    return std::nullopt;
  }
  incident.gpu = gpu->get<int>();
  const auto uuid = text(value, "uuid");
  if (!uuid) return std::nullopt;
  incident.uuid = Kept(*uuid);
  for (const auto& [key, out] : {std::pair<const char*, DeviceVerdict*>{"from", &incident.from},
                                 std::pair<const char*, DeviceVerdict*>{"to", &incident.to}}) {
    const auto word = text(value, key);
    if (!word) return std::nullopt;
    const auto verdict = ParseDeviceVerdict(*word);
    if (!verdict) {
      problem = std::string("\"") + key + "\" is \"" + Kept(*word) + "\", not a verdict";
      return std::nullopt;
    }
    *out = *verdict;
  }
  if (incident.to == DeviceVerdict::kPending || incident.to == DeviceVerdict::kStale) {
    problem = "\"to\" is " + std::string(ToString(incident.to));
    return std::nullopt;
  }
  // The lists are what an operator reads; an entry xferd cannot place is left out.
  if (const auto series = value.find("series"); series != value.end() && series->is_array()) {
    for (const nlohmann::json& s : *series) {
      if (incident.pairs.size() >= kMaxListEntries) break;
      if (!s.is_object() || !s.contains("mode") || !s["mode"].is_string() ||
          !s.contains("direction") || !s["direction"].is_string()) {
        continue;
      }
      const auto mode = probes::ParseMode(s["mode"].get<std::string>());
      const auto direction = probes::ParseDirection(s["direction"].get<std::string>());
      if (mode && direction) incident.pairs.emplace_back(*mode, *direction);
    }
  }
  if (const auto causes = value.find("causes"); causes != value.end() && causes->is_array()) {
    for (const nlohmann::json& c : *causes) {
      if (incident.causes.size() >= kMaxListEntries) break;
      if (!c.is_object() || !c.contains("cause") || !c["cause"].is_string()) continue;
      const auto field = [&](const char* key) {
        return c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : std::string();
      };
      Incident::Cause cause{Kept(c["cause"].get<std::string>()), Kept(field("detail")),
                            Kept(field("code")), Kept(field("action"))};
      // An older file has none: this xferd's code for the label, where it knows the label.
      if (cause.code.empty()) {
        if (const FaultCode* fault = FaultOfLabel(cause.cause)) {
          cause.code = fault->Code();
          cause.action = std::string(ToString(fault->action));
        }
      }
      incident.causes.push_back(std::move(cause));
    }
  }
  if (const auto evidence = value.find("evidence"); evidence != value.end() &&
                                                    evidence->is_string() &&
                                                    IsRecordName(evidence->get<std::string>())) {
    incident.evidence = evidence->get<std::string>();
  }
  return incident;
}

}  // namespace xferd::core
