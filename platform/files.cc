#include "platform/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "platform/printable.h"

namespace xferd::platform {
namespace {

// Paths come from config files and flags: escaped, and cut where they are absurdly long.
constexpr std::size_t kPathBytes = 512;

std::string ReadFix(int error, Secrecy secrecy) {
  switch (error) {
    case ENOENT: return "check the path";
    case EACCES:
    case EPERM:
      // A secret is never made readable by every user to get it read.
      return secrecy == Secrecy::kSecret
                 ? "make it readable by the user that reads it and no other: chown that "
                   "user and chmod 0600 (or chmod 0640 with a group of its own that only "
                   "that user is in)"
                 : "make it readable by the user xferd runs as (chmod 0644, or chgrp xferd "
                   "and chmod 0640)";
    case EISDIR: return "name the file, not its directory";
    default: return "check the path and its permissions";
  }
}

std::string KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// Closes on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

struct ReadFailure {
  int error = 0;      // errno, or 0 for a check of ours
  std::string cause;  // empty: strerror(error)
  std::string fix;
};

std::string TooLarge(std::size_t max_bytes) {
  return "it is larger than " + std::to_string(max_bytes) + " bytes, the most this file may hold";
}

// Who besides the owner (and the file's group, for reading) can get at a secret: "every user
// of this host" for a mode others may read or write, "its group" for a group-writable one;
// "" when nobody. ssh refuses private keys the same way.
std::string SecretExposedTo(mode_t mode) {
  if ((mode & (S_IROTH | S_IWOTH)) != 0) return "every user of this host";
  if ((mode & S_IWGRP) != 0) return "every user of its group, who may also change it";
  return "";
}

// The checks every read makes before it reads a byte; the open descriptor, or -1 with
// `failure` set.
int OpenChecked(const std::filesystem::path& path, std::size_t max_bytes, Secrecy secrecy,
                ReadFailure& failure, Links links = Links::kFollow) {
  const auto refuse_kind = [&](const struct stat& st) {
    if (S_ISDIR(st.st_mode)) {
      failure = {EISDIR, "", ReadFix(EISDIR, secrecy)};
      return true;
    }
    if (!S_ISREG(st.st_mode)) {
      failure = {0, "it is " + KindOf(st.st_mode) + ", not a regular file",
                 "point it at a regular file"};
      return true;
    }
    return false;
  };
  // Looked at before opening: opening a device can have effects of its own (a tape
  // rewinds, a terminal becomes ours) and opening a FIFO for reading waits for a writer.
  struct stat before {};
  const bool follow = links == Links::kFollow;
  if ((follow ? ::stat(path.c_str(), &before) : ::lstat(path.c_str(), &before)) == 0) {
    if (!follow && S_ISLNK(before.st_mode)) {
      failure = {0, "it is a symbolic link, which xferd does not follow here",
                 "remove the link; xferd reads only the files it wrote"};
      return -1;
    }
    if (refuse_kind(before)) return -1;
  }
  // O_NONBLOCK: a FIFO put in the file's place after the stat above opens at once instead
  // of waiting for a writer; fstat then refuses it. O_NOFOLLOW: a link put there meanwhile
  // fails the open (ELOOP).
  Fd fd(::open(path.c_str(),
               O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (follow ? 0 : O_NOFOLLOW)));
  if (fd.get() < 0) {
    failure = {errno, "", ReadFix(errno, secrecy)};
    return -1;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    failure = {errno, "", ReadFix(errno, secrecy)};
    return -1;
  }
  if (refuse_kind(st)) return -1;
  if (secrecy == Secrecy::kSecret) {
    if (const std::string who = SecretExposedTo(st.st_mode); !who.empty()) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      const std::string file = PrintablePath(path.string(), kPathBytes);
      failure = {0,
                 std::string("it is open to ") + who + " (mode " + mode +
                     "): the secret in it is no secret",
                 "chmod 0600 " + file + " (readable by its owner only), or chmod 0640 " + file +
                     " with a group of its own that only the users who need it are in"};
      return -1;
    }
  }
  if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    failure = {0, TooLarge(max_bytes), "check that this is the right file"};
    return -1;
  }
  return fd.release();
}

// Reads into `buffer` until it is full or the file ends; the count, or -1 with `failure`.
ssize_t ReadSome(int fd, char* buffer, std::size_t size, ReadFailure& failure) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, buffer + got, size - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      failure = {errno, "", ReadFix(errno, Secrecy::kPublic)};
      return -1;
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

