// Unix-domain sockets: the health socket the daemon serves its status on (docs/http.md,
// "The health socket"), and the address `xferd health` reaches it at. A socket file's
// permissions decide who may connect: no other local user can reach it, let alone crowd it
// out, as idle TCP connections from one address can crowd out the HTTP port.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <filesystem>

#include "web/listen_socket.h"

namespace xferd::web {

// The address of the socket at `path`, whatever the path's length: one longer than a
// sockaddr_un holds (107 bytes) is reached through its directory, kept open while this
// lives, as /proc/self/fd/N/NAME. Throws HttpError when the directory cannot be opened.
class UnixAddress {
 public:
  explicit UnixAddress(const std::filesystem::path& path);
  ~UnixAddress();
  UnixAddress(const UnixAddress&) = delete;
  UnixAddress& operator=(const UnixAddress&) = delete;

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&address_); }
  socklen_t length() const { return length_; }

 private:
  sockaddr_un address_{};
  socklen_t length_ = 0;
  int directory_ = -1;
};

// Binds a stream socket at `path` with `mode` (given to the socket before its name exists,
// so it is never wider), and listens. A socket file left there by an earlier run that no
// process answers on any more is replaced; a socket another process serves, or anything
// else at `path`, is refused. Throws HttpError naming the cause and the fix. The returned
// socket's `unix_path` names what UnlinkUnixSocket removes.
ListenSocket OpenUnixListenSocket(const std::filesystem::path& path, mode_t mode);

// Removes the socket file `socket` bound, if it is still that one (not one a newer process
// bound there meanwhile).
void UnlinkUnixSocket(const ListenSocket& socket);

}  // namespace xferd::web
