#include "core/incident_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/health_tracker.h"
#include "core/state_file.h"

namespace xferd::core {
namespace {

namespace fs = std::filesystem;
using probes::Direction;
using probes::TransferMode;
using std::chrono::system_clock;

const system_clock::time_point kT0 = system_clock::time_point(std::chrono::seconds(1'800'000'000));

// A GPU's health after a cycle: pinned h2d degraded or not, with `causes`.
DeviceHealth Health(bool degraded, std::vector<DiagnosisCause> causes = {},
                    std::string uuid = "GPU-a", int gpu = 0) {
  DeviceHealth h;
  h.gpu = gpu;
  h.uuid = std::move(uuid);
  h.verdicts.push_back({TransferMode::kPinned, Direction::kH2D, degraded, false});
  h.verdicts.push_back({TransferMode::kPinned, Direction::kD2H, false, false});
  for (DiagnosisCause c : causes)
    h.diagnoses.push_back({c, "detail of " + std::string(ToString(c)), "advice"});
  return h;
}

system_clock::time_point At(int seconds) {
  return kT0 + std::chrono::seconds(seconds);
}

// The incident's cause is the one that leads (core::LeadingCause): never a note, whatever
// order the causes came in.
TEST(IncidentLog, TheLeadingCauseComesFirstNeverANote) {
  IncidentLog log;
  log.Observe(Health(false), false, 3, At(0));
  DeviceHealth h = Health(true, {DiagnosisCause::kCapabilityMismatch, DiagnosisCause::kBelowBand});
  SeriesHealth s;
  s.mode = TransferMode::kPinned;
  s.direction = Direction::kH2D;
  s.degraded = s.below_band = true;
  h.series.push_back(s);
  log.Observe(h, false, 3, At(60));
  const std::vector<Incident> incidents = log.Incidents();
  ASSERT_EQ(incidents.size(), 1u);
  ASSERT_EQ(incidents[0].causes.size(), 2u);
  EXPECT_EQ(incidents[0].causes[0].cause, "below_band");
  EXPECT_EQ(incidents[0].causes[1].cause, "capability_mismatch");
}

// A GPU gone unmeasured is stale: no incident, and its next verdict is held against the
// last one known (ok, stale, ok is no news; degraded, stale, ok is one change).
TEST(IncidentLog, AStaleVerdictIsNoIncident) {
  IncidentLog log;
  DeviceHealth stale = Health(false);
  SeriesHealth headline;
  headline.headline = headline.stale = true;
  stale.series.push_back(headline);
  ASSERT_TRUE(stale.Stale());
  log.Observe(Health(false), false, 3, At(0));
  EXPECT_EQ(log.Observe(stale, false, 3, At(60)), DeviceVerdict::kStale);
  EXPECT_EQ(log.Verdict("GPU-a"), DeviceVerdict::kStale);
  log.Observe(Health(false), false, 3, At(120));
  EXPECT_TRUE(log.Incidents().empty());
  log.Observe(Health(true), false, 3, At(180));
  log.Observe(stale, false, 3, At(240));
  log.Observe(Health(false), false, 3, At(300));
  ASSERT_EQ(log.Incidents().size(), 2u);
  EXPECT_EQ(log.Incidents()[1].from, DeviceVerdict::kDegraded);
  EXPECT_EQ(log.Incidents()[1].to, DeviceVerdict::kOk);
  std::string problem;
  nlohmann::json j = IncidentToJson(log.Incidents()[1]);
  j["to"] = "stale";
  EXPECT_FALSE(IncidentFromJson(j, problem).has_value());
  EXPECT_EQ(problem, "\"to\" is stale");
}

TEST(IncidentLog, LogsEachChangeOfAGpusVerdictWithItsSeriesAndCauses) {
  IncidentLog log;
  EXPECT_EQ(log.Verdict("GPU-a"), DeviceVerdict::kPending);
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(0)), DeviceVerdict::kOk);
  EXPECT_TRUE(log.Incidents().empty()) << "a GPU's first verdict, ok, is no news";
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(60)), DeviceVerdict::kOk);
  EXPECT_EQ(log.Observe(Health(true, {DiagnosisCause::kLinkDowntrained}), false, 3, At(120)),
            DeviceVerdict::kDegraded);
  EXPECT_EQ(log.Observe(Health(true, {DiagnosisCause::kLinkDowntrained}), false, 3, At(180)),
            DeviceVerdict::kDegraded);
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(240)), DeviceVerdict::kOk);
  EXPECT_EQ(log.Verdict("GPU-a"), DeviceVerdict::kOk);

  const std::vector<Incident> incidents = log.Incidents();
  ASSERT_EQ(incidents.size(), 2u);
  EXPECT_EQ(incidents[0].time, At(120));
  EXPECT_EQ(incidents[0].from, DeviceVerdict::kOk);
  EXPECT_EQ(incidents[0].to, DeviceVerdict::kDegraded);
  ASSERT_EQ(incidents[0].pairs.size(), 1u);
  EXPECT_EQ(incidents[0].pairs[0], std::make_pair(TransferMode::kPinned, Direction::kH2D));
  ASSERT_EQ(incidents[0].causes.size(), 1u);
  EXPECT_EQ(incidents[0].causes[0].cause, "link_downtrained");
  EXPECT_EQ(incidents[0].causes[0].detail, "detail of link_downtrained");
  // Back to ok: the series that were degraded, so the log says what recovered.
  EXPECT_EQ(incidents[1].from, DeviceVerdict::kDegraded);
  EXPECT_EQ(incidents[1].to, DeviceVerdict::kOk);
  ASSERT_EQ(incidents[1].pairs.size(), 1u);
  EXPECT_EQ(incidents[1].pairs[0].first, TransferMode::kPinned);
}