std::optional<std::string> Read(const std::filesystem::path& path, std::size_t max_bytes,
                                Secrecy secrecy, ReadFailure& failure,
                                Links links = Links::kFollow) {
  Fd fd(OpenChecked(path, max_bytes, secrecy, failure, links));
  if (fd.get() < 0) return std::nullopt;
  std::string text;
  // procfs and sysfs report sizes of 0 or 4096 whatever they hold: read to the end, and
  // one byte past the limit to tell a file of exactly max_bytes from a larger one.
  std::vector<char> buffer(std::min<std::size_t>(max_bytes + 1, 65536));
  for (;;) {
    const ssize_t n = ReadSome(fd.get(), buffer.data(), buffer.size(), failure);
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    text.append(buffer.data(), static_cast<std::size_t>(n));
    if (text.size() > max_bytes) {
      failure = {0, TooLarge(max_bytes), "check that this is the right file"};
      return std::nullopt;
    }
  }
  return text;
}

[[noreturn]] void ThrowReadError(const std::filesystem::path& path, std::string_view what,
                                 ReadFailure& failure) {
  std::string cause = failure.cause.empty() ? std::strerror(failure.error) : failure.cause;
  throw FileError("cannot read", what, path, std::move(cause), std::move(failure.fix),
                  failure.error);
}

std::string WriteFix(int error, const std::filesystem::path& dir, const AtomicWrite& how) {
  const std::string elsewhere = how.setting.empty() ? "" : ", or change " + how.setting;
  switch (error) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return "free space on the file system of " + dir.string();
    case EACCES:
    case EPERM:
    case EROFS:
      return "let the xferd user write to " + dir.string() +
             (how.writable_hint.empty() ? "" : " (" + how.writable_hint + ")") + elsewhere;
    case ENOENT:
    case ENOTDIR: return "create the directory " + dir.string() + elsewhere;
    default: return "check " + dir.string() + elsewhere;
  }
}

std::filesystem::path DirectoryOf(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

// A rename or a new link is durable only once its directory is: a crash must not undo it.
void SyncDirectory(const std::filesystem::path& dir) {
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

// The names MoveAside and KeepCopy try, in order: "<path>.<tag>-<UTC time>", then ".2",
// ".3", ... A thousand files set aside in one second is far past anything that happens.
constexpr int kSetAsideNames = 1000;

std::filesystem::path SetAsideName(const std::filesystem::path& path, std::string_view tag,
                                   std::chrono::system_clock::time_point now, int n) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::filesystem::path name = path;
  name += "." + std::string(tag) + "-" + stamp;
  if (n > 1) name += "." + std::to_string(n);
  return name;
}

[[noreturn]] void ThrowSetAsideError(const std::filesystem::path& path, const char* step,
                                     int error) {
  throw FileError(
      "cannot set aside", "file", path,
      std::string(step) + ": " + (error != 0 ? std::strerror(error) : "every name is taken"),
      "check the permissions of " + DirectoryOf(path).string(), error);
}

// Copies `from` into a new file `to` (O_EXCL: never over another); false when `to` exists.
bool CopyToNewFile(const std::filesystem::path& from, const std::filesystem::path& to) {
  Fd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (in.get() < 0) ThrowSetAsideError(from, "open", errno);
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) ThrowSetAsideError(from, "stat", errno);
  Fd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0777));
  if (out.get() < 0) {
    if (errno == EEXIST) return false;
    ThrowSetAsideError(from, "create the copy", errno);
  }
  const auto abandon = [&](const char* step, int error) {
    ::close(out.release());
    ::unlink(to.c_str());
    ThrowSetAsideError(from, step, error);
  };
  std::vector<char> buffer(1 << 16);
  for (;;) {
    ReadFailure failure;
    const ssize_t n = ReadSome(in.get(), buffer.data(), buffer.size(), failure);
    if (n < 0) abandon("read", failure.error);
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w =
          ::write(out.get(), buffer.data() + done, static_cast<std::size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        abandon("write the copy", errno);
      }
      done += w;
    }
  }
  if (::fsync(out.get()) != 0) abandon("fsync the copy", errno);
  return true;
}

}  // namespace

