#include "cmd/health_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "cmd/json_depth.h"
#include "core/clock.h"
#include "core/diagnosis.h"
#include "core/incident_log.h"
#include "platform/printable.h"

namespace xferd::cmd {
namespace {

using nlohmann::json;

// The version of the status document this xferd reads (exporter::kStatusVersion).
constexpr int kReadsStatusVersion = 1;
// The longest line printed: the first 80 bytes are what node-problem-detector keeps; the
// rest is for people and logs.
constexpr std::size_t kLineBytes = 300;

using core::NoVerdict;

HealthReport Unknown(NoVerdict state, const std::string& why) {
  return UnknownReport(state, why);
}

// A string field, printable; "" when absent or not a string.
std::string Str(const json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? platform::Printable(it->get<std::string>(), 80)
                                               : "";
}

std::optional<double> Num(const json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string GBps(double bytes_per_s) {
  return fmt::format("{:.2f}", bytes_per_s / 1e9);
}

// How a value is, for a message: "the string \"false\"", "the number -3", "null", ...
std::string Kind(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case json::value_t::string:
      return "the string \"" + platform::Printable(value.get<std::string>(), 40, true) + "\"";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "the number " + value.dump();
    case json::value_t::object: return "an object";
    case json::value_t::array: return "a list";
    default: return "not JSON data";
  }
}

// The answer as JSON, or `problem` set: not JSON, not an object, nested deeper than the
// document ever is, or a key given twice in one object (a reader could take either value).
json ReadDocument(std::string_view body, std::string& problem) {
  // The document nests 8 deep (gpus, a GPU, link, errors, counters, a counter); a deeper
  // one is not it, and a DOM of a million levels is not built for it.
  constexpr int kMaxDepth = 32;
  if (JsonNestsDeeperThan(body, kMaxDepth)) {
    problem = fmt::format("the daemon's answer nests more than {} deep: not a status document",
                          kMaxDepth);
    return nullptr;
  }
  std::vector<std::set<std::string>> keys;  // of each object open
  std::string repeated;
  const json::parser_callback_t watch = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end && !keys.empty()) {
      keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty() &&
               !keys.back().insert(parsed.get<std::string>()).second && repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  json doc = json::parse(body, watch, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    problem = "the daemon's answer is not a status document (not valid JSON)";
    return nullptr;
  }
  if (!doc.is_object()) {
    problem = "the daemon's answer is not a status document (not a JSON object)";
    return nullptr;
  }
  if (!repeated.empty()) {
    problem = "the daemon's answer names \"" + platform::Printable(repeated, 40, true) +
              "\" twice in one object: not a status document";
    return nullptr;
  }
  return doc;
}

// The GPU verdicts a status document may hold, as the daemon writes them (core's words):
// "\"degraded\", \"pending\", \"stale\", \"unknown\" or \"ok\"".
std::string VerdictWords() {
  std::string words;
  for (std::size_t i = 0; i < core::kAllDeviceVerdicts.size(); ++i) {
    words += i == 0 ? "" : i + 1 == core::kAllDeviceVerdicts.size() ? " or " : ", ";
    words += "\"" + std::string(core::ToString(core::kAllDeviceVerdicts[i])) + "\"";
  }
  return words;
}

// What a status document must be for `xferd health` to judge it (docs/http.md, "The document
// (version 1)"): the fields it reads, each of its documented type and range, and a node
// verdict that agrees with the GPUs'. "" when it is; else what is not, for the line.
std::string ShapeProblem(const json& doc) {
  const auto field = [](const json& object, const char* key) -> const json* {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  };
  const auto bad = [](const std::string& where, const json* value, const char* want) {
    return where + (value == nullptr ? " is missing" : " is " + Kind(*value)) + ", not " + want;
  };
  const json* version = field(doc, "version");
  if (version == nullptr || !version->is_number_integer()) return bad("version", version, "1");
  const json* daemon = field(doc, "daemon");
  if (daemon == nullptr || !daemon->is_object()) return bad("daemon", daemon, "an object");
  const json* healthy = field(*daemon, "healthy");
  if (healthy == nullptr || !healthy->is_boolean()) {
    return bad("daemon.healthy", healthy, "true or false");
  }
  const json* reason = field(*daemon, "reason");
  if (reason == nullptr || !reason->is_string()) return bad("daemon.reason", reason, "a string");
  const json* age = field(*daemon, "last_cycle_age_seconds");
  if (age == nullptr ||
      !(age->is_null() ||
        (age->is_number() && std::isfinite(age->get<double>()) && age->get<double>() >= 0))) {
    return bad("daemon.last_cycle_age_seconds", age, "a number of seconds (0 or more) or null");
  }
  const json* stale = field(*daemon, "stale_after_seconds");
  if (stale == nullptr || !stale->is_number() || !std::isfinite(stale->get<double>()) ||
      stale->get<double>() <= 0) {
    return bad("daemon.stale_after_seconds", stale, "a number of seconds above 0");
  }
  const json* gpus = field(doc, "gpus");
  if (gpus == nullptr || !gpus->is_array()) return bad("gpus", gpus, "a list");
  if (gpus->empty()) return "gpus is empty: the daemon probes no GPU";
  std::set<long long> indices;
  std::vector<core::DeviceVerdict> verdicts;  // the node's must be what these give
  for (std::size_t i = 0; i < gpus->size(); ++i) {
    const json& gpu = (*gpus)[i];
    const std::string at = fmt::format("gpus[{}]", i);
    if (!gpu.is_object()) return bad(at, &gpu, "an object");
    const json* index = field(gpu, "gpu");
    if (index == nullptr || !index->is_number_integer() || index->get<long long>() < 0) {
      return bad(at + ".gpu", index, "a GPU index (an integer, 0 or more)");
    }
    if (!indices.insert(index->get<long long>()).second) {
      return fmt::format("gpu{} is listed twice", index->get<long long>());
    }
    const json* verdict = field(gpu, "verdict");
    const auto parsed = verdict != nullptr && verdict->is_string()
                            ? core::ParseDeviceVerdict(verdict->get<std::string>())
                            : std::nullopt;
    if (!parsed) return bad(at + ".verdict", verdict, VerdictWords().c_str());
    verdicts.push_back(*parsed);
    if (*parsed == core::DeviceVerdict::kUnknown) {
      // Unknown says why (stale's reason is always the same: no current reading).
      const json* reason = field(gpu, "verdict_reason");
      if (reason == nullptr || !reason->is_string() || reason->get<std::string>().empty()) {
        return bad(at + ".verdict_reason", reason, "why an unknown GPU cannot be judged");
      }
    }
    const json* causes = field(gpu, "causes");
    if (causes == nullptr || !causes->is_array()) return bad(at + ".causes", causes, "a list");
    for (std::size_t c = 0; c < causes->size(); ++c) {
      const json& cause = (*causes)[c];
      const json* name = cause.is_object() ? field(cause, "cause") : nullptr;
      if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
        return bad(fmt::format("{}.causes[{}].cause", at, c), name, "a cause's name");
      }
    }
    const json* headline = field(gpu, "headline");
    if (headline == nullptr || !(headline->is_null() || headline->is_object())) {
      return bad(at + ".headline", headline, "an object or null");
    }
    if (headline->is_object()) {
      for (const char* key : {"mode", "direction"}) {
        const json* word = field(*headline, key);
        if (word == nullptr || !word->is_string()) {
          return bad(at + ".headline." + key, word, "a string");
        }
      }
      const json* below = field(*headline, "below");
      if (below == nullptr || !(below->is_null() || *below == "band" || *below == "baseline")) {
        return bad(at + ".headline.below", below, "\"band\", \"baseline\" or null");
      }
      for (const char* key : {"reading_bytes_per_second", "reference_bytes_per_second"}) {
        const json* rate = field(*headline, key);
        if (rate == nullptr ||
            !(rate->is_null() || (rate->is_number() && std::isfinite(rate->get<double>()) &&
                                  rate->get<double>() > 0))) {
          return bad(at + ".headline." + key, rate, "a rate above 0 or null");
        }
      }
    }
  }
  const json* verdict = field(doc, "verdict");
  const std::string_view follows = core::ToString(core::NodeVerdict(verdicts));
  if (verdict == nullptr || !verdict->is_string() || *verdict != follows) {
    return bad("verdict", verdict,
               fmt::format("\"{}\", which its GPUs' verdicts give", follows).c_str());
  }
  return "";
}

// The code a degraded GPU's line carries: the daemon's (headline.code and headline.action,
// core::FaultOf of its leading cause) when it gives one in the documented form, else this
// xferd's for the cause named, else "degraded, no cause named".
std::string FaultTokenOf(const json& headline, const std::string& cause) {
  const std::string code = Str(headline, "code");
  const std::string action = Str(headline, "action");
  if (!code.empty() && headline.is_object()) {
    const core::FaultCode* known = core::FindFault(code);
    // A code this xferd does not know (a newer daemon's) is passed on as the daemon wrote it.
    const bool form =
        code.size() == 9 && code.starts_with("XFERD-") &&
        std::all_of(code.begin() + 6, code.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (known != nullptr && !known->reserved) return core::FaultToken(*known);
    if (form && core::ParseRecommendedAction(action)) return code + "/" + action;
  }
  const core::FaultCode* fault = core::FaultOfLabel(cause);
  return core::FaultToken(fault != nullptr ? *fault : core::DegradedNoCause());
}

// The cause to name when the headline does not say (core::LeadingCause's rule on the
// labels): the highest-ranked cause that is no note; a label this xferd does not know ranks
// last, a note never.
std::string Leading(const std::vector<std::string>& causes) {
  std::string best;
  int best_rank = 0;
  for (const std::string& name : causes) {
    const auto cause = core::ParseDiagnosisCause(name);
    if (cause && core::IsNote(*cause)) continue;
    const int rank = cause ? core::CauseRank(*cause) : 1000;
    if (best.empty() || rank < best_rank) {
      best = name;
      best_rank = rank;
    }
  }
  return best;
}

std::vector<std::string> CausesOf(const json& gpu) {
  std::vector<std::string> causes;
  const auto it = gpu.find("causes");
  if (it == gpu.end() || !it->is_array()) return causes;
  for (const json& c : *it) {
    const std::string name = Str(c, "cause");
    if (!name.empty()) causes.push_back(name);
  }
  return causes;
}

// "XFERD-101/reboot gpu0 pinned h2d: link_downtrained, 5.10 GB/s < 19.85 band"
std::string Problem(const json& gpu, const std::optional<std::string>& wanted) {
  const auto index = Num(gpu, "gpu");
  std::string line = "gpu" + (index ? fmt::format("{:.0f}", *index) : std::string("?"));
  const json headline = gpu.contains("headline") ? gpu["headline"] : json(nullptr);
  if (headline.is_object()) {
    for (const char* key : {"mode", "direction"}) {
      const std::string word = Str(headline, key);
      if (!word.empty()) line += " " + word;
    }
  }
  const std::vector<std::string> causes = CausesOf(gpu);
  std::string cause;
  if (wanted) {
    cause = *wanted;
  } else {
    // The daemon names it (core::LeadingCause); else the same rule on the list.
    if (headline.is_object()) cause = Str(headline, "cause");
    if (cause.empty()) cause = Leading(causes);
    if (cause.empty() && headline.is_object()) {
      const std::string below = Str(headline, "below");
      if (!below.empty()) cause = "below_" + below;
    }
  }
  // With --cause, the code of the cause asked about; else the daemon's for its verdict.
  line = FaultTokenOf(wanted ? json(nullptr) : headline, cause) + " " + line;
  line += ": " + (cause.empty() ? std::string("no cause named") : cause);
  if (!headline.is_object() && !cause.empty()) {
    // No series below anything (a link that flaps between probes): the cause's own figures.
    const auto causes_it = gpu.find("causes");
    if (causes_it != gpu.end() && causes_it->is_array()) {
      for (const json& c : *causes_it) {
        if (Str(c, "cause") == cause && !Str(c, "detail").empty()) {
          line += " (" + Str(c, "detail") + ")";
          break;
        }
      }
    }
  }
  if (headline.is_object()) {
    const auto reading = Num(headline, "reading_bytes_per_second");
    const auto reference = Num(headline, "reference_bytes_per_second");
    const std::string below = Str(headline, "below");
    if (reading && reference && !below.empty()) {
      const bool peers = below == "baseline" && Str(headline, "baseline_of") == "peers";
      line +=
          ", " + GBps(*reading) + " GB/s < " + GBps(*reference) + " " + (peers ? "peers" : below);
    } else if (reading) {
      line += ", " + GBps(*reading) + " GB/s (recovering)";
    }
  }
  return line;
}

// Why a GPU's verdict is unknown, as the daemon coded it (core::UnjudgeableState): its
// confidential computing on with the GPUs not ready, else MIG with no instance.
NoVerdict UnjudgeableState(const json& gpu) {
  return Str(gpu, "code") == core::FaultOf(NoVerdict::kConfidentialComputing).Code()
             ? NoVerdict::kConfidentialComputing
             : NoVerdict::kMigNoInstance;
}

// The answer as JSON when it is a status document of the version this xferd reads and of
// the documented shape; else null and `problem` says what it is not.
json CheckedDocument(std::string_view body, std::string& problem) {
  json doc = ReadDocument(body, problem);
  if (!problem.empty()) return nullptr;
  // The version first: a document of another version is told by it, whatever its shape.
  if (const auto it = doc.find("version");
      it != doc.end() && it->is_number_integer() && *it != kReadsStatusVersion) {
    problem = fmt::format(
        "status document version {}; this xferd reads version {}: use the xferd that runs the "
        "daemon",
        it->get<long long>(), kReadsStatusVersion);
    return nullptr;
  }
  problem = ShapeProblem(doc);
  if (!problem.empty()) {
    problem = "the daemon's answer is not a status document as documented: " + problem;
    return nullptr;
  }
  return doc;
}

}  // namespace

int HealthExitCode(HealthOutcome state, bool nagios) {
  if (!nagios) return static_cast<int>(state);
  switch (state) {
    case HealthOutcome::kOk: return 0;
    case HealthOutcome::kProblem: return 2;  // CRITICAL
    case HealthOutcome::kUnknown: return 3;
  }
  return 3;
}

std::string NagiosLine(const HealthReport& report) {
  const char* word = report.state == HealthOutcome::kOk        ? "OK"
                     : report.state == HealthOutcome::kProblem ? "CRITICAL"
                                                               : "UNKNOWN";
  return std::string("XFERD ") + word + " - " + report.line;
}

std::string StatusDocumentProblem(std::string_view body) {
  std::string problem;
  CheckedDocument(body, problem);
  return problem;
}

HealthReport UnknownReport(core::NoVerdict state, const std::string& why) {
  return {HealthOutcome::kUnknown,
          "UNKNOWN " + core::FaultToken(core::FaultOf(state)) + ": " + why};
}

HealthReport JudgeStatus(std::string_view body, const HealthJudgeOptions& options) {
  std::string problem;
  const json doc = CheckedDocument(body, problem);
  if (!problem.empty()) return Unknown(NoVerdict::kDaemonUnreachable, problem);
  const json& daemon = doc["daemon"];
  if (!daemon["healthy"].get<bool>()) {
    return Unknown(
        NoVerdict::kDaemonUnhealthy,
        "xferd unhealthy: " + platform::Printable(daemon["reason"].get<std::string>(), 200));
  }
  if (daemon["last_cycle_age_seconds"].is_null()) {
    return Unknown(NoVerdict::kPending, "no verdict yet: the first probe cycle is running");
  }
  const double age = daemon["last_cycle_age_seconds"].get<double>();
  const double stale =
      options.stale_after_s ? *options.stale_after_s : daemon["stale_after_seconds"].get<double>();
  if (age > stale) {
    return Unknown(
        NoVerdict::kDaemonUnhealthy,
        fmt::format("verdict stale: the last probe cycle ended {} ago (stale after {}); is "
                    "the probe loop stuck?",
                    core::FormatSeconds(age, 0), core::FormatSeconds(stale, 0)));
  }

  const json& gpus = doc["gpus"];
  // Each GPU by its verdict (ShapeProblem made sure each is one core::ParseDeviceVerdict
  // reads). stale and unknown both say the verdict is not known: stale, the GPU went
  // unmeasured; unknown, it cannot be judged as it is (verdict_reason says why).
  std::vector<const json*> degraded, pending, unmeasured, unjudgeable;
  std::size_t degraded_otherwise = 0;  // degraded, but not with options.cause
  for (const json& gpu : gpus) {
    switch (*core::ParseDeviceVerdict(gpu["verdict"].get<std::string>())) {
      case core::DeviceVerdict::kDegraded: {
        bool counts = true;
        if (options.cause) {
          const std::vector<std::string> causes = CausesOf(gpu);
          counts = std::find(causes.begin(), causes.end(), *options.cause) != causes.end();
        }
        if (counts) {
          degraded.push_back(&gpu);
        } else {
          ++degraded_otherwise;
        }
        break;
      }
      case core::DeviceVerdict::kPending: pending.push_back(&gpu); break;
      case core::DeviceVerdict::kStale: unmeasured.push_back(&gpu); break;
      case core::DeviceVerdict::kUnknown: unjudgeable.push_back(&gpu); break;
      case core::DeviceVerdict::kOk: break;
    }
  }
  HealthReport report;
  if (options.cause) {
    // A note (capability_mismatch, ...) is not a fault: never a problem, whatever else is.
    const auto cause = core::ParseDiagnosisCause(*options.cause);
    if (cause && core::IsNote(*cause)) {
      report.state = HealthOutcome::kOk;
      report.line = "OK: " + *options.cause + " is not a fault";
      if (!degraded.empty() || degraded_otherwise > 0) {
        report.line += fmt::format(" ({} GPU degraded for other causes)",
                                   degraded.size() + degraded_otherwise);
      }
      return report;
    }
  }
  if (!degraded.empty()) {
    report.state = HealthOutcome::kProblem;
    report.line = "DEGRADED " + Problem(*degraded.front(), options.cause);
    if (degraded.size() > 1) report.line += fmt::format("; +{} GPU", degraded.size() - 1);
  } else if (!pending.empty()) {
    return Unknown(NoVerdict::kPending,
                   fmt::format("no verdict yet for gpu{} (re-judging after a restart)",
                               (*pending.front())["gpu"].get<long long>()));
  } else if (!unmeasured.empty()) {
    // Not measured recently: neither ok nor degraded (a drain stays, a node is not resumed).
    return Unknown(
        NoVerdict::kStale,
        fmt::format(
            "gpu{} stale: its probes have no current reading (busy, the cycle budget or failing "
            "probes; see the daemon's log)",
            (*unmeasured.front())["gpu"].get<long long>()));
  } else if (!unjudgeable.empty()) {
    // Nothing to judge it by (MIG with no instance, CC GPUs not ready): neither a drain
    // nor a resume.
    const json& gpu = *unjudgeable.front();
    const std::string why = Str(gpu, "verdict_reason");
    return Unknown(UnjudgeableState(gpu),
                   fmt::format("gpu{} verdict unknown: {}", gpu["gpu"].get<long long>(),
                               why.empty() ? std::string("the daemon cannot judge it") : why));
  } else if (options.cause) {
    report.state = HealthOutcome::kOk;
    report.line = "OK: no GPU degraded with " + *options.cause;
    if (degraded_otherwise > 0) {
      report.line += fmt::format(" ({} degraded with other causes)", degraded_otherwise);
    }
  } else {
    report.state = HealthOutcome::kOk;
    report.line = fmt::format("OK: {} GPU{} within band", gpus.size(), gpus.size() == 1 ? "" : "s");
  }
  report.line = platform::Printable(report.line, kLineBytes);
  return report;
}

}  // namespace xferd::cmd