TEST(IncidentLog, AGpuDegradedAtItsFirstVerdictIsLoggedFromPending) {
  IncidentLog log;
  log.Observe(Health(true, {DiagnosisCause::kBelowBand}), false, 1, At(0));
  const auto incidents = log.Incidents();
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0].from, DeviceVerdict::kPending);
  EXPECT_EQ(incidents[0].to, DeviceVerdict::kDegraded);
}

TEST(IncidentLog, AGpuThatCannotBeJudgedIsUnknownWithoutAnIncident) {
  IncidentLog log;
  EXPECT_EQ(log.Observe(Health(false), false, 2, At(0)), DeviceVerdict::kOk);
  DeviceHealth no_instance = Health(false);
  no_instance.unjudgeable = "MIG enabled, no GPU instance to probe through";
  EXPECT_EQ(log.Observe(no_instance, false, 2, At(60)), DeviceVerdict::kUnknown);
  EXPECT_EQ(log.Verdict(no_instance.uuid), DeviceVerdict::kUnknown);
  EXPECT_TRUE(log.Incidents().empty()) << "nothing was judged: no change to log";
  // Judged again and still ok: no incident either (compared with the last judged verdict).
  EXPECT_EQ(log.Observe(Health(false), false, 2, At(120)), DeviceVerdict::kOk);
  EXPECT_TRUE(log.Incidents().empty());
  EXPECT_EQ(ParseDeviceVerdict("unknown"), DeviceVerdict::kUnknown);
  // A fault seen without a probe (a link that flaps between probes) is one all the same.
  DeviceHealth flapping = no_instance;
  flapping.diagnoses.push_back({DiagnosisCause::kLinkFlapping, "6 transitions", ""});
  EXPECT_EQ(log.Observe(flapping, false, 2, At(180)), DeviceVerdict::kDegraded);
  EXPECT_FALSE(no_instance.Stale()) << "unknown, not stale: it cannot be measured as it is";
}