FileError::FileError(std::string_view verb, std::string_view what, std::filesystem::path path,
                     std::string cause, std::string fix, int error)
    : Error(Failure::kOsError, std::string(verb) + " " + std::string(what) + " " +
                                   PrintablePath(path.string(), kPathBytes) + ": " + cause +
                                   "; fix: " + fix),
      path_(std::move(path)),
      cause_(std::move(cause)),
      fix_(std::move(fix)),
      error_(error) {}

std::string ReadFileBounded(const std::filesystem::path& path, std::size_t max_bytes,
                            std::string_view what, Secrecy secrecy, Links links) {
  ReadFailure failure;
  std::optional<std::string> text = Read(path, max_bytes, secrecy, failure, links);
  if (text) return std::move(*text);
  ThrowReadError(path, what, failure);
}

BoundedFile::BoundedFile(const std::filesystem::path& path, std::size_t max_bytes,
                         std::string_view what)
    : path_(path), what_(what), max_bytes_(max_bytes) {
  ReadFailure failure;
  fd_ = OpenChecked(path, max_bytes, Secrecy::kPublic, failure);
  if (fd_ < 0) ThrowReadError(path, what, failure);
}

BoundedFile::~BoundedFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t BoundedFile::Read(char* buffer, std::size_t size) {
  ReadFailure failure;
  // One byte past the limit is enough to know the file grew beyond it.
  const std::size_t room = max_bytes_ - std::min(done_, max_bytes_) + 1;
  const ssize_t n = ReadSome(fd_, buffer, std::min(size, room), failure);
  if (n < 0) ThrowReadError(path_, what_, failure);
  done_ += static_cast<std::size_t>(n);
  if (done_ > max_bytes_) {
    failure = {0, TooLarge(max_bytes_), "check that this is the right file"};
    ThrowReadError(path_, what_, failure);
  }
  return static_cast<std::size_t>(n);
}

PolledFile::PolledFile(const std::filesystem::path& path, std::size_t max_bytes)
    : path_(path), max_bytes_(max_bytes), buffer_(max_bytes + 1, '\0') {
  ReadFailure failure;
  fd_ = OpenChecked(path, max_bytes, Secrecy::kPublic, failure);
  if (fd_ < 0) ThrowReadError(path, "file", failure);
}

