#include "testing/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "web/basic_auth.h"

namespace xferd::fakes {

int ConnectFrom(std::uint16_t port, const char* source, std::chrono::seconds timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  if (source != nullptr) inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if ((source != nullptr && bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int Connect(std::uint16_t port, std::chrono::seconds timeout) {
  return ConnectFrom(port, nullptr, timeout);
}

RawResponse ParseResponse(const std::string& raw) {
  RawResponse r;
  const auto end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::size_t pos = raw.find("\r\n") + 2;
  while (pos < end) {
    const auto eol = raw.find("\r\n", pos);
    const std::string line = raw.substr(pos, eol - pos);
    const auto colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers[name] = value;
    }
    pos = eol + 2;
  }
  r.body = raw.substr(end + 4);
  return r;
}

RawResponse Exchange(std::uint16_t port, const std::string& request, std::chrono::seconds timeout) {
  const int fd = Connect(port, timeout);
  if (fd < 0) return {};
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early on a request it refuses
    sent += static_cast<std::size_t>(n);
  }
  std::string raw;
  char buffer[16384];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    raw.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return ParseResponse(raw);
}

RawResponse Get(std::uint16_t port, const std::string& path, const std::string& method,
                const std::string& extra_headers) {
  return Exchange(port, method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers +
                            "Connection: close\r\n\r\n");
}

std::string BasicAuth(const std::string& user, const std::string& password) {
  return "Authorization: " + web::BasicAuthorization(user, password) + "\r\n";
}

RawResponse ExchangeOn(int fd, const std::string& request) {
  if (fd < 0) return {};
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string raw;
  char buffer[16384];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    raw.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return ParseResponse(raw);
}

RawResponse GetFrom(const char* source, std::uint16_t port, const std::string& extra_headers,
                    std::chrono::seconds timeout) {
  return ExchangeOn(
      ConnectFrom(port, source, timeout),
      "GET /metrics HTTP/1.1\r\nHost: localhost\r\n" + extra_headers + "Connection: close\r\n\r\n");
}

}  // namespace xferd::fakes
