// The one bounded reader: every kind of file that is not a regular file of the expected
// size is refused at once with a clear error, never waited on and never read to the end.
#include "platform/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
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

// The link watch's way to read a sysfs attribute every second: opened once, read again from
// its start with one pread, so a value rewritten in place is seen at the next reading.
TEST(PolledFile, ReadsTheFileAsItIsNowAtEveryReading) {
  fakes::TempDir dir("files");
  const fs::path path = dir.Write("current_link_width", "16\n");
  PolledFile file(path, 16);
  ASSERT_EQ(file.Read(), "16\n");
  std::ofstream(path, std::ios::trunc) << "8\n";  // the same file, rewritten
  EXPECT_EQ(file.Read(), "8\n");
  EXPECT_EQ(file.Read(), "8\n");  // again from the start, not from where the last read ended
  // Past its cap the reading is refused (and says so), not cut to the cap.
  std::ofstream(path, std::ios::trunc) << std::string(40, '1');
  EXPECT_FALSE(file.Read());
  EXPECT_EQ(file.problem(), "it is larger than 16 bytes, the most this file may hold");
  std::ofstream(path, std::ios::trunc) << "4\n";
  EXPECT_EQ(file.Read(), "4\n");
  EXPECT_EQ(file.problem(), "");
}

TEST(PolledFile, RefusesWhatIsNotARegularFileOfItsSizeAtOnce) {
  fakes::TempDir dir("files");
  const fs::path fifo = dir.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto cause = [](const fs::path& path, std::size_t cap) -> std::string {
    try {
      PolledFile file(path, cap);
    } catch (const FileError& e) {
      return e.cause();
    }
    return "opened";
  };
  EXPECT_EQ(cause(fifo, 4096), "it is a FIFO, not a regular file");  // and never waited on
  EXPECT_EQ(cause(dir.path(), 4096), "Is a directory");
  EXPECT_EQ(cause(dir.Write("big", std::string(5000, 'x')), 4096),
            "it is larger than 4096 bytes, the most this file may hold");
  EXPECT_EQ(cause(dir.path() / "missing", 4096), "No such file or directory");
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

// The review: with a long temporary directory the line "AER counters not readable" showed
// the path's start and lost the counter file's name. A path cut short keeps its end.
TEST(PrintablePath, KeepsTheFileNameAndTheStartWhenCut) {
  const std::string dir = "/tmp/" + std::string(300, 'x') + "/sys/bus/pci/devices/0000:01:00.0";
  const std::string path = dir + "/aer_dev_correctable";
  EXPECT_EQ(PrintablePath("/sys/a/b"), "/sys/a/b");
  for (const std::size_t max : {60u, 120u, 256u}) {
    const std::string shown = PrintablePath(path, max);
    EXPECT_LE(shown.size(), max + 4) << shown;
    EXPECT_EQ(shown.rfind("/tmp/x", 0), 0u) << shown;
    EXPECT_NE(shown.find("/aer_dev_correctable"), std::string::npos) << shown;
    EXPECT_NE(shown.find("(" + std::to_string(path.size()) + " bytes)"), std::string::npos);
  }
  // Escapes and UTF-8 are never cut in two.
  const std::string odd =
      "/d/" + std::string(100, '\x1b') + "\xc3\xbc" + std::string(100, 'y') + "/f";
  for (std::size_t max = 20; max < 120; ++max) {
    const std::string shown = PrintablePath(odd, max);
    EXPECT_EQ(shown, Printable(shown, 10000)) << "printable as it is: " << shown;
    EXPECT_NE(shown.find("/f"), std::string::npos) << shown;
  }
}

std::string Contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// 2026-11-29 18:00:00 UTC: one second for every name below.
std::chrono::system_clock::time_point Second() {
  return std::chrono::system_clock::from_time_t(1795975200);
}

// Two corrupt state files in one second used to get one name: the second rename replaced
// the first copy. Each file set aside keeps a name of its own, and the original bytes.
TEST(MoveAside, NeverReplacesAFileSetAsideBefore) {
  fakes::TempDir dir("aside");
  std::set<fs::path> names;
  for (int i = 0; i < 5; ++i) {
    const fs::path file = dir.Write("state.json", "corrupt " + std::to_string(i));
    const fs::path aside = MoveAside(file, "corrupt", Second());
    EXPECT_FALSE(fs::exists(file));
    EXPECT_EQ(Contents(aside), "corrupt " + std::to_string(i));
    names.insert(aside);
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_TRUE(names.count(dir.path() / "state.json.corrupt-20261129T180000Z"));
  EXPECT_TRUE(names.count(dir.path() / "state.json.corrupt-20261129T180000Z.5"));
  try {
    MoveAside(dir.path() / "missing.json", "corrupt", Second());
    ADD_FAILURE() << "moved a file that does not exist";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
  }
}

// A copy is kept whole when the file is then replaced as xferd replaces it.
TEST(KeepCopy, KeepsTheContentUnderANameOfItsOwnWhateverReplacesTheFile) {
  fakes::TempDir dir("aside");
  const fs::path file = dir.Write("state.json", "all of it");
  const fs::path first = KeepCopy(file, "trimmed", Second());
  const fs::path second = KeepCopy(file, "trimmed", Second());
  EXPECT_NE(first, second);
  WriteFileAtomically(file, "the kept part", {});
  EXPECT_EQ(Contents(file), "the kept part");
  EXPECT_EQ(Contents(first), "all of it");
  EXPECT_EQ(Contents(second), "all of it");
}

// Only what is provably ours goes: mkstemp's name, a regular file of ours, held by nobody.
TEST(RemoveAbandonedTempFiles, RemovesOnlyTempFilesNoLiveWriterHolds) {
  fakes::TempDir dir("temps");
  const fs::path target = dir.path() / "xferd.prom";
  const fs::path left1 = dir.Write(".xferd.prom.tmp.Ab12Cd", "half a file");
  const fs::path left2 = dir.Write(".xferd.prom.tmp.zz9900", "");
  // A writer of this process or another holds its temporary file locked.
  const fs::path held = dir.Write(".xferd.prom.tmp.HELD00", "being written");
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  // Not ours by name: another file's, another pattern, a link, a directory.
  const std::vector<fs::path> others = {
      dir.Write(".other.prom.tmp.Ab12Cd", "x"),     dir.Write(".xferd.prom.tmp.Ab12", "x"),
      dir.Write(".xferd.prom.tmp.Ab12Cd.bak", "x"), dir.Write("xferd.prom.tmp.Ab12Cd", "x"),
      dir.Write(".xferd.prom.tmp.Ab-2Cd", "x"),     dir.Write("xferd.prom", "served")};
  fs::create_directory(dir.path() / ".xferd.prom.tmp.dir000");
  fs::create_symlink(dir.path() / "xferd.prom", dir.path() / ".xferd.prom.tmp.link00");

  EXPECT_EQ(RemoveAbandonedTempFiles(target), 2u);
  EXPECT_FALSE(fs::exists(left1));
  EXPECT_FALSE(fs::exists(left2));
  EXPECT_TRUE(fs::exists(held));
  for (const fs::path& other : others) EXPECT_TRUE(fs::exists(other)) << other;
  EXPECT_TRUE(fs::is_directory(dir.path() / ".xferd.prom.tmp.dir000"));
  EXPECT_TRUE(fs::is_symlink(dir.path() / ".xferd.prom.tmp.link00"));
  EXPECT_EQ(Contents(dir.path() / "xferd.prom"), "served");
  // Once its writer is gone (its lock with it), it is abandoned.
  ::close(fd);
  EXPECT_EQ(RemoveAbandonedTempFiles(target), 1u);
  EXPECT_FALSE(fs::exists(held));
  // Another user's file of that name is not ours (root can give one away to test it).
  if (::geteuid() == 0) {
    const fs::path foreign = dir.Write(".xferd.prom.tmp.NOBODY", "x");
    ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);
    EXPECT_EQ(RemoveAbandonedTempFiles(target), 0u);
    EXPECT_TRUE(fs::exists(foreign));
  }
  // A directory that cannot be read removes nothing and throws nothing.
  EXPECT_EQ(RemoveAbandonedTempFiles(dir.path() / "missing" / "xferd.prom"), 0u);
}

// An operator who made the file tighter (0600; 0640 and a group only node_exporter is in)
// keeps that: each replacement used to make it 0644 again, readable by every user.
TEST(WriteFileAtomically, NeverLetsMoreUsersReadThanTheFileItReplaces) {
  fakes::TempDir dir("modes");
  const fs::path path = dir.path() / "xferd.prom";
  const auto mode_of = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return st.st_mode & 07777;
  };
  WriteFileAtomically(path, "1", {"textfile", 0644, "", ""});
  EXPECT_EQ(mode_of(), 0644u);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  WriteFileAtomically(path, "2", {"textfile", 0644, "", ""});
  EXPECT_EQ(mode_of(), 0640u);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  WriteFileAtomically(path, "3", {"textfile", 0644, "", ""});
  EXPECT_EQ(mode_of(), 0600u);
  // Nor more than asked for: a wider file is not kept wider.
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  WriteFileAtomically(path, "4", {"textfile", 0644, "", ""});
  EXPECT_EQ(mode_of(), 0644u);
  EXPECT_EQ(Contents(path), "4");
  if (::geteuid() == 0) {  // the group is kept (root may give any)
    ASSERT_EQ(::chown(path.c_str(), static_cast<uid_t>(-1), 65534), 0);
    WriteFileAtomically(path, "5", {"textfile", 0644, "", ""});
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_gid, 65534u);
  }
}

// The review: a textfile that was a symbolic link made the new .prom take its target's mode
// and group. A link lends nothing: it is replaced by the file itself (rename never writes
// through it), made with the mode asked for and the writer's group; the target is untouched.
TEST(WriteFileAtomically, ALinkInThePlaceOfTheFileIsReplacedAndLendsNothing) {
  fakes::TempDir dir("link");
  const fs::path target = dir.path() / "elsewhere.prom";
  const fs::path path = dir.path() / "xferd.prom";
  { std::ofstream(target) << "theirs\n"; }
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  if (::geteuid() == 0) ASSERT_EQ(::chown(target.c_str(), static_cast<uid_t>(-1), 65534), 0);
  fs::create_symlink(target, path);
  WriteFileAtomically(path, "ours\n", {"textfile", 0644, "", ""});
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link itself is replaced";
  EXPECT_EQ(st.st_mode & 07777, 0644u) << "not the target's 0600";
  EXPECT_EQ(st.st_gid, ::getegid()) << "not the target's group";
  EXPECT_EQ(Contents(path), "ours\n");
  EXPECT_EQ(Contents(target), "theirs\n") << "never written through the link";
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

}  // namespace
}  // namespace xferd::platform
