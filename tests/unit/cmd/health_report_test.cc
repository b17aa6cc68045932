#include "cmd/health_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

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

json Doc(json gpus, double age = 5, double stale_after = 195) {
  return {{"version", 1},
          {"verdict", "ok"},
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

TEST(HealthReport, ADegradedGpuIsAProblemNamingGpuSeriesAndCauseFirst) {
  const json causes = {{{"cause", "below_band"}, {"detail", "x"}},
                       {{"cause", "link_downtrained"}, {"detail", "0000:00:01.0 Gen4 x4"}}};
  const HealthReport r = Judge(Doc({Gpu(0, "ok"), Degraded(1, causes, BelowBand())}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  // The explaining cause, not below_band, and the figures after it.
  EXPECT_EQ(r.line, "DEGRADED gpu1 pinned h2d: link_downtrained, 5.10 GB/s < 19.85 band");
  EXPECT_LE(r.line.find("link_downtrained"), 80u) << "within node-problem-detector's 80 bytes";
}

TEST(HealthReport, WithoutAnExplainingCauseItSaysWhatTheReadingIsBelow) {
  json headline = BelowBand();
  headline["below"] = "baseline";
  headline["reference_bytes_per_second"] = 25.2e9;
  const HealthReport r =
      Judge(Doc({Degraded(0, {{{"cause", "below_baseline"}, {"detail", ""}}}, headline)}));
  EXPECT_EQ(r.line, "DEGRADED gpu0 pinned h2d: below_baseline, 5.10 GB/s < 25.20 baseline");
  const HealthReport none = Judge(Doc({Degraded(0, json::array(), nullptr)}));
  EXPECT_EQ(none.state, HealthOutcome::kProblem);
  EXPECT_EQ(none.line, "DEGRADED gpu0: cause not visible to xferd");
}

TEST(HealthReport, AFlappingLinkIsNamedWithItsFiguresWhereNoSeriesIsLow) {
  const json causes = {{{"cause", "link_flapping"},
                        {"detail", "6 transitions and 12 s below capability in the last 10 min"}}};
  const HealthReport r = Judge(Doc({Degraded(0, causes, nullptr)}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  EXPECT_EQ(r.line,
            "DEGRADED gpu0: link_flapping (6 transitions and 12 s below capability in the last "
            "10 min)");
  EXPECT_LE(r.line.find("link_flapping"), 80u);
}

TEST(HealthReport, SeveralDegradedGpusNameTheFirstAndCountTheRest) {
  const HealthReport r = Judge(
      Doc({Degraded(0, json::array(), BelowBand()), Degraded(3, json::array(), BelowBand())}));
  EXPECT_EQ(r.state, HealthOutcome::kProblem);
  EXPECT_EQ(r.line.rfind("DEGRADED gpu0 pinned h2d: below_band", 0), 0u) << r.line;
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
  EXPECT_EQ(r.line.rfind("DEGRADED gpu1 pinned h2d: link_downtrained", 0), 0u) << r.line;
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
  EXPECT_EQ(r.line, "UNKNOWN: no verdict yet: the first probe cycle is running");
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
  EXPECT_EQ(r.line, "UNKNOWN: xferd unhealthy: a probe is hung in a device call");
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
    EXPECT_EQ(r.line.rfind("UNKNOWN: ", 0), 0u) << r.line;
    for (char c : r.line) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "printable: " << r.line;
  }
  // Odd types inside a degraded GPU still give a problem line, not a crash.
  const HealthReport odd = JudgeStatus(
      R"({"version": 1, "daemon": {"last_cycle_age_seconds": 1}, "gpus": [{"verdict": "degraded",
          "gpu": "zero", "headline": {"mode": 5, "reading_bytes_per_second": "fast"},
          "causes": [3, {"cause": null}, {"cause": "numa_remote"}]}]})",
      {});
  EXPECT_EQ(odd.state, HealthOutcome::kProblem);
  EXPECT_EQ(odd.line, "DEGRADED gpu?: numa_remote") << odd.line;
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
}  // namespace xferd::cmd
