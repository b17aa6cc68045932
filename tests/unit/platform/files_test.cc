// The one bounded reader: every kind of file that is not a regular file of the expected
// size is refused at once with a clear error, never waited on and never read to the end.
#include "platform/files.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "platform/printable.h"
#include "testing/fakes.h"

namespace xferd::platform {
namespace {

namespace fs = std::filesystem;

FileError ErrorOf(const fs::path& path, std::size_t max_bytes) {
  try {
    ReadFileBounded(path, max_bytes, "test file");
  } catch (const FileError& e) {
    return e;
  }
  ADD_FAILURE() << "read " << path;
  return FileError("", "", "", "", "", 0);
}

TEST(ReadFileBounded, ReadsARegularFileUpToItsCap) {
  fakes::TempDir dir("files");
  EXPECT_EQ(ReadFileBounded(dir.Write("a", "12345"), 5, "test file"), "12345");
  const FileError e = ErrorOf(dir.Write("b", "123456"), 5);
  EXPECT_EQ(e.cause(), "it is larger than 5 bytes, the most this file may hold");
  EXPECT_NE(std::string(e.what()).find("cannot read test file " + (dir.path() / "b").string()),
            std::string::npos);
}

// A FIFO with no writer used to block open() for ever (at start and on SIGHUP, with
// SIGTERM ignored meanwhile); it is refused before it is opened.
TEST(ReadFileBounded, RefusesFifosSocketsDevicesAndDirectoriesAtOnce) {
  fakes::TempDir dir("files");
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ErrorOf(fifo, 1024).cause(), "it is a FIFO, not a regular file");

  const fs::path socket_path = dir.path() / "sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(ErrorOf(socket_path, 1024).cause(), "it is a socket, not a regular file");
  close(fd);

  // /dev/zero never ends: it used to grow the daemon by gigabytes.
  EXPECT_EQ(ErrorOf("/dev/zero", 1 << 20).cause(), "it is a device, not a regular file");
  EXPECT_EQ(ErrorOf("/dev/null", 1 << 20).cause(), "it is a device, not a regular file");
  const FileError directory = ErrorOf(dir.path(), 1024);
  EXPECT_EQ(directory.error(), EISDIR);
  EXPECT_EQ(directory.fix(), "name the file, not its directory");
  // A symbolic link is followed: to a regular file it reads, to a FIFO it is refused.
  fs::create_symlink(fifo, dir.path() / "link");
  EXPECT_EQ(ErrorOf(dir.path() / "link", 1024).cause(), "it is a FIFO, not a regular file");
}

// Refused from the size the file reports, before a byte is read: a sparse 1 GiB file
// costs nothing.
TEST(ReadFileBounded, RefusesAFileOverItsCapFromItsSize) {
  fakes::TempDir dir("files");
  const fs::path big = dir.path() / "sparse";
  { std::ofstream(big) << ""; }
  fs::resize_file(big, 1ull << 30);
  EXPECT_EQ(ErrorOf(big, 1 << 20).cause(),
            "it is larger than 1048576 bytes, the most this file may hold");
}

TEST(BoundedFile, ReadsPieceByPieceAndStopsAFileThatGrowsPastItsCap) {
  fakes::TempDir dir("files");
  const fs::path path = dir.Write("grows", std::string(100, 'a'));
  BoundedFile file(path, 150, "test file");
  char buffer[64];
  std::size_t total = 0;
  for (std::size_t n; (n = file.Read(buffer, sizeof buffer)) > 0;) total += n;
  EXPECT_EQ(total, 100u);

  BoundedFile again(path, 150, "test file");
  std::ofstream(path, std::ios::app) << std::string(100, 'b');  // now 200 bytes
  try {
    while (again.Read(buffer, sizeof buffer) > 0) {
    }
    ADD_FAILURE() << "read past the cap";
  } catch (const FileError& e) {
    EXPECT_EQ(e.cause(), "it is larger than 150 bytes, the most this file may hold");
    EXPECT_LE(again.bytes_read(), 151u);
  }
}

TEST(TryReadFileBounded, NulloptInsteadOfErrors) {
  EXPECT_FALSE(TryReadFileBounded("/dev/zero", 4096));
  EXPECT_FALSE(TryReadFileBounded("/nonexistent/file", 4096));
  // procfs reports a size of 0 and is read to its end.
  const auto status = TryReadFileBounded("/proc/self/status", 1 << 20);
  ASSERT_TRUE(status);
  EXPECT_NE(status->find("VmRSS"), std::string::npos);
}

TEST(Printable, EscapesWhatATerminalWouldActOnAndCapsTheLength) {
  EXPECT_EQ(Printable("plain text: a/b.c"), "plain text: a/b.c");
  EXPECT_EQ(Printable(std::string("a\0b\n\x1b[2J\x7f", 9)), "a\\x00b\\x0a\\x1b[2J\\x7f");
  EXPECT_EQ(Printable("gr\xc3\xbc\xc3\x9f"), "gr\xc3\xbc\xc3\x9f");  // UTF-8 letters stay
  EXPECT_EQ(Printable("\xff\xfe"), "\\xff\\xfe");                    // not UTF-8
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(Printable("a\xe2\x80\xae"
                      "b"),
            "a\\u202eb");                       // right-to-left override
  EXPECT_EQ(Printable("\xc2\x9b"), "\\u009b");  // C1 control (CSI)
  EXPECT_EQ(Printable("say \"hi\" \\ bye", 100, true), "say \\\"hi\\\" \\\\ bye");
  EXPECT_EQ(Printable(std::string(50, 'x'), 10), "xxxxxxxxxx...(50 bytes)");
  // Cut between characters, never inside one.
  EXPECT_EQ(Printable("\xc3\xbc\xc3\xbc\xc3\xbc", 5), "\xc3\xbc\xc3\xbc...(6 bytes)");
}

}  // namespace
}  // namespace xferd::platform
