#include "cmd/health_report.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/incident_log.h"

namespace xferd::cmd {
namespace {

using nlohmann::json;

json Gpu(int index, const char* verdict) {
  return {{"gpu", index},
          {"uuid", "GPU-" + std::to_string(index)},
          {"verdict", verdict},
          {"headline", nullptr},
          {"causes", json::array()}};
}

json Degraded(int index, json causes, json headline) {
  json g = Gpu(index, "degraded");
  g["causes"] = std::move(causes);
  g["headline"] = std::move(headline);
  return g;
}

// The node's verdict as the daemon gives it (core::NodeVerdict).
std::string NodeVerdictOf(const json& gpus) {
  std::vector<core::DeviceVerdict> verdicts;
  for (const json& g : gpus) {
    const auto v = core::ParseDeviceVerdict(g["verdict"].get<std::string>());
    if (v) verdicts.push_back(*v);
  }
  return std::string(core::ToString(core::NodeVerdict(verdicts)));
}

// A GPU that cannot be judged as it is, with the daemon's reason.
json Unjudgeable(int index, const char* reason) {
  json g = Gpu(index, "unknown");
  g["verdict_reason"] = reason;
  return g;
}

json Doc(json gpus, double age = 5, double stale_after = 195) {
  const std::string verdict = NodeVerdictOf(gpus);
  return {{"version", 1},
          {"verdict", verdict},
          {"daemon",
           {{"healthy", true},
            {"reason", "ok"},
            {"cycles", 7},
            {"last_cycle_age_seconds", age},
            {"stale_after_seconds", stale_after}}},
          {"gpus", std::move(gpus)},
          {"incidents", json::array()}};
}

json BelowBand() {
  return {{"mode", "pinned"},
          {"direction", "h2d"},
          {"size", "64MiB"},
          {"below", "band"},
          {"reading_bytes_per_second", 5.1e9},
          {"reference_bytes_per_second", 19.85e9}};
}

HealthReport Judge(const json& doc, HealthJudgeOptions options = {}) {
  return JudgeStatus(doc.dump(), options);
}

TEST(HealthReport, OkWhenEveryGpuIsOk) {
  const HealthReport r = Judge(Doc({Gpu(0, "ok"), Gpu(1, "ok")}));
  EXPECT_EQ(r.state, HealthOutcome::kOk);
  EXPECT_EQ(r.line, "OK: 2 GPUs within band");
}

// The code the daemon gives for its verdict is the line's, even one this xferd does not know
// (a newer daemon's); a daemon that gives none (an older one) gets this xferd's for the
// cause; a code not in the documented form is not passed on.
TEST(HealthReport, TheLineCarriesTheDaemonsCodeRightAfterTheVerdict) {
  json headline = BelowBand();
  headline["cause"] = "a_newer_cause";
  headline["code"] = "XFERD-177";
  headline["action"] = "inspect_link";
  const json causes = {{{"cause", "a_newer_cause"}, {"detail", "x"}}};
  EXPECT_EQ(Judge(Doc({Degraded(0, causes, headline)})).line,
            "DEGRADED XFERD-177/inspect_link gpu0 pinned h2d: a_newer_cause, 5.10 GB/s < 19.85 "
            "band");
  headline["code"] = "XFERD-1777; rm -rf /";
  EXPECT_EQ(Judge(Doc({Degraded(0, causes, headline)})).line,
            "DEGRADED XFERD-300/diagnose gpu0 pinned h2d: a_newer_cause, 5.10 GB/s < 19.85 band");
  json older = BelowBand();
  older["cause"] = "numa_remote";
  EXPECT_EQ(Judge(Doc({Degraded(0, {{{"cause", "numa_remote"}}}, older)})).line,
            "DEGRADED XFERD-201/fix_host gpu0 pinned h2d: numa_remote, 5.10 GB/s < 19.85 band");
}

TEST(HealthReport, ADegradedGpuIsAProblemNamingGpuSeriesAndCauseFirst) {
  const json causes = {{{"cause", "below_band"}, {"detail", "x"}},
                       {{"cause", "link_downtrained"}, {"detail", "0000:00:01.0 Gen4 x4"}}};
  const HealthReport r = Judge(Doc({Gpu(0, "ok"), Degraded(1, causes, BelowBand())}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  // The explaining cause, not below_band, and the figures after it.
  EXPECT_EQ(r.line,
            "DEGRADED XFERD-101/reboot gpu1 pinned h2d: link_downtrained, 5.10 GB/s < 19.85 band");
  EXPECT_LE(r.line.find("link_downtrained"), 80u) << "within node-problem-detector's 80 bytes";
}

// The issue's line: "DEGRADED gpu1 pageable h2d: capability_mismatch, ...": a note (the docs
// say "not a fault") never names the fault, whether the daemon named the leading cause in
// its headline or only listed the causes; the drain reason and the NPD condition are this
// line.
TEST(HealthReport, ANoteNeverNamesTheFault) {
  const json causes = {{{"cause", "capability_mismatch"}, {"detail", "GPU can do Gen5 x16"}},
                       {{"cause", "below_band"}, {"detail", "x"}}};
  const HealthReport listed = Judge(Doc({Degraded(1, causes, BelowBand())}));
  EXPECT_EQ(listed.line,
            "DEGRADED XFERD-301/diagnose gpu1 pinned h2d: below_band, 5.10 GB/s < 19.85 band");
  json headline = BelowBand();
  headline["cause"] = "below_band";
  const json ranked = {{{"cause", "below_band"}, {"detail", "x"}},
                       {{"cause", "capability_mismatch"}, {"detail", "GPU can do Gen5 x16"}}};
  EXPECT_EQ(Judge(Doc({Degraded(1, ranked, headline)})).line,
            "DEGRADED XFERD-301/diagnose gpu1 pinned h2d: below_band, 5.10 GB/s < 19.85 band");
  // Faults rank among themselves as the daemon ranks them (core::CauseRank).
  const json two = {{{"cause", "pinned_pageable_ratio"}, {"detail", ""}},
                    {{"cause", "link_downtrained"}, {"detail", ""}}};
  EXPECT_EQ(Judge(Doc({Degraded(0, two, BelowBand())})).line,
            "DEGRADED XFERD-101/reboot gpu0 pinned h2d: link_downtrained, 5.10 GB/s < 19.85 band");
}

// `--cause` of a note: never a problem (no NPD event, no drain for what is not a fault).
TEST(HealthReport, ANoteAskedForIsNeverAProblem) {
  const json causes = {{{"cause", "below_band"}, {"detail", "x"}},
                       {{"cause", "capability_mismatch"}, {"detail", "GPU can do Gen5 x16"}}};
  HealthJudgeOptions options;
  options.cause = "capability_mismatch";
  const HealthReport r = Judge(Doc({Degraded(0, causes, BelowBand())}), options);
  EXPECT_EQ(r.state, HealthOutcome::kOk);
  EXPECT_EQ(r.line, "OK: capability_mismatch is not a fault (1 GPU degraded for other causes)");
  options.cause = "below_band";
  EXPECT_EQ(Judge(Doc({Degraded(0, causes, BelowBand())}), options).state, HealthOutcome::kProblem);
}

// A GPU whose verdict is stale (not measured recently) is unknown: neither a drain nor a
// resume; a degraded GPU elsewhere still is a problem.
TEST(HealthReport, AStaleGpuIsUnknownNeverOk) {
  const HealthReport r = Judge(Doc({Gpu(0, "ok"), Gpu(1, "stale")}));
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_EQ(r.line.rfind("UNKNOWN XFERD-901/none: gpu1 stale", 0), 0u) << r.line;
  EXPECT_EQ(Judge(Doc({Gpu(0, "stale"), Degraded(1, json::array(), BelowBand())})).state,
            HealthOutcome::kProblem);
}

// A GPU that cannot be judged (MIG with no instance, CC GPUs not ready) is unknown with the
// daemon's reason, told apart from a stale one (which went unmeasured); a degraded GPU
// elsewhere still is a problem, and a stale GPU is named before an unknown one, as the
// node's verdict orders them.
TEST(HealthReport, AnUnknownGpuIsUnknownWithItsReasonApartFromAStaleOne) {
  const char* mig = "MIG enabled, no GPU instance to probe through";
  HealthReport r = Judge(Doc({Gpu(0, "ok"), Unjudgeable(1, mig)}));
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_EQ(r.line, std::string("UNKNOWN XFERD-903/none: gpu1 verdict unknown: ") + mig);
  // Confidential computing's GPUs not ready: the code the daemon gave it.
  json cc = Unjudgeable(0, "confidential computing on, GPUs not ready for work");
  cc["code"] = "XFERD-902";
  EXPECT_EQ(Judge(Doc({cc})).line,
            "UNKNOWN XFERD-902/none: gpu0 verdict unknown: confidential computing on, GPUs not "
            "ready for work");
  EXPECT_EQ(Judge(Doc({Unjudgeable(0, mig), Degraded(1, json::array(), BelowBand())})).state,
            HealthOutcome::kProblem);
  r = Judge(Doc({Unjudgeable(0, mig), Gpu(1, "stale")}));
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_EQ(r.line.rfind("UNKNOWN XFERD-901/none: gpu1 stale", 0), 0u) << r.line;
  // A cause asked for: unknown still, never "no GPU degraded with ...".
  HealthJudgeOptions link;
  link.cause = "link_downtrained";
  EXPECT_EQ(Judge(Doc({Unjudgeable(0, mig)}), link).state, HealthOutcome::kUnknown);
}

// Every verdict the daemon writes (core's words) is one `xferd health` reads, and the node's
// verdict it checks is the one core gives from them: no second list to fall behind.
TEST(HealthReport, ReadsExactlyTheVerdictWordsTheDaemonWrites) {
  for (core::DeviceVerdict v : core::kAllDeviceVerdicts) {
    const std::string word(core::ToString(v));
    json gpu = v == core::DeviceVerdict::kUnknown ? Unjudgeable(1, "CC GPUs not ready")
                                                  : Gpu(1, word.c_str());
    if (v == core::DeviceVerdict::kDegraded) gpu = Degraded(1, json::array(), BelowBand());
    const HealthReport r = Judge(Doc({Gpu(0, "ok"), gpu}));
    EXPECT_EQ(r.line.find("not a status document"), std::string::npos) << word << ": " << r.line;
    EXPECT_EQ(r.state, v == core::DeviceVerdict::kOk         ? HealthOutcome::kOk
                       : v == core::DeviceVerdict::kDegraded ? HealthOutcome::kProblem
                                                             : HealthOutcome::kUnknown)
        << word << ": " << r.line;
  }
  json doc = Doc({Gpu(0, "ok"), Gpu(1, "ok")});
  doc["gpus"][0]["verdict"] = "maybe";
  const HealthReport r = Judge(doc);
  for (core::DeviceVerdict v : core::kAllDeviceVerdicts) {
    EXPECT_NE(r.line.find("\"" + std::string(core::ToString(v)) + "\""), std::string::npos)
        << r.line;
  }
}

// Held to its peers' baseline while it learns: the line says so.
TEST(HealthReport, BelowItsPeersBaselineSaysPeers) {
  json headline = BelowBand();
  headline["below"] = "baseline";
  headline["baseline_of"] = "peers";
  headline["mode"] = "pageable";
  headline["reference_bytes_per_second"] = 8.0e9;
  EXPECT_EQ(
      Judge(Doc({Degraded(1, {{{"cause", "below_baseline"}, {"detail", ""}}}, headline)})).line,
      "DEGRADED XFERD-302/diagnose gpu1 pageable h2d: below_baseline, 5.10 GB/s < 8.00 peers");
}

TEST(HealthReport, WithoutAnExplainingCauseItSaysWhatTheReadingIsBelow) {
  json headline = BelowBand();
  headline["below"] = "baseline";
  headline["reference_bytes_per_second"] = 25.2e9;
  const HealthReport r =
      Judge(Doc({Degraded(0, {{{"cause", "below_baseline"}, {"detail", ""}}}, headline)}));
  EXPECT_EQ(
      r.line,
      "DEGRADED XFERD-302/diagnose gpu0 pinned h2d: below_baseline, 5.10 GB/s < 25.20 baseline");
  const HealthReport none = Judge(Doc({Degraded(0, json::array(), nullptr)}));
  EXPECT_EQ(none.state, HealthOutcome::kProblem);
  EXPECT_EQ(none.line, "DEGRADED XFERD-300/diagnose gpu0: no cause named");
}

TEST(HealthReport, AFlappingLinkIsNamedWithItsFiguresWhereNoSeriesIsLow) {
  const json causes = {{{"cause", "link_flapping"},
                        {"detail", "6 transitions and 12 s below capability in the last 10 min"}}};
  const HealthReport r = Judge(Doc({Degraded(0, causes, nullptr)}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  EXPECT_EQ(r.line,
            "DEGRADED XFERD-103/inspect_link gpu0: link_flapping (6 transitions and 12 s below "
            "capability in the last 10 min)");
  EXPECT_LE(r.line.find("link_flapping"), 80u);
}

TEST(HealthReport, SeveralDegradedGpusNameTheFirstAndCountTheRest) {
  const HealthReport r = Judge(
      Doc({Degraded(0, json::array(), BelowBand()), Degraded(3, json::array(), BelowBand())}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  EXPECT_EQ(r.line.rfind("DEGRADED XFERD-301/diagnose gpu0 pinned h2d: below_band", 0), 0u)
      << r.line;
  EXPECT_NE(r.line.find("; +1 GPU"), std::string::npos) << r.line;
}

TEST(HealthReport, ACauseFilterCountsOnlyThatCause) {
  const json numa = {{{"cause", "numa_remote"}, {"detail", ""}}};
  const json link = {{{"cause", "link_downtrained"}, {"detail", ""}}};
  const json doc = Doc({Degraded(0, numa, BelowBand()), Degraded(1, link, BelowBand())});
  HealthJudgeOptions options;
  options.cause = "link_downtrained";
  HealthReport r = Judge(doc, options);
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  EXPECT_EQ(r.line.rfind("DEGRADED XFERD-101/reboot gpu1 pinned h2d: link_downtrained", 0), 0u)
      << r.line;
  options.cause = "iommu_translating";
  r = Judge(doc, options);
  EXPECT_EQ(r.state, HealthOutcome::kOk);
  EXPECT_EQ(r.line, "OK: no GPU degraded with iommu_translating (2 degraded with other causes)");
}

TEST(HealthReport, NoVerdictYetIsUnknown) {
  json first = Doc({Gpu(0, "pending")});
  first["daemon"]["last_cycle_age_seconds"] = nullptr;
  HealthReport r = Judge(first);
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_EQ(r.line, "UNKNOWN XFERD-900/none: no verdict yet: the first probe cycle is running");
  // Re-judging after a restart: unknown, unless another GPU is degraded.
  r = Judge(Doc({Gpu(0, "ok"), Gpu(1, "pending")}));
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_NE(r.line.find("gpu1"), std::string::npos) << r.line;
  r = Judge(Doc({Degraded(0, json::array(), BelowBand()), Gpu(1, "pending")}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
}

TEST(HealthReport, AStaleVerdictIsUnknown) {
  HealthReport r = Judge(Doc({Degraded(0, json::array(), BelowBand())}, 400, 195));
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_NE(r.line.find("stale"), std::string::npos) << r.line;
  HealthJudgeOptions options;
  options.stale_after_s = 3;
  r = Judge(Doc({Gpu(0, "ok")}, 5, 195), options);
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_NE(r.line.find("stale after 3 s"), std::string::npos) << r.line;
}

TEST(HealthReport, AnUnhealthyDaemonIsUnknownWithItsReason) {
  json doc = Doc({Gpu(0, "ok")});
  doc["daemon"]["healthy"] = false;
  doc["daemon"]["reason"] = "a probe is hung in a device call";
  const HealthReport r = Judge(doc);
  EXPECT_EQ(r.state, HealthOutcome::kUnknown);
  EXPECT_EQ(r.line, "UNKNOWN XFERD-910/none: xferd unhealthy: a probe is hung in a device call");
}

TEST(HealthReport, AnythingButAStatusDocumentIsUnknownNeverAThrow) {
  const std::vector<std::string> bodies = {
      "",
      "not json",
      "[1,2,3]",
      "{}",
      R"({"version": "1"})",
      R"({"version": 2, "daemon": {}})",
      R"({"version": 1})",
      R"({"version": 1, "daemon": 5})",
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}})",
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}, "gpus": {}})",
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}, "gpus": []})",
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}, "gpus": [7]})",
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}, "gpus": [{"verdict": "sideways"}]})",
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}, "gpus": [{"verdict": 1}]})",
      std::string(100000, '['),
      "{\"version\": 1, \"daemon\": {\"healthy\": false, \"reason\": \"\x1b[31m\xff\"}}",
  };
  for (const std::string& body : bodies) {
    const HealthReport r = JudgeStatus(body, {});
    EXPECT_EQ(r.state, HealthOutcome::kUnknown) << body.substr(0, 80) << " -> " << r.line;
    EXPECT_EQ(r.line.rfind("UNKNOWN XFERD-911/none: ", 0), 0u) << r.line;
    for (char c : r.line) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "printable: " << r.line;
  }
  // Odd types inside a degraded GPU: not the documented shape, so unknown, saying where.
  const HealthReport odd = JudgeStatus(
      R"({"version": 1, "verdict": "degraded", "daemon": {"healthy": true, "reason": "",
          "last_cycle_age_seconds": 1, "stale_after_seconds": 195}, "gpus": [{"verdict":
          "degraded", "gpu": "zero", "headline": {"mode": 5, "reading_bytes_per_second":
          "fast"}, "causes": [3, {"cause": null}, {"cause": "numa_remote"}]}]})",
      {});
  EXPECT_EQ(odd.state, HealthOutcome::kUnknown);
  EXPECT_NE(odd.line.find("gpus[0].gpu is the string \"zero\""), std::string::npos) << odd.line;
}

