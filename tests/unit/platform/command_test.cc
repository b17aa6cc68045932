// Running an outside program (lspci, for evidence): arguments as they are (no shell), a
// time limit, an output cap, a stop request, and a missing program as an answer.
#include "platform/command.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "platform/signals.h"
#include "testing/fakes.h"

namespace xferd::platform {
namespace {

using namespace std::chrono_literals;

TEST(RunCommand, HandsTheArgumentsOverAsTheyAreWithNoShell) {
  // A shell would run the second command and expand the variable; execve hands them over.
  const CommandResult r =
      RunCommand({"/bin/echo", "-s", "0000:01:00.0; touch /tmp/xferd-never", "$HOME"}, 10s, 1024);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "-s 0000:01:00.0; touch /tmp/xferd-never $HOME\n");
  EXPECT_TRUE(r.error.empty()) << r.error;
}

TEST(RunCommand, TakesStdoutAndStderrAndTheExitCode) {
  const CommandResult r = RunCommand({"/bin/ls", "/nonexistent-xferd-path"}, 10s, 4096);
  ASSERT_TRUE(r.started);
  ASSERT_TRUE(r.exit_code.has_value());
  EXPECT_NE(*r.exit_code, 0);
  EXPECT_NE(r.output.find("nonexistent-xferd-path"), std::string::npos) << r.output;
}

TEST(RunCommand, CutsTheOutputAtItsCapAndKillsTheProgram) {
  // /dev/zero never ends: only the cap stops it.
  const CommandResult r = RunCommand({"/bin/cat", "/dev/zero"}, 30s, 10000);
  ASSERT_TRUE(r.started);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.output.size(), 10000u);
  EXPECT_FALSE(r.exit_code.has_value());
  EXPECT_NE(r.error.find("output past 10000 bytes"), std::string::npos) << r.error;
}

TEST(RunCommand, KillsAProgramPastItsTimeLimit) {
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = RunCommand({"/bin/sleep", "60"}, 200ms, 1024);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.exit_code.has_value());
  EXPECT_NE(r.error.find("killed"), std::string::npos) << r.error;
  // Far below the program's own minute, however loaded the machine.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(RunCommand, StopsWhenAsked) {
  std::atomic<bool> stop{false};
  std::thread asker([&] {
    std::this_thread::sleep_for(100ms);
    stop = true;
  });
  const CommandResult r = RunCommand({"/bin/sleep", "60"}, 60s, 1024, &stop);
  asker.join();
  EXPECT_TRUE(r.stopped);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.exit_code.has_value());
}

// The daemon blocks its signals in every thread; a child that inherited the mask would
// ignore SIGTERM from anyone. Its mask is empty.
TEST(RunCommand, TheProgramDoesNotInheritTheDaemonsBlockedSignals) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  const CommandResult r = RunCommand({"/bin/grep", "^SigBlk", "/proc/self/status"}, 10s, 1024);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.output, "SigBlk:\t0000000000000000\n");
}

TEST(RunCommand, AMissingProgramIsAnAnswer) {
  const CommandResult r = RunCommand({"/nonexistent/lspci", "-vvv"}, 10s, 1024);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("cannot run /nonexistent/lspci"), std::string::npos) << r.error;
}

TEST(FindProgram, TakesTheFirstExecutableRegularFile) {
  fakes::TempDir dir("command");
  const auto plain = dir.Write("plain", "not executable");
  const auto tool = dir.Write("tool", "#!/bin/sh\n");
  ASSERT_EQ(::chmod(tool.c_str(), 0755), 0);
  EXPECT_EQ(FindProgram({dir.path() / "missing", dir.path(), tool}), tool);
  EXPECT_EQ(FindProgram({plain}), std::nullopt);
  EXPECT_EQ(FindProgram({dir.path() / "missing"}), std::nullopt);
}

}  // namespace
}  // namespace xferd::platform
