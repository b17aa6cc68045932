#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/health_tracker.h"

namespace xferd::core {

namespace {

namespace fs = std::filesystem;

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "xferd-state-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }

  static BaselineSet Sample() {
    BaselineSet b;
    b["GPU-a"]["pinned/h2d/64MiB"] = {24.1e9, 24.3e9, 24.2e9};
    b["GPU-a"]["pageable/d2h/64MiB"] = {9.5e9};
    b["SIM-b"]["zero_copy/h2d/4KiB"] = {1.25e8, 1.5e8};
    return b;
  }

  void Write(const std::string& text) {
    std::ofstream(dir_ / "state.json", std::ios::binary | std::ios::trunc) << text;
  }
  std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Root writes through permission bits: run `body` as user nobody in a child then, so the
  // test means the same as root (CI) and as a user. Check() failures end the child non-zero.
  template <typename Body>
  void AsUnprivileged(Body body) {
    if (::geteuid() != 0) {
      body();
      return;
    }
    // Re-executes the test binary for the child: safe with sanitizer threads around.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
          if (::setgid(65534) != 0 || ::setuid(65534) != 0) std::_Exit(3);
          body();
          std::_Exit(failed_ ? 1 : 0);
        },
        ::testing::ExitedWithCode(0), "");
  }
  void Check(bool ok, const std::string& what) {
    if (ok) return;
    failed_ = true;
    ADD_FAILURE() << what;
    std::fprintf(stderr, "check failed: %s\n", what.c_str());
  }
  bool failed_ = false;

  // 2026-11-29 18:00:00 UTC
  static std::chrono::system_clock::time_point Now() {
    return std::chrono::system_clock::from_time_t(1795975200);
  }

  fs::path dir_;
};

TEST_F(StateFileTest, MissingFileStartsFresh) {
  StateFile state(dir_ / "not-yet");
  const StateLoad load = state.Load(Now());
  EXPECT_EQ(load.outcome, StateLoad::Outcome::kFresh);
  EXPECT_TRUE(load.baselines.empty());
  EXPECT_TRUE(load.message.empty());
  EXPECT_TRUE(state.persisting());
  // The first save creates the directory.
  EXPECT_TRUE(state.Save(Sample(), Now()).ok);
  EXPECT_TRUE(fs::exists(dir_ / "not-yet" / "state.json"));
}

TEST_F(StateFileTest, RoundTrip) {
  StateFile state(dir_);
  const StateWrite w = state.Save(Sample(), Now());
  ASSERT_TRUE(w.ok) << w.error;
  const auto doc = nlohmann::json::parse(Read(dir_ / "state.json"));
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["written_at"], "2026-11-29T18:00:00Z");

  StateFile again(dir_);
  const StateLoad load = again.Load(Now());
  EXPECT_EQ(load.outcome, StateLoad::Outcome::kLoaded);
  EXPECT_EQ(load.baselines, Sample());
  // Nothing but the state file is left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST_F(StateFileTest, TrackerSurvivesARestartThroughTheFile) {
  Settings config;
  HealthTracker before(config);
  probes::ProbeSample s;
  s.spec.mode = probes::TransferMode::kPinned;
  s.spec.size_bytes = 64ull << 20;
  s.status = probes::ProbeStatus::kOk;
  s.bytes_per_transfer = s.spec.size_bytes;
  s.durations_s.assign(20, static_cast<double>(s.bytes_per_transfer) / 24e9);
  CycleObservation obs;
  obs.device.uuid = "GPU-a";
  obs.samples = {s};
  for (int i = 0; i < 7; ++i) before.Observe(obs);
  ASSERT_TRUE(StateFile(dir_).Save(before.Snapshot(), Now()).ok);

  HealthTracker after(config);
  StateFile state(dir_);
  after.Restore(state.Load(Now()).baselines);
  EXPECT_NEAR(
      after.Baseline("GPU-a", probes::TransferMode::kPinned, probes::Direction::kH2D, 64ull << 20),
      24e9, 1e3);
}