// The verdict words, read back as written, and the node's verdict from its GPUs': degraded,
// then pending, stale, unknown, ok.
TEST(IncidentLog, EveryVerdictReadsBackAndTheNodeTakesTheFirstAnyGpuHas) {
  for (DeviceVerdict v : kAllDeviceVerdicts) EXPECT_EQ(ParseDeviceVerdict(ToString(v)), v);
  EXPECT_FALSE(ParseDeviceVerdict("Unknown").has_value());
  using V = DeviceVerdict;
  EXPECT_EQ(NodeVerdict({}), V::kOk);
  EXPECT_EQ(NodeVerdict({V::kOk, V::kUnknown}), V::kUnknown);
  EXPECT_EQ(NodeVerdict({V::kUnknown, V::kStale, V::kOk}), V::kStale);
  EXPECT_EQ(NodeVerdict({V::kStale, V::kPending}), V::kPending);
  EXPECT_EQ(NodeVerdict({V::kUnknown, V::kDegraded, V::kPending}), V::kDegraded);
}

TEST(IncidentLog, KeepsTheNewestEntriesOnly) {
  IncidentLog log(4);
  for (int i = 0; i < 20; ++i) log.Observe(Health(i % 2 == 1), false, 1, At(i));
  const auto incidents = log.Incidents();
  ASSERT_EQ(incidents.size(), 4u);
  EXPECT_EQ(incidents.front().time, At(16));
  EXPECT_EQ(incidents.back().time, At(19));
}

TEST(IncidentLog, EachGpuHasItsOwnVerdict) {
  IncidentLog log;
  log.Observe(Health(false, {}, "GPU-a", 0), false, 1, At(0));
  log.Observe(Health(true, {}, "GPU-b", 1), false, 1, At(0));
  EXPECT_EQ(log.Verdict("GPU-a"), DeviceVerdict::kOk);
  EXPECT_EQ(log.Verdict("GPU-b"), DeviceVerdict::kDegraded);
  ASSERT_EQ(log.Incidents().size(), 1u);
  EXPECT_EQ(log.Incidents()[0].gpu, 1);
  EXPECT_EQ(log.Incidents()[0].uuid, "GPU-b");
}

TEST(IncidentLog, AGpuDegradedBeforeARestartIsPendingUntilJudgedAgain) {
  // Before the restart: DEGRADED. After it the tracker starts from ok; one good reading must
  // not resume a drained node, so the verdict is pending for consecutive_bad judged cycles.
  Incident before;
  before.time = At(0);
  before.uuid = "GPU-a";
  before.from = DeviceVerdict::kOk;
  before.to = DeviceVerdict::kDegraded;
  before.pairs = {{TransferMode::kPinned, Direction::kH2D}};
  IncidentLog log;
  log.Restore({before});
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(100)), DeviceVerdict::kPending);
  // A busy cycle judged nothing: it does not count.
  EXPECT_EQ(log.Observe(Health(false), true, 3, At(160)), DeviceVerdict::kPending);
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(220)), DeviceVerdict::kPending);
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(280)), DeviceVerdict::kOk);
  auto incidents = log.Incidents();
  ASSERT_EQ(incidents.size(), 2u);
  EXPECT_EQ(incidents[1].from, DeviceVerdict::kDegraded);
  EXPECT_EQ(incidents[1].to, DeviceVerdict::kOk);
  EXPECT_EQ(incidents[1].time, At(280));
  EXPECT_EQ(incidents[1].pairs, before.pairs) << "what recovered: the pairs before the restart";

  // Still degraded after the restart: no new incident, no pending.
  IncidentLog again;
  again.Restore({before});
  EXPECT_EQ(again.Observe(Health(true), false, 3, At(100)), DeviceVerdict::kDegraded);
  EXPECT_EQ(again.Incidents().size(), 1u);
}

TEST(IncidentLog, AGpuOkBeforeARestartIsOkAtOnce) {
  Incident before;
  before.time = At(0);
  before.uuid = "GPU-a";
  before.from = DeviceVerdict::kDegraded;
  before.to = DeviceVerdict::kOk;
  IncidentLog log;
  log.Restore({before});
  EXPECT_EQ(log.Observe(Health(false), false, 3, At(100)), DeviceVerdict::kOk);
  EXPECT_EQ(log.Incidents().size(), 1u);
}

