// The node_exporter textfile: atomic replacement, permissions, clear failures.
#include "exporter/textfile.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "platform/files.h"
#include "testing/fakes.h"

namespace xferd::exporter {

namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int EntryCount(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++n;
  return n;
}

std::string ErrorOf(const fs::path& path, const std::string& content) {
  try {
    WriteTextfile(path, content);
  } catch (const platform::FileError& e) {
    return e.what();
  }
  return "";
}

TEST(Textfile, WritesAndReplacesReadableByOthers) {
  fakes::TempDir dir("textfile");
  const fs::path path = dir.path() / "xferd.prom";
  WriteTextfile(path, "xferd_up 1\n");
  EXPECT_EQ(Read(path), "xferd_up 1\n");
  WriteTextfile(path, "xferd_up 2\n");
  EXPECT_EQ(Read(path), "xferd_up 2\n");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);   // node_exporter runs as another user
  EXPECT_EQ(EntryCount(dir.path()), 1);  // no temporary file left
}

TEST(Textfile, RejectsNamesNodeExporterIgnores) {
  fakes::TempDir dir("textfile");
  const std::string error = ErrorOf(dir.path() / "xferd.txt", "x 1\n");
  EXPECT_NE(error.find("does not end in .prom"), std::string::npos) << error;
  EXPECT_EQ(EntryCount(dir.path()), 0);
}

TEST(Textfile, MissingDirectoryNamesTheFix) {
  fakes::TempDir dir("textfile");
  const std::string error = ErrorOf(dir.path() / "nope" / "xferd.prom", "x 1\n");
  EXPECT_NE(error.find("create the directory"), std::string::npos) << error;
  EXPECT_NE(error.find("previous file is kept"), std::string::npos) << error;
}

// A full disk, simulated with the file-size limit: the write fails part-way, and the old
// file and directory are exactly as before.
TEST(Textfile, FailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  fakes::TempDir dir("textfile");
  const fs::path path = dir.path() / "xferd.prom";
  WriteTextfile(path, "xferd_up 1\n");

  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old_limit{};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string error = ErrorOf(path, std::string(100000, '#'));
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_NE(error.find("free space"), std::string::npos) << error;
  EXPECT_EQ(Read(path), "xferd_up 1\n");
  EXPECT_EQ(EntryCount(dir.path()), 1);
}

TEST(Textfile, PathThatIsADirectoryIsAnError) {
  fakes::TempDir dir("textfile");
  fs::create_directory(dir.path() / "taken.prom");
  const std::string error = ErrorOf(dir.path() / "taken.prom", "x 1\n");
  EXPECT_NE(error.find("cannot write textfile"), std::string::npos) << error;
  EXPECT_EQ(EntryCount(dir.path()), 1);
}

}  // namespace
}  // namespace xferd::exporter