// Two corrupt files in one second used to share one name: the second rename replaced the
// first copy. Each keeps a name of its own, and the message names it.
TEST_F(StateFileTest, CorruptFilesInOneSecondEachKeepTheirOwnCopy) {
  std::vector<fs::path> asides;
  for (int i = 0; i < 3; ++i) {
    Write("{\"version\": 1, \"baselines\": {\"GPU-" + std::to_string(i) + "\": [1");
    const StateLoad load = StateFile(dir_).Load(Now());
    ASSERT_EQ(load.outcome, StateLoad::Outcome::kCorrupt);
    EXPECT_NE(load.message.find(load.set_aside.string()), std::string::npos) << load.message;
    asides.push_back(load.set_aside);
  }
  EXPECT_EQ(asides[0], dir_ / "state.json.corrupt-20261129T180000Z");
  EXPECT_EQ(asides[1], dir_ / "state.json.corrupt-20261129T180000Z.2");
  EXPECT_EQ(asides[2], dir_ / "state.json.corrupt-20261129T180000Z.3");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Read(asides[i]),
              "{\"version\": 1, \"baselines\": {\"GPU-" + std::to_string(i) + "\": [1");
  }
}

TEST_F(StateFileTest, CorruptFileIsMovedAsideAndLearningStartsFresh) {
  Write("{\"version\": 1, \"baselines\": {\"GPU-a\": [1, 2");  // truncated mid-write
  StateFile state(dir_);
  const StateLoad load = state.Load(Now());
  EXPECT_EQ(load.outcome, StateLoad::Outcome::kCorrupt);
  EXPECT_TRUE(load.baselines.empty());
  const fs::path aside = dir_ / "state.json.corrupt-20261129T180000Z";
  EXPECT_TRUE(fs::exists(aside));
  EXPECT_FALSE(fs::exists(dir_ / "state.json"));
  EXPECT_NE(load.message.find(aside.string()), std::string::npos) << load.message;
  EXPECT_TRUE(state.persisting());
  EXPECT_TRUE(state.Save(Sample(), Now()).ok);
}

TEST_F(StateFileTest, WrongShapesAreCorruptNotCrashes) {
  for (const std::string& text : std::vector<std::string>{
           "", std::string("\x00\x01garbage", 9), "[]", "{}",
           "{\"version\": \"1\", \"baselines\": {}}", "{\"version\": 0, \"baselines\": {}}",
           "{\"version\": 1}", "{\"version\": 1, \"baselines\": []}",
           "{\"version\": 1, \"baselines\": {\"g\": 3}}",
           "{\"version\": 1, \"baselines\": {\"g\": {\"k\": [1, \"x\"]}}}",
           "{\"version\": 1, \"baselines\": {\"g\": {\"k\": [-5]}}}"}) {
    SCOPED_TRACE(text);
    Write(text);
    StateFile state(dir_);
    const StateLoad load = state.Load(Now());
    EXPECT_EQ(load.outcome, StateLoad::Outcome::kCorrupt) << load.message;
    EXPECT_TRUE(load.baselines.empty());
    fs::remove(dir_ / "state.json.corrupt-20261129T180000Z");
  }
}

TEST_F(StateFileTest, FutureVersionIsKeptAndNeverOverwritten) {
  const std::string future = "{\"version\": 2, \"baselines\": {}, \"new_thing\": true}";
  Write(future);
  StateFile state(dir_);
  const StateLoad load = state.Load(Now());
  EXPECT_EQ(load.outcome, StateLoad::Outcome::kFutureVersion);
  EXPECT_NE(load.message.find("upgrade xferd"), std::string::npos) << load.message;
  EXPECT_NE(load.message.find("move the file"), std::string::npos) << load.message;
  EXPECT_FALSE(state.persisting());
  const StateWrite w = state.Save(Sample(), Now());
  EXPECT_FALSE(w.ok);
  EXPECT_TRUE(w.skipped);
  EXPECT_EQ(Read(dir_ / "state.json"), future);
}

