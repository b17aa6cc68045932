#include "platform/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace xferd::platform {
namespace {

TEST(LogLevel, ParsesTheDocumentedNames) {
  EXPECT_EQ(ParseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(ParseLogLevel("warning"), spdlog::level::warn);
  EXPECT_EQ(ParseLogLevel("off"), spdlog::level::off);
  EXPECT_FALSE(ParseLogLevel("loud"));
}

TEST(JournalStream, MatchesOnlyWhenStderrIsThatStream) {
  struct stat st {};
  ASSERT_EQ(fstat(2, &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  setenv("JOURNAL_STREAM", mine.c_str(), 1);
  EXPECT_TRUE(StderrIsJournalStream());
  // Inherited from a parent whose stderr was the journal, but ours is elsewhere.
  const std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  setenv("JOURNAL_STREAM", other.c_str(), 1);
  EXPECT_FALSE(StderrIsJournalStream());
  setenv("JOURNAL_STREAM", "garbage", 1);
  EXPECT_FALSE(StderrIsJournalStream());
  unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(StderrIsJournalStream());
}

TEST(ScopedLogFields, NestAndRestore) {
  EXPECT_EQ(ScopedLogFields::Gpu(), "");
  {
    ScopedLogFields outer("0", "");
    EXPECT_EQ(ScopedLogFields::Gpu(), "0");
    {
      ScopedLogFields inner("0", "pinned");
      EXPECT_EQ(ScopedLogFields::Mode(), "pinned");
    }
    EXPECT_EQ(ScopedLogFields::Mode(), "");
    EXPECT_EQ(ScopedLogFields::Gpu(), "0");
  }
  EXPECT_EQ(ScopedLogFields::Gpu(), "");
}

// `xferd probe --json` and `check-config --json` print documents on stdout; every command
// logs through this target (cmd/main.cc), so a log line must never land among them.
TEST(SetUpLogging, StderrTargetLeavesStdoutToTheCommand) {
  SetUpLogging("info", LogTarget::kStderr);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  spdlog::info("contention: a note said once");
  spdlog::default_logger()->flush();
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  EXPECT_NE(err.find("contention: a note said once"), std::string::npos);
}

TEST(SetUpLogging, LevelAppliesAndReloadChangesIt) {
  EXPECT_EQ(SetUpLogging("warn", LogTarget::kStderr), LogTarget::kStderr);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);
  EXPECT_TRUE(SetLogLevel("debug"));
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
  EXPECT_FALSE(SetLogLevel("loud"));
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
}

}  // namespace
}  // namespace xferd::platform