// The review: `"healthy": "false"` (a string), an age of 1e9 with stale_after_seconds 0 or
// missing, and a negative age each gave exit 0 "OK". Anything not exactly the documented
// shape is unknown, with a line saying what was wrong; never OK, never a problem.
TEST(HealthReport, AnyDocumentNotOfTheDocumentedShapeIsUnknownSayingWhatIsWrong) {
  struct Case {
    const char* name;
    std::function<void(json&)> spoil;
    const char* said;  // in the line
  };
  const std::vector<Case> cases = {
      {"healthy a string", [](json& d) { d["daemon"]["healthy"] = "false"; },
       "daemon.healthy is the string \"false\""},
      {"healthy a number", [](json& d) { d["daemon"]["healthy"] = 0; }, "daemon.healthy"},
      {"healthy missing", [](json& d) { d["daemon"].erase("healthy"); },
       "daemon.healthy is missing"},
      {"stale after 0",
       [](json& d) {
         d["daemon"]["stale_after_seconds"] = 0;
         d["daemon"]["last_cycle_age_seconds"] = 1e9;
       },
       "daemon.stale_after_seconds is the number 0"},
      {"stale after missing",
       [](json& d) {
         d["daemon"].erase("stale_after_seconds");
         d["daemon"]["last_cycle_age_seconds"] = 1e9;
       },
       "daemon.stale_after_seconds is missing"},
      {"stale after negative", [](json& d) { d["daemon"]["stale_after_seconds"] = -5; },
       "daemon.stale_after_seconds"},
      {"stale after a string", [](json& d) { d["daemon"]["stale_after_seconds"] = "195"; },
       "daemon.stale_after_seconds"},
      {"negative age", [](json& d) { d["daemon"]["last_cycle_age_seconds"] = -1e9; },
       "daemon.last_cycle_age_seconds is the number -1"},
      {"age a string", [](json& d) { d["daemon"]["last_cycle_age_seconds"] = "5"; },
       "daemon.last_cycle_age_seconds"},
      {"age missing", [](json& d) { d["daemon"].erase("last_cycle_age_seconds"); },
       "daemon.last_cycle_age_seconds is missing"},
      {"reason not a string", [](json& d) { d["daemon"]["reason"] = nullptr; }, "daemon.reason"},
      {"version a string", [](json& d) { d["version"] = "1"; }, "version"},
      {"version 1.0", [](json& d) { d["version"] = 1.0; }, "version is the number 1.0"},
      {"node says ok over a degraded GPU",
       [](json& d) { d["gpus"][1] = Degraded(1, json::array(), BelowBand()); },
       "verdict is the string \"ok\", not \"degraded\""},
      {"node verdict missing", [](json& d) { d.erase("verdict"); }, "verdict is missing"},
      {"verdict of a GPU in capitals", [](json& d) { d["gpus"][0]["verdict"] = "OK"; },
       "gpus[0].verdict"},
      {"verdict of a GPU true", [](json& d) { d["gpus"][0]["verdict"] = true; },
       "gpus[0].verdict is true"},
      {"a GPU twice", [](json& d) { d["gpus"][1]["gpu"] = 0; }, "gpu0 is listed twice"},
      {"an unknown GPU without its reason",
       [](json& d) {
         d["gpus"][1]["verdict"] = "unknown";
         d["verdict"] = "unknown";
       },
       "gpus[1].verdict_reason is missing"},
      {"node says unknown over a stale GPU",
       [](json& d) {
         d["gpus"][0] = Unjudgeable(0, "MIG enabled, no GPU instance to probe through");
         d["gpus"][1]["verdict"] = "stale";
         d["verdict"] = "unknown";
       },
       "verdict is the string \"unknown\", not \"stale\""},
      {"negative GPU index", [](json& d) { d["gpus"][0]["gpu"] = -1; }, "gpus[0].gpu"},
      {"GPU index 0.5", [](json& d) { d["gpus"][0]["gpu"] = 0.5; }, "gpus[0].gpu"},
      {"causes not a list", [](json& d) { d["gpus"][0]["causes"] = "none"; }, "gpus[0].causes"},
      {"causes missing", [](json& d) { d["gpus"][0].erase("causes"); }, "gpus[0].causes"},
      {"a cause without a name",
       [](json& d) { d["gpus"][0]["causes"] = json::array({json::object()}); },
       "gpus[0].causes[0].cause is missing"},
      {"headline a string", [](json& d) { d["gpus"][0]["headline"] = "fine"; }, "gpus[0].headline"},
      {"headline below sideways",
       [](json& d) {
         json h = BelowBand();
         h["below"] = "sideways";
         d["gpus"][0] = Degraded(0, json::array(), h);
         d["verdict"] = "degraded";
       },
       "gpus[0].headline.below"},
      {"headline reading negative",
       [](json& d) {
         json h = BelowBand();
         h["reading_bytes_per_second"] = -5;
         d["gpus"][0] = Degraded(0, json::array(), h);
         d["verdict"] = "degraded";
       },
       "gpus[0].headline.reading_bytes_per_second"},
      {"gpus empty", [](json& d) { d["gpus"] = json::array(); }, "gpus is empty"},
      {"gpus an object", [](json& d) { d["gpus"] = json::object(); }, "gpus is an object"},
      {"daemon a list", [](json& d) { d["daemon"] = json::array(); }, "daemon is a list"},
  };
  for (const Case& c : cases) {
    json doc = Doc({Gpu(0, "ok"), Gpu(1, "ok")}, 5, 195);
    c.spoil(doc);
    const HealthReport r = Judge(doc);
    EXPECT_EQ(r.state, HealthOutcome::kUnknown) << c.name << " -> " << r.line;
    EXPECT_EQ(r.line.rfind("UNKNOWN XFERD-911/none: ", 0), 0u) << c.name << " -> " << r.line;
    EXPECT_NE(r.line.find(c.said), std::string::npos) << c.name << " -> " << r.line;
  }
  // A key given twice: a reader could take either of its values.
  const std::string ok = Doc({Gpu(0, "ok")}).dump();
  const std::string twice =
      "{\"daemon\": {\"healthy\": false, \"reason\": \"hung\"}, " + ok.substr(1);
  const HealthReport r = JudgeStatus(twice, {});
  EXPECT_EQ(r.state, HealthOutcome::kUnknown) << r.line;
  EXPECT_NE(r.line.find("\"daemon\" twice"), std::string::npos) << r.line;
  // And the documented shape itself is judged (the cases above are one change away from it).
  EXPECT_EQ(Judge(Doc({Gpu(0, "ok"), Gpu(1, "ok")})).state, HealthOutcome::kOk);
}