TEST_F(StateFileTest, UnwritableDirectoryReportsAndKeepsTheOldFile) {
  StateFile state(dir_);
  ASSERT_TRUE(state.Save(Sample(), Now()).ok);
  const std::string before = Read(dir_ / "state.json");
  BaselineSet changed = Sample();
  changed["GPU-a"]["pinned/h2d/64MiB"].push_back(1e9);
  // r-x for everyone; root would write through the bits, so the write runs as nobody.
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  AsUnprivileged([&] {
    const StateWrite w = state.Save(changed, Now());
    Check(!w.ok && !w.skipped, "the write must fail and say so");
    Check(w.error.find("Permission denied") != std::string::npos, w.error);
    Check(w.error.find("StateDirectory=") != std::string::npos, w.error);
  });
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_EQ(Read(dir_ / "state.json"), before);
  // Once writable again, the next save succeeds with everything learned meanwhile.
  ASSERT_TRUE(state.Save(changed, Now()).ok);
  EXPECT_EQ(StateFile(dir_).Load(Now()).baselines, changed);
}

TEST_F(StateFileTest, StateDirThatIsAFileIsAnErrorNotACrash) {
  std::ofstream(dir_ / "plain") << "x";
  StateFile state(dir_ / "plain");
  EXPECT_EQ(state.Load(Now()).outcome, StateLoad::Outcome::kFresh);
  const StateWrite w = state.Save(Sample(), Now());
  EXPECT_FALSE(w.ok);
  EXPECT_NE(w.error.find(dir_.string()), std::string::npos) << w.error;
}

TEST_F(StateFileTest, UnreadableFileIsKeptAndNotOverwritten) {
  Write("{\"version\": 1, \"baselines\": {}}");
  fs::permissions(dir_, fs::perms::all);  // writable by anyone: only the file is closed
  fs::permissions(dir_ / "state.json", fs::perms::none);
  AsUnprivileged([&] {
    StateFile state(dir_);
    const StateLoad load = state.Load(Now());
    Check(load.outcome == StateLoad::Outcome::kUnreadable, "outcome: " + load.message);
    Check(load.message.find("permissions") != std::string::npos, load.message);
    Check(!state.persisting(), "persisting must be off");
    Check(!state.Save(Sample(), Now()).ok, "save must not replace an unread file");
  });
  fs::permissions(dir_ / "state.json", fs::perms::owner_read);
  EXPECT_EQ(Read(dir_ / "state.json"), "{\"version\": 1, \"baselines\": {}}");
}

TEST_F(StateFileTest, InterruptedWriteNeverYieldsATornState) {
  StateFile state(dir_);
  ASSERT_TRUE(state.Save(Sample(), Now()).ok);
  // A write killed before its rename leaves a partial temp file beside the real one.
  const std::string full = Read(dir_ / "state.json");
  std::ofstream(dir_ / ".state.json.tmp.Ab12Cd") << full.substr(0, full.size() / 2);
  StateFile restarted(dir_);
  const StateLoad load = restarted.Load(Now());
  EXPECT_EQ(load.outcome, StateLoad::Outcome::kLoaded);
  EXPECT_EQ(load.baselines, Sample());
  EXPECT_FALSE(fs::exists(dir_ / ".state.json.tmp.Ab12Cd"));  // cleaned up

  // Repeated saves, each read back whole at every step.
  BaselineSet b = Sample();
  for (int i = 0; i < 50; ++i) {
    b["GPU-a"]["pinned/h2d/64MiB"].push_back(24e9 + i);
    ASSERT_TRUE(restarted.Save(b, Now()).ok);
    ASSERT_EQ(StateFile(dir_).Load(Now()).baselines, b);
  }
}

