// The fault codes (core/fault_codes.h) on every surface that carries them, and the example
// remediation policy that reads them (deploy/kubernetes/remediation/nvsentinel-values.yaml):
// every reason xferd can write is generated from the code itself (every cause of
// core::kAllDiagnosisCauses, every state with no verdict, every GPU index length, mode and
// direction, node-problem-detector's 80-byte cut, the Slurm drain reason), so a new cause
// without a code, a code without a policy or a table row, or a line that moves the code
// late, fails here.
#include "core/fault_codes.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cmd/health_report.h"
#include "core/diagnosis.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"
#include "exporter/status.h"
#include "testing/samples.h"

namespace xferd::cmd {
namespace {

using core::DiagnosisCause;
using core::FaultCode;
using core::RecommendedAction;
using samples::HealthOf;

std::string SourceFile(const std::string& relative) {
  std::ifstream in(std::string(XFERD_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// node-problem-detector keeps this much of a plugin's output (xferd-monitor.yaml's
// max_output_length, NPD's default).
constexpr std::size_t kNpdBytes = 80;
// The Slurm health check: "xferd: " and the line without "DEGRADED ", cut to 200 bytes
// (deploy/slurm/xferd-slurm-health-check).
std::string SlurmReason(const std::string& line) {
  const std::string reason = "xferd: " + line.substr(std::string("DEGRADED ").size());
  return reason.substr(0, 200);
}

// The surfaces of one line: the line, NPD's condition message, the Slurm drain reason.
struct Reason {
  std::string line;
  HealthOutcome state = HealthOutcome::kUnknown;
};

// The status document of a node of one GPU judged `health` with `verdict`, as the daemon
// renders it (exporter::StatusBoard) a cycle after.
std::string DocumentOf(const core::DeviceHealth& health, core::DeviceVerdict verdict) {
  core::IncidentLog log;
  exporter::StatusBoard board(log);
  probes::DeviceInfo device;
  device.index = health.gpu;
  device.uuid = health.uuid;
  board.SetDevice(device);
  board.RecordHealth(health, verdict, false);
  exporter::DaemonStatus daemon;
  daemon.cycles = 3;
  daemon.last_cycle_age_s = 1;
  daemon.stale_after_s = 100;
  return board.Render(daemon, std::chrono::system_clock::now());
}

// One degraded GPU with `lead` the cause its verdict names (nullopt: none named) as the
// daemon renders it and `xferd health` judges it.
std::string DegradedDocument(int gpu, probes::TransferMode mode, probes::Direction direction,
                             const std::string& below, std::optional<DiagnosisCause> lead) {
  core::DeviceHealth health = HealthOf(gpu);
  health.band = {19.85e9, 26.15e9, "link Gen4 x16 at 0000:01:00.0"};
  core::SeriesHealth s;
  s.mode = mode;
  s.direction = direction;
  s.size_bytes = 64 << 20;
  s.median_bytes_per_s = 5.1e9;
  s.baseline_bytes_per_s = 24e9;
  s.degraded = true;
  s.bad_streak = 3;
  s.below_band = below == "band";
  s.below_baseline = below == "baseline" || below == "peers";
  if (below == "peers") s.peer_baseline_bytes_per_s = 25e9;
  health.series = {s};
  health.verdicts = {{mode, direction, true, false, true}};
  if (lead) health.diagnoses.push_back({*lead, "a detail", "advice"});
  return DocumentOf(health, core::DeviceVerdict::kDegraded);
}

// The GPU indices: one digit, and the longest a host can number (the 80-byte cut falls
// furthest to the left with it).
constexpr int kGpus[] = {0, 7, 65535};

// Every line `xferd health` can print for a problem or an unknown, from the code.
std::vector<Reason> EveryReason() {
  std::vector<Reason> out;
  std::vector<std::optional<DiagnosisCause>> leads = {std::nullopt};
  for (DiagnosisCause c : core::kAllDiagnosisCauses) leads.push_back(c);
  for (int gpu : kGpus) {
    for (const auto& [mode, direction] : probes::AllModeDirections()) {
      for (const char* below : {"band", "baseline", "peers", "recovering"}) {
        for (const auto& lead : leads) {
          const std::string doc = DegradedDocument(gpu, mode, direction, below, lead);
          out.push_back({JudgeStatus(doc, {}).line, HealthOutcome::kProblem});
          // An event rule's check: --cause with each cause of the table.
          if (lead && !core::IsNote(*lead)) {
            HealthJudgeOptions only;
            only.cause = std::string(core::ToString(*lead));
            const HealthReport r = JudgeStatus(doc, only);
            out.push_back({r.line, r.state});
          }
        }
      }
    }
    out.push_back({JudgeStatus(DocumentOf(HealthOf(gpu), core::DeviceVerdict::kPending), {}).line,
                   HealthOutcome::kUnknown});
    out.push_back({JudgeStatus(DocumentOf(HealthOf(gpu), core::DeviceVerdict::kStale), {}).line,
                   HealthOutcome::kUnknown});
    out.push_back({JudgeStatus(DocumentOf(HealthOf(gpu), core::DeviceVerdict::kOk), {}).line,
                   HealthOutcome::kOk});
  }
  // Each state with no verdict, as every path of `xferd health` words it (a long why: the
  // cut must leave the code whole).
  for (core::NoVerdict state : core::kAllNoVerdicts) {
    out.push_back({UnknownReport(state, std::string(300, 'w')).line, HealthOutcome::kUnknown});
  }
  return out;
}

// The documented grammar of a line's head (docs/health.md, "Fault codes").
const std::regex kHead(R"(^(DEGRADED|UNKNOWN) (XFERD-[0-9]{3})/([a-z_]+)[ :])");
const std::regex kDegraded(
    R"(^DEGRADED XFERD-[0-9]{3}/[a-z_]+ gpu([0-9]+)( [a-z_]+ [a-z0-9]+)?: ([a-z_]+|no cause named))");

TEST(FaultCodes, EveryCauseHasACodeOfItsOwnThatNamesIt) {
  std::set<int> numbers;
  for (DiagnosisCause c : core::kAllDiagnosisCauses) {
    const FaultCode& f = core::FaultOf(c);
    EXPECT_EQ(f.name, core::ToString(c)) << f.Code();
    EXPECT_FALSE(f.reserved) << f.Code() << " is produced: it is no longer reserved";
    EXPECT_TRUE(numbers.insert(f.number).second) << f.Code() << " is given to two causes";
    // A note is never acted on and numbered 5xx; a fault is acted on and is no 5xx or 9xx.
    EXPECT_EQ(f.acts, !core::IsNote(c)) << f.Code();
    EXPECT_EQ(f.number / 100 == 5, core::IsNote(c)) << f.Code();
    EXPECT_LT(f.number, 900) << f.Code();
    EXPECT_EQ(f.action == RecommendedAction::kNone, core::IsNote(c)) << f.Code();
    EXPECT_EQ(core::FaultOfLabel(core::ToString(c)), &f);
  }
}

TEST(FaultCodes, TheTableNeverGivesANumberOrANameTwice) {
  std::set<int> numbers;
  std::set<std::string_view> names;
  for (const FaultCode& f : core::AllFaultCodes()) {
    EXPECT_TRUE(numbers.insert(f.number).second) << f.Code();
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_GE(f.number, 100);
    EXPECT_LE(f.number, 999);
    EXPECT_EQ(core::FindFault(f.Code()), &f);
    EXPECT_FALSE(f.meaning.empty()) << f.Code();
    // 9xx: nothing is known, nothing to do.
    if (f.number >= 900) {
      EXPECT_FALSE(f.acts) << f.Code();
      EXPECT_EQ(f.action, RecommendedAction::kNone) << f.Code();
    }
  }
  for (core::NoVerdict s : core::kAllNoVerdicts) EXPECT_GE(core::FaultOf(s).number, 900);
  for (RecommendedAction a : core::kAllRecommendedActions) {
    EXPECT_EQ(core::ParseRecommendedAction(core::ToString(a)), a);
  }
  EXPECT_EQ(core::FindFault("XFERD-10"), nullptr);
  EXPECT_EQ(core::FindFault("xferd-101"), nullptr);
  EXPECT_EQ(core::FindFault("XFERD-999"), nullptr);
  EXPECT_EQ(core::FaultToken(core::FaultOf(DiagnosisCause::kLinkDowntrained)), "XFERD-101/reboot");
}

// docs/health.md's table is the table: each row's code, name and action, and no other row.
TEST(FaultCodes, TheDocsTableIsTheCodesTable) {
  const std::string docs = SourceFile("docs/health.md");
  const std::regex row(R"(\n\| `(XFERD-[0-9]{3})` \| `([a-z_]+)` \| [^|]+ \| `([a-z_]+)` \|)");
  std::map<std::string, std::pair<std::string, std::string>> rows;
  for (auto it = std::sregex_iterator(docs.begin(), docs.end(), row); it != std::sregex_iterator();
       ++it) {
    rows[(*it)[1]] = {(*it)[2], (*it)[3]};
  }
  ASSERT_FALSE(rows.empty()) << "no fault code table in docs/health.md";
  EXPECT_EQ(rows.size(), core::AllFaultCodes().size());
  for (const FaultCode& f : core::AllFaultCodes()) {
    ASSERT_TRUE(rows.contains(f.Code())) << f.Code() << " is not in docs/health.md";
    EXPECT_EQ(rows[f.Code()].first, f.name) << f.Code();
    EXPECT_EQ(rows[f.Code()].second, core::ToString(f.action)) << f.Code();
  }
}

TEST(FaultCodes, EveryLineCarriesItsCodeAndActionFirstAndNamesTheCauseOfTheCode) {
  const std::vector<Reason> reasons = EveryReason();
  ASSERT_GT(reasons.size(), 1000u);
  std::set<std::string> codes_seen;
  for (const Reason& r : reasons) {
    if (r.state == HealthOutcome::kOk) {
      EXPECT_TRUE(r.line.starts_with("OK: ")) << r.line;
      continue;
    }
    std::smatch head;
    ASSERT_TRUE(std::regex_search(r.line, head, kHead)) << r.line;
    const FaultCode* fault = core::FindFault(head[2].str());
    ASSERT_NE(fault, nullptr) << r.line;
    EXPECT_EQ(head[3].str(), core::ToString(fault->action)) << r.line;
    EXPECT_EQ(head[1] == "DEGRADED", r.state == HealthOutcome::kProblem) << r.line;
    // A problem names a fault that is acted on; an unknown a state that must not be.
    EXPECT_EQ(fault->acts, r.state == HealthOutcome::kProblem) << r.line;
    codes_seen.insert(fault->Code());
    // The code right after the first word: within node-problem-detector's 80 bytes whatever
    // follows.
    EXPECT_EQ(r.line.find("XFERD-"), head[1].length() + 1) << r.line;
    if (r.state != HealthOutcome::kProblem) continue;
    std::smatch words;
    ASSERT_TRUE(std::regex_search(r.line, words, kDegraded)) << r.line;
    const std::string cause = words[3].str();
    const FaultCode* named = core::FaultOfLabel(cause);
    EXPECT_EQ(named != nullptr ? named : &core::DegradedNoCause(), fault)
        << "the code is not that of the cause the line names: " << r.line;
    // The cause too, whole, with the longest GPU index, mode and direction.
    EXPECT_LE(r.line.find(": " + cause) + 2 + cause.size(), kNpdBytes) << r.line;
  }
  // Every code a GPU's verdict or xferd's state can produce is produced.
  for (const FaultCode& f : core::AllFaultCodes()) {
    if (f.reserved || f.number / 100 == 5) continue;
    EXPECT_TRUE(codes_seen.contains(f.Code())) << f.Code() << " never appears in a line";
  }
}

struct Policy {
  std::string name, type, status, regex, action, error_code;
  bool fatal = false;
};

std::vector<Policy> Policies() {
  const YAML::Node doc =
      YAML::Load(SourceFile("deploy/kubernetes/remediation/nvsentinel-values.yaml"));
  std::vector<Policy> out;
  for (const YAML::Node& p : doc["kubernetes-object-monitor"]["policies"]) {
    Policy policy;
    policy.name = p["name"].as<std::string>();
    const std::string expression = p["predicate"]["expression"].as<std::string>();
    std::smatch m;
    const auto field = [&](const char* pattern) {
      return std::regex_search(expression, m, std::regex(pattern)) ? m[1].str() : "";
    };
    policy.type = field(R"re(c\.type == "([^"]+)")re");
    policy.status = field(R"re(c\.status == "([^"]+)")re");
    policy.regex = field(R"re(c\.message\.matches\("([^"]*)"\))re");
    policy.action = p["healthEvent"]["recommendedAction"].as<std::string>();
    policy.fatal = p["healthEvent"]["isFatal"].as<bool>();
    policy.error_code = p["healthEvent"]["errorCode"][0].as<std::string>();
    out.push_back(policy);
  }
  return out;
}

// What each of xferd's actions becomes in NVSentinel (the policy file's header says why).
std::string NvSentinelAction(RecommendedAction action) {
  switch (action) {
    case RecommendedAction::kNone: return "NONE";
    case RecommendedAction::kDiagnose: return "CONTACT_SUPPORT";
    case RecommendedAction::kReboot: return "RESTART_BM";
    case RecommendedAction::kInspectLink: return "CONTACT_SUPPORT";
    case RecommendedAction::kFixHostConfig: return "NONE";
    case RecommendedAction::kReplace: return "REPLACE_VM";
  }
  return "";
}

TEST(RemediationPolicy, ItsRegexesReadEveryReasonXferdCanWriteAndActOnlyOnFaults) {
  const std::vector<Policy> policies = Policies();
  ASSERT_FALSE(policies.empty());
  std::map<std::string, const Policy*> by_code;
  for (const Policy& p : policies) {
    EXPECT_EQ(p.type, "XferdBandwidthDegraded") << p.name;
    EXPECT_EQ(p.status, "True") << p.name;
    // RE2 (CEL's matches) and ECMAScript (std::regex here) read this subset alike.
    EXPECT_TRUE(std::regex_match(p.regex, std::regex(R"([A-Za-z0-9 ^$/_\-\[\]{}()|.:]+)")))
        << p.name << ": " << p.regex;
    EXPECT_TRUE(by_code.emplace(p.error_code, &p).second) << p.error_code << " has two policies";
  }
  // Every code that is acted on has its policy, reserved ones included (the cause they are
  // kept for needs only its wiring); no code that must not be acted on has one.
  for (const FaultCode& f : core::AllFaultCodes()) {
    ASSERT_EQ(by_code.contains(f.Code()), f.acts) << f.Code();
    if (!f.acts) continue;
    const Policy& p = *by_code[f.Code()];
    EXPECT_EQ(p.action, NvSentinelAction(f.action)) << f.Code();
    EXPECT_EQ(p.fatal, f.action != RecommendedAction::kFixHostConfig) << f.Code();
  }
  std::vector<std::regex> compiled;
  for (const Policy& p : policies) compiled.emplace_back(p.regex);
  std::size_t checked = 0;
  for (const Reason& r : EveryReason()) {
    // NPD: exit 1 sets the condition True, 2 Unknown, 0 False; the message keeps 80 bytes.
    const std::string status = r.state == HealthOutcome::kProblem   ? "True"
                               : r.state == HealthOutcome::kUnknown ? "Unknown"
                                                                    : "False";
    const std::string message = r.line.substr(0, kNpdBytes);
    std::vector<const Policy*> matched;
    for (std::size_t i = 0; i < policies.size(); ++i) {
      if (policies[i].status == status && std::regex_search(message, compiled[i])) {
        matched.push_back(&policies[i]);
      }
    }
    ++checked;
    if (r.state != HealthOutcome::kProblem) {
      EXPECT_TRUE(matched.empty()) << "a policy acts on a state with no verdict: " << message;
      // Nor would it were the status misread as True.
      for (const std::regex& re : compiled) EXPECT_FALSE(std::regex_search(message, re)) << message;
      continue;
    }
    ASSERT_EQ(matched.size(), 1u) << "not exactly one policy for: " << message;
    std::smatch head;
    ASSERT_TRUE(std::regex_search(message, head, kHead)) << message;
    EXPECT_EQ(matched.front()->error_code, head[2].str()) << message;
  }
  EXPECT_GT(checked, 1000u);
}

// The Slurm drain reason carries the same token right after its prefix, whatever the GPU.
TEST(RemediationPolicy, TheSlurmDrainReasonCarriesTheCodeRightAfterItsPrefix) {
  const std::regex drain(R"(^xferd: (XFERD-[0-9]{3})/([a-z_]+) gpu[0-9]+)");
  for (const Reason& r : EveryReason()) {
    if (r.state != HealthOutcome::kProblem) continue;
    const std::string reason = SlurmReason(r.line);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(reason, m, drain)) << reason;
    EXPECT_NE(core::FindFault(m[1].str()), nullptr) << reason;
    EXPECT_LE(reason.size(), 200u);
  }
}

// node-problem-detector's monitor raises an event per fault that explains a low reading:
// a new cause without its rule fails here.
TEST(NpdMonitor, EveryCauseThatExplainsALowReadingHasItsEventRule) {
  const YAML::Node config =
      YAML::Load(SourceFile("deploy/kubernetes/node-problem-detector/xferd-monitor.yaml"));
  const auto monitor =
      nlohmann::json::parse(config["data"]["xferd-monitor.json"].as<std::string>());
  std::set<std::string> asked;
  for (const auto& rule : monitor["rules"]) {
    const auto& args = rule["args"];
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--cause") asked.insert(args[i + 1].get<std::string>());
    }
  }
  for (DiagnosisCause c : core::kAllDiagnosisCauses) {
    const bool explains =
        !core::IsNote(c) && c != DiagnosisCause::kBelowBand && c != DiagnosisCause::kBelowBaseline;
    EXPECT_EQ(asked.contains(std::string(core::ToString(c))), explains) << core::ToString(c);
  }
}

}  // namespace
}  // namespace xferd::cmd