TEST(HealthReport, ExitCodesFollowNodeProblemDetectorOrNagios) {
  EXPECT_EQ(HealthExitCode(HealthOutcome::kOk, false), 0);
  EXPECT_EQ(HealthExitCode(HealthOutcome::kProblem, false), 1);
  EXPECT_EQ(HealthExitCode(HealthOutcome::kUnknown, false), 2);
  EXPECT_EQ(HealthExitCode(HealthOutcome::kOk, true), 0);
  EXPECT_EQ(HealthExitCode(HealthOutcome::kProblem, true), 2);
  EXPECT_EQ(HealthExitCode(HealthOutcome::kUnknown, true), 3);
  EXPECT_EQ(NagiosLine({HealthOutcome::kProblem, "DEGRADED gpu0"}),
            "XFERD CRITICAL - DEGRADED gpu0");
}

}  // namespace
// What `xferd status` asks before it shows a table: the same checks JudgeStatus makes of a
// document (its version, the documented shape), with the same words.
TEST(HealthReport, TheDocumentCheckIsJudgeStatussOwn) {
  EXPECT_EQ(StatusDocumentProblem(Doc({Gpu(0, "ok")}).dump()), "");
  EXPECT_EQ(StatusDocumentProblem(Doc({Gpu(0, "pending")}).dump()), "") << "unknown, yet read";
  json later = Doc({Gpu(0, "ok")});
  later["version"] = 2;
  json shapeless = Doc({Gpu(0, "ok")});
  shapeless["daemon"]["healthy"] = "false";
  for (const std::string body : {later.dump(), shapeless.dump(), std::string("[]"),
                                 std::string("{\"version\": 1, \"version\": 1}")}) {
    const std::string problem = StatusDocumentProblem(body);
    EXPECT_FALSE(problem.empty()) << body;
    const HealthReport judged = JudgeStatus(body, {});
    EXPECT_EQ(judged.state, HealthOutcome::kUnknown);
    EXPECT_EQ(judged.line, "UNKNOWN XFERD-911/none: " + problem);
  }
}

}  // namespace xferd::cmd