// The state file is read as a stream: what it costs is what is kept, and no shape of it,
// however deep or long, crashes the daemon or grows it without bound.
TEST_F(StateFileTest, DeepNestingIsCorruptNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& text :
       {deep, "{\"version\": 1, \"baselines\": " + deep + "}",
        "{\"version\": 1, \"baselines\": {\"g\": {\"k\": [" + deep + "]}}}"}) {
    Write(text);
    StateFile state(dir_);
    const StateLoad load = state.Load(Now());
    EXPECT_EQ(load.outcome, StateLoad::Outcome::kCorrupt) << load.message;
    EXPECT_LT(load.message.size(), 1500u);
    fs::remove(dir_ / "state.json.corrupt-20261129T180000Z");
  }
}

// What is not kept as it is, is kept beside it: a series longer than the window used to be
// cut down silently (63 MB, one series of ~3.5 M values, became 2.3 KB, and the log said
// "1 learned series"). Now the file as it was stays under a name of its own, and the
// message gives the numbers.
TEST_F(StateFileTest, OnlyTheLongestWindowOfEachSeriesIsKeptAndTheWholeFileBesideIt) {
  std::string values;
  for (int i = 1; i <= 25000; ++i) values += (i > 1 ? "," : "") + std::to_string(i);
  const std::string whole = "{\"version\": 1, \"baselines\": {\"GPU-a\": {\"pinned/h2d/64MiB\": [" +
                            values + "], \"pinned/d2h/64MiB\": [1, 2, 3]}}}";
  Write(whole);
  StateFile state(dir_);
  const StateLoad load = state.Load(Now());
  ASSERT_EQ(load.outcome, StateLoad::Outcome::kLoaded) << load.message;
  const auto& kept = load.baselines.at("GPU-a").at("pinned/h2d/64MiB");
  ASSERT_EQ(kept.size(), 10000u);
  EXPECT_EQ(kept.front(), 15001);
  EXPECT_EQ(kept.back(), 25000);
  EXPECT_EQ(load.baselines.at("GPU-a").at("pinned/d2h/64MiB").size(), 3u);
  const fs::path copy = dir_ / "state.json.trimmed-20261129T180000Z";
  EXPECT_EQ(load.set_aside, copy);
  EXPECT_NE(load.message.find("15000 older values of 1 series longer than the 10000 kept"),
            std::string::npos)
      << load.message;
  EXPECT_NE(load.message.find("the longest held 25000"), std::string::npos) << load.message;
  EXPECT_NE(load.message.find(copy.string()), std::string::npos) << load.message;
  // The next write keeps the window; the copy keeps everything.
  ASSERT_TRUE(state.Save(load.baselines, Now()).ok);
  EXPECT_EQ(Read(copy), whole);
  EXPECT_EQ(StateFile(dir_).Load(Now()).baselines, load.baselines);
}

// The configured window decides what is kept: with 20, the rest goes into the copy.
TEST_F(StateFileTest, TheConfiguredWindowIsWhatIsKept) {
  Write("{\"version\": 1, \"baselines\": {\"GPU-a\": {\"pinned/h2d/64MiB\": [" +
        std::string("1,2,3,4,5,6,7,8,9,10") + "]}}}");
  StateFile state(dir_);
  const StateLoad load = state.Load(Now(), 4);
  ASSERT_EQ(load.outcome, StateLoad::Outcome::kLoaded) << load.message;
  EXPECT_EQ(load.baselines.at("GPU-a").at("pinned/h2d/64MiB"), (std::vector<double>{7, 8, 9, 10}));
  EXPECT_NE(load.message.find("6 older values of 1 series longer than the 4 kept"),
            std::string::npos)
      << load.message;
  EXPECT_TRUE(fs::exists(load.set_aside));
  // A file within the window is kept as it is: no copy, no message.
  Write("{\"version\": 1, \"baselines\": {\"GPU-a\": {\"pinned/h2d/64MiB\": [1, 2]}}}");
  const StateLoad within = StateFile(dir_).Load(Now(), 4);
  EXPECT_TRUE(within.message.empty()) << within.message;
  EXPECT_TRUE(within.set_aside.empty());
}