PolledFile::~PolledFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string_view> PolledFile::Read() {
  ssize_t n = 0;
  do {
    n = ::pread(fd_, buffer_.data(), buffer_.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    problem_ = std::strerror(errno);
    return std::nullopt;
  }
  if (static_cast<std::size_t>(n) > max_bytes_) {
    problem_ = TooLarge(max_bytes_);
    return std::nullopt;
  }
  problem_.clear();
  return std::string_view(buffer_.data(), static_cast<std::size_t>(n));
}

std::optional<std::string> TryReadFileBounded(const std::filesystem::path& path,
                                              std::size_t max_bytes) {
  ReadFailure ignored;
  return Read(path, max_bytes, Secrecy::kPublic, ignored);
}

std::string AtomicTempPrefix(const std::filesystem::path& path) {
  return "." + path.filename().string() + ".tmp.";
}

std::size_t RemoveAbandonedTempFiles(const std::filesystem::path& path) {
  const std::string target = path.filename().string();
  return RemoveAbandonedTempFiles(DirectoryOf(path),
                                  [&](std::string_view name) { return name == target; });
}

std::size_t RemoveAbandonedTempFiles(const std::filesystem::path& dir,
                                     const std::function<bool(std::string_view)>& ours) {
  std::size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // "." + the file's name + ".tmp." + mkostemp's 6 characters (letters and digits).
    constexpr std::string_view kTmp = ".tmp.";
    if (name.size() < 1 + kTmp.size() + 6 + 1 || name.front() != '.' ||
        name.compare(name.size() - 6 - kTmp.size(), kTmp.size(), kTmp) != 0 ||
        !std::all_of(name.end() - 6, name.end(),
                     [](unsigned char c) { return std::isalnum(c) != 0; }) ||
        !ours(std::string_view(name).substr(1, name.size() - 1 - kTmp.size() - 6))) {
      continue;
    }
    Fd fd(::open(entry.path().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    struct stat st {};
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    // Held: a live writer's. Free: its writer is gone (a lock dies with its process).
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    // Still the file that was looked at under that name (not renamed away and replaced).
    struct stat now {};
    if (::lstat(entry.path().c_str(), &now) != 0 || now.st_ino != st.st_ino ||
        now.st_dev != st.st_dev) {
      continue;
    }
    if (::unlink(entry.path().c_str()) == 0) ++removed;
  }
  return removed;
}

std::filesystem::path MoveAside(const std::filesystem::path& path, std::string_view tag,
                                std::chrono::system_clock::time_point now) {
  for (int n = 1; n <= kSetAsideNames; ++n) {
    const std::filesystem::path aside = SetAsideName(path, tag, now, n);
    if (::renameat2(AT_FDCWD, path.c_str(), AT_FDCWD, aside.c_str(), RENAME_NOREPLACE) == 0) {
      SyncDirectory(DirectoryOf(path));
      return aside;
    }
    if (errno == EEXIST) continue;
    if (errno != EINVAL && errno != ENOSYS) ThrowSetAsideError(path, "rename", errno);
    // A file system without RENAME_NOREPLACE: a new link never replaces a file either.
    if (::link(path.c_str(), aside.c_str()) != 0) {
      if (errno == EEXIST) continue;
      ThrowSetAsideError(path, "link", errno);
    }
    if (::unlink(path.c_str()) != 0) {
      const int error = errno;
      ::unlink(aside.c_str());
      ThrowSetAsideError(path, "unlink", error);
    }
    SyncDirectory(DirectoryOf(path));
    return aside;
  }
  ThrowSetAsideError(path, "find a free name", 0);
}

std::filesystem::path KeepCopy(const std::filesystem::path& path, std::string_view tag,
                               std::chrono::system_clock::time_point now) {
  for (int n = 1; n <= kSetAsideNames; ++n) {
    const std::filesystem::path copy = SetAsideName(path, tag, now, n);
    if (::link(path.c_str(), copy.c_str()) == 0) {
      SyncDirectory(DirectoryOf(path));
      return copy;
    }
    if (errno == EEXIST) continue;
    // No hard links here (EPERM, EMLINK, EOPNOTSUPP, EXDEV...): a copy of the bytes.
    if (errno == ENOENT || errno == EACCES || errno == EROFS || errno == ENOSPC) {
      ThrowSetAsideError(path, "link", errno);
    }
    if (!CopyToNewFile(path, copy)) continue;
    SyncDirectory(DirectoryOf(path));
    return copy;
  }
  ThrowSetAsideError(path, "find a free name", 0);
}

void WriteFileAtomically(const std::filesystem::path& path, std::string_view content,
                         const AtomicWrite& how) {
  const std::filesystem::path dir = DirectoryOf(path);
  const auto fail = [&](const char* step, int error) {
    throw FileError("cannot write", how.what, path,
                    std::string(step) + ": " + std::strerror(error) + "; the previous file is kept",
                    WriteFix(error, dir, how), error);
  };
  std::string temp = (dir / AtomicTempPrefix(path)).string() + "XXXXXX";
  Fd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (fd.get() < 0) fail("create a temporary file", errno);
  // Held until the file is renamed or removed: RemoveAbandonedTempFiles leaves it alone
  // while this process lives, and a crash releases it. (Between mkostemp and here a start
  // of another xferd writing the same file could take it for abandoned: its rename would
  // then fail once and be retried with the next write.)
  ::flock(fd.get(), LOCK_EX);
  const auto abandon = [&](const char* step, int error) {
    ::close(fd.release());
    ::unlink(temp.c_str());
    fail(step, error);
  };
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  // The file it replaces may have been made tighter by the operator (0600, or 0640 and a
  // group only node_exporter is in): the new one never lets more users read than either
  // the old one or `how.mode` would, and keeps the old one's group where it may. Only a
  // regular file lends its mode and group: a symbolic link in its place is replaced like
  // any name (rename never writes through it), and its target lends nothing, so a link
  // made by whoever may write the directory chooses neither where xferd writes nor who may
  // read what it writes (docs/http.md, "Textfile output").
  mode_t mode = how.mode;
  struct stat old {};
  if (::lstat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode)) {
    mode &= old.st_mode & 07777;
    if (old.st_gid != ::getegid()) (void)::fchown(fd.get(), static_cast<uid_t>(-1), old.st_gid);
  }
  if (::fchmod(fd.get(), mode) != 0) abandon("chmod", errno);
  if (::fsync(fd.get()) != 0) abandon("fsync", errno);
  if (::close(fd.release()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail("close", error);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    fail("rename", error);
  }
  SyncDirectory(dir);
}

}  // namespace xferd::platform