TEST(IncidentLog, JsonRoundTrip) {
  Incident i;
  i.time = kT0 + std::chrono::milliseconds(123);
  i.gpu = 3;
  i.uuid = "GPU-5b1c";
  i.from = DeviceVerdict::kOk;
  i.to = DeviceVerdict::kDegraded;
  i.pairs = {{TransferMode::kManagedPrefetch, Direction::kH2D},
             {TransferMode::kPinned, Direction::kBidirectional}};
  i.causes = {{"link_downtrained", "0000:00:01.0 Gen4 x4, max Gen4 x16", "", ""},
              {"a_cause_of_a_newer_xferd", "", "", ""}};
  const nlohmann::json j = IncidentToJson(i);
  EXPECT_EQ(j["time"], "2027-01-15T08:00:00.123Z");
  EXPECT_EQ(j["series"][0]["mode"], "managed_prefetch");
  std::string problem;
  const auto back = IncidentFromJson(j, problem);
  ASSERT_TRUE(back) << problem;
  EXPECT_EQ(back->time, i.time);
  EXPECT_EQ(back->gpu, 3);
  EXPECT_EQ(back->uuid, i.uuid);
  EXPECT_EQ(back->from, i.from);
  EXPECT_EQ(back->to, i.to);
  EXPECT_EQ(back->pairs, i.pairs);
  ASSERT_EQ(back->causes.size(), 2u);
  EXPECT_EQ(back->causes[0].detail, i.causes[0].detail);
  EXPECT_EQ(back->causes[1].cause, "a_cause_of_a_newer_xferd");
  // A file without codes (an older xferd's): this xferd's for the labels it knows.
  EXPECT_EQ(back->causes[0].code, "XFERD-101");
  EXPECT_EQ(back->causes[0].action, "reboot");
  EXPECT_EQ(back->causes[1].code, "");
  EXPECT_TRUE(IncidentToJson(*back)["causes"][1]["code"].is_null());
}

// Each cause carries its code and action, as logged and as read back; a newer xferd's code
// is kept as written; the evidence record is linked by its name, never by a path.
TEST(IncidentLog, CausesCarryTheirCodesAndTheIncidentItsEvidence) {
  IncidentLog log;
  log.Observe(Health(false), false, 3, At(0));
  DeviceHealth h = Health(true, {DiagnosisCause::kLinkErrors, DiagnosisCause::kBelowBand});
  SeriesHealth s;
  s.mode = TransferMode::kPinned;
  s.direction = Direction::kH2D;
  s.degraded = s.below_band = true;
  h.series.push_back(s);
  std::optional<Incident> logged;
  log.Observe(h, false, 3, At(60), &logged);
  ASSERT_TRUE(logged.has_value());
  EXPECT_EQ(logged->causes[0].code, "XFERD-102");
  EXPECT_EQ(logged->causes[0].action, "inspect_link");
  EXPECT_EQ(logged->causes[1].code, "XFERD-301");
  EXPECT_TRUE(logged->evidence.empty());
  EXPECT_TRUE(log.AttachEvidence("GPU-a", At(60), "20270115T080100000Z-gpu0.json"));
  EXPECT_FALSE(log.AttachEvidence("GPU-a", At(61), "20270115T080101000Z-gpu0.json"));
  const nlohmann::json j = IncidentToJson(log.Incidents().back());
  EXPECT_EQ(j["evidence"], "20270115T080100000Z-gpu0.json");
  EXPECT_EQ(j["causes"][0]["code"], "XFERD-102");
  std::string problem;
  nlohmann::json newer = j;
  newer["causes"][0]["code"] = "XFERD-177";
  newer["causes"][0]["action"] = "inspect_link";
  const auto back = IncidentFromJson(newer, problem);
  ASSERT_TRUE(back) << problem;
  EXPECT_EQ(back->causes[0].code, "XFERD-177");
  EXPECT_EQ(back->evidence, "20270115T080100000Z-gpu0.json");
  // A path where a record's name belongs is not kept (it would lead a reader elsewhere).
  for (const char* bad : {"../../etc/passwd", "/etc/passwd", ".hidden", "a b"}) {
    nlohmann::json odd = j;
    odd["evidence"] = bad;
    const auto read = IncidentFromJson(odd, problem);
    ASSERT_TRUE(read) << problem;
    EXPECT_TRUE(read->evidence.empty()) << bad;
  }
  log.Observe(Health(false), false, 3, At(120), &logged);
  ASSERT_TRUE(logged.has_value());
  EXPECT_EQ(logged->to, DeviceVerdict::kOk);
  log.Observe(Health(false), false, 3, At(180), &logged);
  EXPECT_FALSE(logged.has_value());
}

