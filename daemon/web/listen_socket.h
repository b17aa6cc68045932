// The socket the HTTP server listens on, opened here rather than by libmicrohttpd so that a
// failure names its cause and fix (a port in use, an address not this host's, a port below
// 1024), and so that every interface means IPv6 dual stack where the host has IPv6.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "web/listen_address.h"

namespace xferd::web {

struct ListenSocket {
  int fd = -1;  // bound and listening; non-blocking, close-on-exec
  int family = AF_INET;
  bool wildcard = false;   // every interface
  std::uint16_t port = 0;  // as bound: the one picked when the address says port 0
  // AF_UNIX (web/unix_socket.h): the socket file, and its identity when bound.
  std::filesystem::path unix_path;
  dev_t unix_device = 0;
  ino_t unix_inode = 0;
};

// Binds `address` and listens. `spec` is the address as given, quoted, for messages.
// Throws HttpError naming the cause and the fix.
ListenSocket OpenListenSocket(const std::string& spec, const ListenAddress& address);

}  // namespace xferd::web
