#include "web/unix_socket.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "platform/printable.h"
#include "web/http_error.h"

namespace xferd::web {
namespace {

constexpr const char* kSocketFix =
    "set [web] health_socket to a path in a directory xferd's user may write (by default "
    "the state directory), or \"\" to serve no health socket";

}  // namespace

UnixAddress::UnixAddress(const std::filesystem::path& path) {
  address_.sun_family = AF_UNIX;
  std::string name = path.string();
  if (name.size() >= sizeof(address_.sun_path)) {
    // Too long for sun_path: the kernel resolves /proc/self/fd/N/NAME as it would the path.
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    directory_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (directory_ < 0) {
      throw HttpError("socket " + platform::PrintablePath(path.string()) +
                          ": cannot open its directory: " + std::strerror(errno),
                      "check the path");
    }
    name = "/proc/self/fd/" + std::to_string(directory_) + "/" + path.filename().string();
    if (name.size() >= sizeof(address_.sun_path)) {
      throw HttpError("socket " + platform::PrintablePath(path.string()) +
                          ": its name is longer than a socket's address "
                          "may be (" +
                          std::to_string(sizeof(address_.sun_path) - 1) + " bytes)",
                      "choose a shorter file name");
    }
  }
  std::memcpy(address_.sun_path, name.c_str(), name.size() + 1);
  length_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
}

UnixAddress::~UnixAddress() {
  if (directory_ >= 0) ::close(directory_);
}

ListenSocket OpenUnixListenSocket(const std::filesystem::path& path, mode_t mode) {
  const std::string shown = "health socket " + platform::PrintablePath(path.string());
  const UnixAddress address(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      throw HttpError(shown + ": something that is not a socket is there",
                      "move it away, or " + std::string(kSocketFix));
    }
    // A socket file outlives the process that bound it (a crash, kill -9): replaced when
    // nothing answers on it, refused when another process does.
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool answered = probe >= 0 && ::connect(probe, address.get(), address.length()) == 0;
    if (probe >= 0) ::close(probe);
    if (answered) {
      throw HttpError(shown +
                          ": another process serves it (another xferd with the same state "
                          "directory?)",
                      "stop the other xferd, or give this one another state directory or "
                      "[web] health_socket");
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw HttpError(
          shown + ": cannot remove the one an earlier run left: " + std::strerror(errno),
          kSocketFix);
    }
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    throw HttpError(shown + ": cannot create a socket: " + std::string(std::strerror(errno)),
                    "check the process's file limits");
  }
  // The mode of the socket's inode becomes the file's (less the umask) when it is bound:
  // set first, the file is never wider than `mode`; set again after, it is exactly `mode`
  // whatever the umask took (systemd's UMask=0077).
  (void)::fchmod(fd, mode);
  if (::bind(fd, address.get(), address.length()) != 0) {
    const int error = errno;
    ::close(fd);
    throw HttpError(shown + ": cannot bind: " + std::strerror(error), kSocketFix);
  }
  if (::chmod(path.c_str(), mode) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::lstat(path.c_str(), &st) != 0) {
    const int error = errno;
    ::close(fd);
    ::unlink(path.c_str());
    throw HttpError(shown + ": " + std::strerror(error), kSocketFix);
  }
  ListenSocket out;
  out.fd = fd;
  out.family = AF_UNIX;
  out.unix_path = path;
  out.unix_device = st.st_dev;
  out.unix_inode = st.st_ino;
  return out;
}

void UnlinkUnixSocket(const ListenSocket& socket) {
  if (socket.unix_path.empty()) return;
  struct stat st {};
  if (::lstat(socket.unix_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
      st.st_dev == socket.unix_device && st.st_ino == socket.unix_inode) {
    ::unlink(socket.unix_path.c_str());
  }
}

}  // namespace xferd::web
