#include "web/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "web/http_error.h"

namespace xferd::web {
namespace {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

[[noreturn]] void ThrowBindError(const std::string& address, std::uint16_t port, int err) {
  std::string cause;
  std::string fix;
  switch (err) {
    case EADDRINUSE:
      cause = "port " + std::to_string(port) + " already in use (another xferd or exporter?)";
      fix = "stop the other process or choose another port with --web.listen-address";
      break;
    case EADDRNOTAVAIL:
      cause = "the address is not one of this host's";
      fix = "use an address of this host, or :PORT for every interface";
      break;
    case EACCES:
      cause = "permission denied for port " + std::to_string(port) +
              " (ports below 1024 need root or CAP_NET_BIND_SERVICE)";
      fix = "choose a port of 1024 or above";
      break;
    default: cause = std::strerror(err); fix = "check the address";
  }
  throw HttpError("listen address " + address + ": " + cause, fix);
}

// Every interface: IPv6 dual stack when the host has IPv6, else IPv4.
std::vector<SocketAddress> WildcardAddresses(std::uint16_t port) {
  SocketAddress v6;
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&v6.storage);
  a6->sin6_family = AF_INET6;
  a6->sin6_addr = in6addr_any;
  a6->sin6_port = htons(port);
  v6.length = sizeof(sockaddr_in6);
  SocketAddress v4;
  auto* a4 = reinterpret_cast<sockaddr_in*>(&v4.storage);
  a4->sin_family = AF_INET;
  a4->sin_addr.s_addr = htonl(INADDR_ANY);
  a4->sin_port = htons(port);
  v4.length = sizeof(sockaddr_in);
  return {v6, v4};
}

// The addresses the host of `address` resolves to, in the resolver's order.
std::vector<SocketAddress> ResolvedAddresses(const std::string& spec,
                                             const ListenAddress& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  const int rc = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    throw HttpError("listen address " + spec + ": cannot resolve host '" + address.host + "' (" +
                        gai_strerror(rc) + ")",
                    "give a host name this machine resolves, or an IP address");
  }
  std::vector<SocketAddress> out;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    SocketAddress a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    out.push_back(a);
  }
  freeaddrinfo(found);
  return out;
}

std::uint16_t BoundPort(int fd, int family) {
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  return ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

}  // namespace

ListenSocket OpenListenSocket(const std::string& spec, const ListenAddress& address) {
  ListenSocket out;
  out.wildcard = address.host.empty();
  const std::vector<SocketAddress> candidates =
      out.wildcard ? WildcardAddresses(address.port) : ResolvedAddresses(spec, address);

  int last_error = EAFNOSUPPORT;
  for (const SocketAddress& candidate : candidates) {
    const int family = candidate.storage.ss_family;
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last_error = errno;
      if (errno == EAFNOSUPPORT) continue;  // no IPv6 in this kernel or container
      throw HttpError(
          "listen address " + spec + ": cannot create a socket: " + std::strerror(errno),
          "check the process's file limits");
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6 && out.wildcard) {
      const int zero = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (bind(fd, reinterpret_cast<const sockaddr*>(&candidate.storage), candidate.length) != 0) {
      last_error = errno;
      close(fd);
      // The IPv6 wildcard fails with EADDRNOTAVAIL where IPv6 is disabled: try IPv4.
      if (out.wildcard && family == AF_INET6 && last_error == EADDRNOTAVAIL) continue;
      ThrowBindError(spec, address.port, last_error);
    }
    if (listen(fd, SOMAXCONN) != 0) {
      last_error = errno;
      close(fd);
      ThrowBindError(spec, address.port, last_error);
    }
    out.fd = fd;
    out.family = family;
    out.port = BoundPort(fd, family);
    return out;
  }
  ThrowBindError(spec, address.port, last_error);
}

}  // namespace xferd::web