// Sections this xferd does not write (a newer xferd of the same file version, a hand edit)
// would go with the next write: the file as it was is kept first.
TEST_F(StateFileTest, SectionsThisXferdDoesNotWriteAreKeptInACopy) {
  const std::string text =
      "{\"version\": 1, \"written_at\": \"2026-11-29T17:00:00Z\", \"notes\": [\"x\"], "
      "\"baselines\": {\"GPU-a\": {\"pinned/h2d/64MiB\": [1]}}}";
  Write(text);
  const StateLoad load = StateFile(dir_).Load(Now());
  ASSERT_EQ(load.outcome, StateLoad::Outcome::kLoaded) << load.message;
  EXPECT_NE(load.message.find("sections this xferd does not write (\"notes\")"), std::string::npos)
      << load.message;
  EXPECT_EQ(Read(load.set_aside), text);
}

// A shorter window on reload drops the oldest values at the next write: the file as last
// written is kept first; a window that drops nothing keeps nothing.
TEST_F(StateFileTest, AShorterWindowKeepsTheFileBeforeTrimming) {
  StateFile state(dir_);
  ASSERT_EQ(state.Load(Now()).outcome, StateLoad::Outcome::kFresh);
  ASSERT_TRUE(state.Save(Sample(), Now()).ok);
  const std::string before = Read(dir_ / "state.json");
  EXPECT_EQ(state.KeepBeforeTrimming(Sample(), 3, Now()), "");
  const std::string line = state.KeepBeforeTrimming(Sample(), 1, Now());
  EXPECT_NE(line.find("3 older values go"), std::string::npos) << line;  // 2 + 0 + 1
  const fs::path copy = dir_ / "state.json.trimmed-20261129T180000Z";
  EXPECT_NE(line.find(copy.string()), std::string::npos) << line;
  EXPECT_EQ(Read(copy), before);
}

TEST_F(StateFileTest, MoreValuesOrLongerNamesThanXferdWritesAreCorrupt) {
  // 5 Mi short values over many series: more than any configuration keeps.
  std::string text = "{\"version\": 1, \"baselines\": {\"g\": {";
  for (int s = 0; s < 600; ++s) {
    text += (s ? ",\"" : "\"") + std::to_string(s) + "\": [";
    for (int i = 0; i < 9000; ++i) text += i ? ",1" : "1";
    text += "]";
  }
  text += "}}}";
  Write(text);
  const StateLoad many = StateFile(dir_).Load(Now());
  EXPECT_EQ(many.outcome, StateLoad::Outcome::kCorrupt);
  EXPECT_NE(many.message.find("more than any configuration keeps"), std::string::npos)
      << many.message;
  fs::remove(dir_ / "state.json.corrupt-20261129T180000Z");

  Write("{\"version\": 1, \"baselines\": {\"" + std::string(100000, 'u') + "\": {}}}");
  const StateLoad named = StateFile(dir_).Load(Now());
  EXPECT_EQ(named.outcome, StateLoad::Outcome::kCorrupt);
  EXPECT_LT(named.message.size(), 1500u);
}

// The version decides even when it comes after a shape this xferd does not know.
TEST_F(StateFileTest, AFutureVersionIsToldWhereverItsVersionStands) {
  const std::string future =
      "{\"baselines\": [{\"gpu\": \"GPU-a\", \"series\": [[1, 2]]}], \"version\": 3}";
  Write(future);
  StateFile state(dir_);
  EXPECT_EQ(state.Load(Now()).outcome, StateLoad::Outcome::kFutureVersion);
  EXPECT_EQ(Read(dir_ / "state.json"), future);
}

TEST_F(StateFileTest, AStateFileThatIsNotARegularFileIsKeptAndNotWaitedOn) {
  ASSERT_EQ(mkfifo((dir_ / "state.json").c_str(), 0600), 0);
  StateFile state(dir_);
  const StateLoad load = state.Load(Now());
  EXPECT_EQ(load.outcome, StateLoad::Outcome::kUnreadable);
  EXPECT_NE(load.message.find("FIFO"), std::string::npos) << load.message;
  EXPECT_FALSE(state.persisting());
}

}  // namespace
}  // namespace xferd::core
