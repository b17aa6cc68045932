#include "cmd/health_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/clock.h"
#include "core/diagnosis.h"
#include "platform/printable.h"

namespace xferd::cmd {
namespace {

using nlohmann::json;

// The version of the status document this xferd reads (exporter::kStatusVersion).
constexpr int kReadsStatusVersion = 1;
// The longest line printed: the first 80 bytes are what node-problem-detector keeps; the
// rest is for people and logs.
constexpr std::size_t kLineBytes = 300;

HealthReport Unknown(const std::string& why) {
  return {HealthOutcome::kUnknown, "UNKNOWN: " + why};
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

// A cause worth naming first: one that explains a low reading, not the low reading itself.
bool Explains(const std::string& cause) {
  return cause != core::ToString(core::DiagnosisCause::kBelowBand) &&
         cause != core::ToString(core::DiagnosisCause::kBelowBaseline);
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

// "gpu0 pinned h2d: link_downtrained, 5.10 GB/s < 19.85 band"
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
    for (const std::string& c : causes) {
      if (Explains(c)) {
        cause = c;
        break;
      }
    }
    if (cause.empty() && headline.is_object()) {
      const std::string below = Str(headline, "below");
      if (!below.empty()) cause = "below_" + below;
    }
    if (cause.empty() && !causes.empty()) cause = causes.front();
  }
  line += ": " + (cause.empty() ? std::string("cause not visible to xferd") : cause);
  if (headline.is_object()) {
    const auto reading = Num(headline, "reading_bytes_per_second");
    const auto reference = Num(headline, "reference_bytes_per_second");
    const std::string below = Str(headline, "below");
    if (reading && reference && !below.empty()) {
      line += ", " + GBps(*reading) + " GB/s < " + GBps(*reference) + " " + below;
    } else if (reading) {
      line += ", " + GBps(*reading) + " GB/s (recovering)";
    }
  }
  return line;
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

HealthReport JudgeStatus(std::string_view body, const HealthJudgeOptions& options) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Unknown("the daemon's answer is not a status document (not a JSON object)");
  }
  const auto version = Num(doc, "version");
  if (!version) return Unknown("the daemon's answer has no \"version\"");
  if (*version != kReadsStatusVersion) {
    return Unknown(
        fmt::format("status document version {:.0f}; this xferd reads version {}: "
                    "use the xferd that runs the daemon",
                    *version, kReadsStatusVersion));
  }
  const json daemon = doc.contains("daemon") ? doc["daemon"] : json(nullptr);
  if (!daemon.is_object()) return Unknown("the status document has no \"daemon\"");
  if (daemon.contains("healthy") && daemon["healthy"].is_boolean() &&
      !daemon["healthy"].get<bool>()) {
    return Unknown("xferd unhealthy: " + Str(daemon, "reason"));
  }
  const auto age = Num(daemon, "last_cycle_age_seconds");
  if (!age) return Unknown("no verdict yet: the first probe cycle is running");
  const double stale = options.stale_after_s ? *options.stale_after_s
                                             : Num(daemon, "stale_after_seconds").value_or(0);
  if (stale > 0 && *age > stale) {
    return Unknown(
        fmt::format("verdict stale: the last probe cycle ended {} ago (stale after {}); is "
                    "the probe loop stuck?",
                    core::FormatSeconds(*age, 0), core::FormatSeconds(stale, 0)));
  }

  const json gpus = doc.contains("gpus") ? doc["gpus"] : json(nullptr);
  if (!gpus.is_array()) return Unknown("the status document has no \"gpus\" list");
  if (gpus.empty()) return Unknown("the daemon probes no GPU");
  std::vector<const json*> degraded, pending, unjudgeable;
  std::size_t degraded_otherwise = 0;  // degraded, but not with options.cause
  for (const json& gpu : gpus) {
    if (!gpu.is_object()) return Unknown("a GPU entry is not an object");
    const std::string verdict = Str(gpu, "verdict");
    if (verdict == "degraded") {
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
    } else if (verdict == "pending") {
      pending.push_back(&gpu);
    } else if (verdict == "unknown") {
      unjudgeable.push_back(&gpu);
    } else if (verdict != "ok") {
      return Unknown("GPU verdict \"" + platform::Printable(verdict, 40) +
                     "\" is not one this xferd knows");
    }
  }
  HealthReport report;
  if (!degraded.empty()) {
    report.state = HealthOutcome::kProblem;
    report.line = "DEGRADED " + Problem(*degraded.front(), options.cause);
    if (degraded.size() > 1) report.line += fmt::format("; +{} GPU", degraded.size() - 1);
  } else if (!pending.empty()) {
    const auto index = Num(*pending.front(), "gpu");
    return Unknown(fmt::format("no verdict yet for gpu{} (re-judging after a restart)",
                               index ? fmt::format("{:.0f}", *index) : std::string("?")));
  } else if (!unjudgeable.empty()) {
    // Nothing to judge it by (MIG with no instance, CC GPUs not ready): neither a drain
    // nor a resume.
    const auto index = Num(*unjudgeable.front(), "gpu");
    const std::string why = Str(*unjudgeable.front(), "verdict_reason");
    return Unknown(fmt::format("gpu{} verdict unknown: {}",
                               index ? fmt::format("{:.0f}", *index) : std::string("?"),
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