TEST(IncidentLog, JsonThatIsNotAnIncidentIsRefusedWithTheReason) {
  const nlohmann::json good = IncidentToJson(
      Incident{kT0, 0, "GPU-a", DeviceVerdict::kOk, DeviceVerdict::kDegraded, {}, {}, ""});
  struct Case {
    const char* what;
    nlohmann::json value;
    const char* problem;
  };
  auto without = [&](const char* key) {
    nlohmann::json j = good;
    j.erase(key);
    return j;
  };
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = std::move(v);
    return j;
  };
  const std::vector<Case> cases = {
      {"array", nlohmann::json::array(), "not an object"},
      {"no time", without("time"), "time"},
      {"time not RFC 3339", with("time", "yesterday"), "RFC 3339"},
      {"time with an offset", with("time", "2026-12-01T10:00:00+01:00"), "RFC 3339"},
      {"gpu a string", with("gpu", "0"), "GPU index"},
      {"gpu negative", with("gpu", -1), "GPU index"},
      {"no uuid", without("uuid"), "uuid"},
      {"unknown verdict", with("to", "sideways"), "not a verdict"},
      {"to pending", with("to", "pending"), "pending"},
  };
  for (const Case& c : cases) {
    std::string problem;
    EXPECT_FALSE(IncidentFromJson(c.value, problem)) << c.what;
    EXPECT_NE(problem.find(c.problem), std::string::npos) << c.what << ": " << problem;
  }
  // Entries of the lists that cannot be placed are left out; the incident stays.
  nlohmann::json odd = good;
  odd["series"] = {
      {{"mode", "warp"}, {"direction", "h2d"}}, 7, {{"mode", "pinned"}, {"direction", "d2h"}}};
  odd["causes"] = {"text", {{"cause", "numa_remote"}}, {{"cause", std::string(5000, 'x')}}};
  std::string problem;
  const auto read = IncidentFromJson(odd, problem);
  ASSERT_TRUE(read) << problem;
  ASSERT_EQ(read->pairs.size(), 1u);
  EXPECT_EQ(read->pairs[0].second, Direction::kD2H);
  ASSERT_EQ(read->causes.size(), 2u);
  EXPECT_LT(read->causes[1].cause.size(), 400u) << "held to a few hundred bytes";
}

TEST(IncidentLog, UtcTimesAreParsedStrictly) {
  EXPECT_EQ(ParseUtcTime("2027-01-15T08:00:00Z"), kT0);
  EXPECT_EQ(ParseUtcTime("2027-01-15T08:00:00.5Z"), kT0 + std::chrono::milliseconds(500));
  EXPECT_EQ(FormatUtcTime(kT0 + std::chrono::milliseconds(7)), "2027-01-15T08:00:00.007Z");
  for (const char* bad :
       {"", "2027-01-15", "2027-01-15T08:00:00", "2027-01-15T08:00:00.Z",
        "2027-01-15T08:00:00.1234567890Z", "2027-01-15T08:00:00Zjunk", "2027-13-45T99:99:99Z"}) {
    EXPECT_FALSE(ParseUtcTime(bad)) << bad;
  }
}

class IncidentStateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "xferd-incidents-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& text) {
    std::ofstream(dir_ / "state.json", std::ios::binary | std::ios::trunc) << text;
  }
  static std::string Baselines() {
    return R"("baselines": {"GPU-a": {"pinned/h2d/64MiB": [2.4e10, 2.5e10]}})";
  }
  static std::string ReadAll(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

TEST_F(IncidentStateFileTest, TheLogIsKeptAcrossARestart) {
  IncidentLog log;
  log.Observe(Health(false), false, 1, At(0));
  log.Observe(Health(true, {DiagnosisCause::kNumaRemote}), false, 1, At(60));
  log.Observe(Health(false), false, 1, At(120));
  log.Observe(Health(true, {DiagnosisCause::kLinkDowntrained}), false, 1, At(180));
  StateFile state(dir_);
  BaselineSet b;
  b["GPU-a"]["pinned/h2d/64MiB"] = {2.4e10};
  ASSERT_TRUE(state.Save(b, log.Incidents(), At(200)).ok);

  StateFile again(dir_);
  const StateLoad loaded = again.Load();
  ASSERT_EQ(loaded.outcome, StateLoad::Outcome::kLoaded) << loaded.message;
  EXPECT_TRUE(loaded.incidents_message.empty()) << loaded.incidents_message;
  EXPECT_EQ(loaded.baselines, b);
  ASSERT_EQ(loaded.incidents.size(), 3u);
  EXPECT_EQ(loaded.incidents[0].time, At(60));
  EXPECT_EQ(loaded.incidents[2].to, DeviceVerdict::kDegraded);
  EXPECT_EQ(loaded.incidents[2].causes[0].cause, "link_downtrained");

  // The restored log goes on where it stopped; the GPU, DEGRADED at the stop, is pending.
  IncidentLog restored;
  restored.Restore(loaded.incidents);
  EXPECT_EQ(restored.Observe(Health(false), false, 2, At(300)), DeviceVerdict::kPending);
  EXPECT_EQ(restored.Incidents().size(), 3u);
}

TEST_F(IncidentStateFileTest, AFileWithoutALogLoadsWithAnEmptyOne) {
  Write(std::string("{\"version\": 1, ") + Baselines() + "}");
  const StateLoad loaded = StateFile(dir_).Load();
  ASSERT_EQ(loaded.outcome, StateLoad::Outcome::kLoaded) << loaded.message;
  EXPECT_TRUE(loaded.incidents.empty());
  EXPECT_TRUE(loaded.incidents_message.empty());
}

TEST_F(IncidentStateFileTest, ABadLogCostsOnlyItselfNeverTheBaselines) {
  const std::string good_entry =
      R"({"time": "2026-12-01T10:00:00.000Z", "gpu": 0, "uuid": "GPU-a", "from": "ok", "to": "degraded"})";
  struct Case {
    const char* what;
    std::string incidents;
    std::size_t kept;
    const char* message;
  };
  std::string many = "[";
  for (int i = 0; i < 20000; ++i) many += (i ? ",1" : "1");
  many += "]";
  std::string deep = std::string(40, '[') + std::string(40, ']');
  const std::vector<Case> cases = {
      {"an object", R"({"a": 1})", 0, "\"incidents\" is an object, not a list"},
      {"a string", R"("log")", 0, "\"incidents\" is a string, not a list"},
      {"one bad entry among good ones", "[" + good_entry + R"(, {"time": 5}, )" + good_entry + "]",
       2, "1 of 3 entries that are not incidents (entry 1: no string \"time\")"},
      {"many values, none an incident", many, 0, "20000 of 20000 entries that are not incidents"},
      {"nested arrays", "[" + deep + "]", 0, "entry 0: nested more than 8 deep"},
  };
  for (const Case& c : cases) {
    const std::string text =
        std::string("{\"version\": 1, ") + Baselines() + ", \"incidents\": " + c.incidents + "}";
    Write(text);
    const StateLoad loaded = StateFile(dir_).Load(At(0));
    ASSERT_EQ(loaded.outcome, StateLoad::Outcome::kLoaded) << c.what << ": " << loaded.message;
    EXPECT_EQ(loaded.baselines.at("GPU-a").at("pinned/h2d/64MiB").size(), 2u) << c.what;
    EXPECT_EQ(loaded.incidents.size(), c.kept) << c.what;
    EXPECT_NE(loaded.incidents_message.find(c.message), std::string::npos)
        << c.what << ": " << loaded.incidents_message;
    EXPECT_NE(loaded.incidents_message.find("baselines are unaffected"), std::string::npos);
    // What is not kept is kept beside it, as it was.
    ASSERT_FALSE(loaded.set_aside.empty()) << c.what;
    EXPECT_EQ(ReadAll(loaded.set_aside), text) << c.what;
    EXPECT_NE(loaded.incidents_message.find(loaded.set_aside.string()), std::string::npos);
    fs::remove(loaded.set_aside);
  }
}

// The review: an "incidents" section nested more than 64 deep made the whole file corrupt:
// it was set aside and the daemon started with no learned series. Nesting inside the log
// costs only the entry that holds it, however deep.
TEST_F(IncidentStateFileTest, DeepNestingInsideTheLogCostsOnlyThatEntry) {
  const std::string good_entry =
      R"({"time": "2026-12-01T10:00:00.000Z", "gpu": 0, "uuid": "GPU-a", "from": "ok", "to": "degraded", "series": [], "causes": []})";
  for (const std::size_t levels : {65u, 100u, 1000000u}) {
    const std::string deep = std::string(levels, '[') + std::string(levels, ']');
    const std::string deep_object =
        R"({"time": "2026-12-01T10:00:00.000Z", "gpu": 1, "x": )" + deep + "}";
    for (const std::string& incidents :
         {"[" + good_entry + ", " + deep + "]", "[" + deep_object + ", " + good_entry + "]"}) {
      const std::string text =
          std::string("{\"version\": 1, ") + Baselines() + ", \"incidents\": " + incidents + "}";
      Write(text);
      const StateLoad loaded = StateFile(dir_).Load(At(0));
      ASSERT_EQ(loaded.outcome, StateLoad::Outcome::kLoaded) << levels << ": " << loaded.message;
      EXPECT_EQ(loaded.baselines.size(), 1u) << levels;
      ASSERT_EQ(loaded.incidents.size(), 1u) << levels << ": " << loaded.incidents_message;
      EXPECT_EQ(loaded.incidents[0].gpu, 0);
      EXPECT_NE(loaded.incidents_message.find("nested more than 8 deep"), std::string::npos)
          << loaded.incidents_message;
      ASSERT_FALSE(loaded.set_aside.empty());
      EXPECT_EQ(ReadAll(loaded.set_aside), text);
      fs::remove(loaded.set_aside);
    }
  }
}

// The review: what the log held and xferd did not keep vanished: unknown fields inside an
// entry and the oldest of more than 32 entries with no log line; a bad entry, "incidents":
// "garbage" or a 100,000-entry log logged but not kept, and the next write erased them.
// Each is now kept as the trimmed state is: the file as it was, beside it, before any write.
TEST_F(IncidentStateFileTest, WhatTheLogDropsIsKeptBesideTheFileBeforeAnyWrite) {
  const auto entry = [](int i, const std::string& extra = "") {
    return R"({"time": "2026-12-01T10:00:)" + std::string(i % 60 < 10 ? "0" : "") +
           std::to_string(i % 60) + R"(.000Z", "gpu": )" + std::to_string(i % 8) +
           R"(, "uuid": "GPU-a", "from": "ok", "to": "degraded", "series": [{"mode": "pinned", "direction": "h2d"}], "causes": [{"cause": "numa_remote", "detail": "far"}])" +
           extra + "}";
  };
  std::string forty = "[", many = "[";
  for (int i = 0; i < 40; ++i) forty += (i ? ", " : "") + entry(i);
  for (int i = 0; i < 100000; ++i) many += (i ? ", " : "") + entry(i);
  forty += "]", many += "]";
  struct Case {
    const char* what;
    std::string incidents;
    std::size_t kept;
    const char* said;
  };
  const std::vector<Case> cases = {
      {"an unknown field", "[" + entry(1, R"(, "ticket": "INC-42")") + "]", 1,
       "the field \"ticket\", which this xferd does not keep"},
      {"an unknown field in a cause",
       "[" + entry(1).substr(0, entry(1).size() - 3) + R"(, "seen_by": "nhc"}]})" + "]", 1,
       "causes[0].seen_by"},
      {"a series xferd cannot place",
       "[" + entry(1).replace(entry(1).find("\"h2d\""), 5, "\"sideways\"") + "]", 1,
       "entries of \"series\" that this xferd cannot place"},
      {"a detail longer than kept",
       "[" + entry(1).replace(entry(1).find("\"far\""), 5, "\"" + std::string(5000, 'f') + "\"") +
           "]",
       1, "causes[0].detail"},
      {"40 entries", forty, 32, "the oldest 8 of 40 incidents (the log keeps the newest 32)"},
      {"a bad entry", "[" + entry(1) + R"(, {"time": "yesterday"}])", 1,
       "1 of 2 entries that are not incidents"},
      {"garbage", R"("garbage")", 0, "\"incidents\" is a string, not a list"},
      {"100,000 entries", many, 32, "the oldest 99968 of 100000 incidents"},
  };
  for (const Case& c : cases) {
    const std::string text =
        std::string("{\"version\": 1, ") + Baselines() + ", \"incidents\": " + c.incidents + "}";
    Write(text);
    StateFile state(dir_);
    const StateLoad loaded = state.Load(At(0));
    ASSERT_EQ(loaded.outcome, StateLoad::Outcome::kLoaded) << c.what << ": " << loaded.message;
    EXPECT_EQ(loaded.incidents.size(), c.kept) << c.what;
    EXPECT_NE(loaded.incidents_message.find(c.said), std::string::npos)
        << c.what << ": " << loaded.incidents_message;
    ASSERT_FALSE(loaded.set_aside.empty()) << c.what;
    EXPECT_NE(loaded.incidents_message.find("kept as " + loaded.set_aside.string()),
              std::string::npos)
        << loaded.incidents_message;
    // The next write keeps what was read; the copy keeps the rest.
    ASSERT_TRUE(state.Save(loaded.baselines, loaded.incidents, At(10)).ok);
    EXPECT_EQ(ReadAll(loaded.set_aside), text) << c.what;
    EXPECT_NE(ReadAll(dir_ / "state.json"), text);
    fs::remove(loaded.set_aside);
  }
  // A log as xferd writes it is read whole: nothing set aside, nothing said.
  IncidentLog log;
  log.Observe(Health(true, {DiagnosisCause::kNumaRemote}), false, 1, At(60));
  StateFile state(dir_);
  ASSERT_TRUE(state.Save({}, log.Incidents(), At(61)).ok);
  const StateLoad again = StateFile(dir_).Load(At(62));
  EXPECT_TRUE(again.set_aside.empty()) << again.incidents_message;
  EXPECT_TRUE(again.incidents_message.empty()) << again.incidents_message;
  EXPECT_EQ(again.incidents.size(), 1u);
}

TEST_F(IncidentStateFileTest, LogEntriesBeforeOrAfterTheBaselinesBothRead) {
  const std::string entry =
      R"([{"time": "2026-12-01T10:00:00.000Z", "gpu": 1, "uuid": "GPU-b", "from": "degraded", "to": "ok",
          "series": [{"mode": "pinned", "direction": "h2d"}], "causes": []}])";
  for (const std::string& text :
       {"{\"incidents\": " + entry + ", \"version\": 1, " + Baselines() + "}",
        "{\"version\": 1, " + Baselines() + ", \"incidents\": " + entry + "}"}) {
    Write(text);
    const StateLoad loaded = StateFile(dir_).Load();
    ASSERT_EQ(loaded.outcome, StateLoad::Outcome::kLoaded) << loaded.message;
    ASSERT_EQ(loaded.incidents.size(), 1u);
    EXPECT_EQ(loaded.incidents[0].gpu, 1);
    EXPECT_EQ(loaded.baselines.size(), 1u);
  }
}

}  // namespace
}  // namespace xferd::core
