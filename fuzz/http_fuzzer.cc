// libFuzzer target: arbitrary bytes as one HTTP request to the real server (libmicrohttpd
// with xferd's callbacks: the path unescaping, the request limits, basic auth and the login
// verifier, the routes with gzip negotiation), over a loopback connection. Anything but an
// HTTP answer or a closed connection (a crash, a sanitizer report, a hang, a malformed
// status line, the metrics without the right credentials, a connection refused or not
// accepted within 5 s) is a finding; a system call of the harness interrupted by
// libFuzzer's own SIGALRM is retried, never taken for one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "exporter/routes.h"
#include "web/content_coding.h"
#include "web/http_server.h"

namespace {

// bcrypt of "fuzz" at cost 4: a login costs ~1 ms.
constexpr const char* kHash = "$2b$04$Tf6yBkSIGYfNuJ7W7xsNF.yT1SuxR..htr/XjToUvUl3Ao.xJcrK2";
// "Authorization: Basic " + base64("prometheus:fuzz").
constexpr std::string_view kGoodAuth = "cHJvbWV0aGV1czpmdXp6";

struct Server {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<xferd::web::HttpServer> http;

  Server() {
    prometheus::BuildCounter()
        .Name("xferd_fuzz_total")
        .Help("A counter the metrics path serves.")
        .Register(*registry)
        .Add({{"gpu", "0"}})
        .Increment();
    xferd::exporter::ExporterRoutes routes;
    routes.cached_collectables = {registry};
    routes.generation = [] { return std::uint64_t{1}; };
    routes.version = "fuzz";
    xferd::web::HttpServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.web.basic_auth_users["prometheus"] = kHash;
    options.header_timeout = std::chrono::seconds(2);
    http = std::make_unique<xferd::web::HttpServer>(
        options, xferd::exporter::MakeExporterHandler(std::move(routes)));
  }
};

// A connection the harness could not make is a finding only when the server is at fault:
// said on stderr with the cause before the trap, so that a finding names it.
[[noreturn]] void ServerFinding(const char* what, int error) {
  std::fprintf(stderr, "http_fuzzer: %s: %s\n", what, std::strerror(error));
  __builtin_trap();
}

// connect() to loopback, waited for up to 5 s. libFuzzer's own SIGALRM (its -timeout watchdog,
// every timeout/2 + 1 s) interrupts system calls with EINTR: that is the harness's signal,
// not the server's answer, and the connection goes on in the kernel, so it is waited for
// rather than taken for a finding (it decided 2 runs of 5 in CI). The same goes for a
// loopback out of local ports for a moment. A refused connection, or none within 5 s
// (the server stopped accepting), is a finding.
void ConnectOrTrap(int fd, std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int tries = 0;; ++tries) {
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return;
    if (errno == EADDRNOTAVAIL && tries < 50) {  // no local port free: TIME_WAITs expiring
      usleep(100 * 1000);
      continue;
    }
    if (errno != EINTR && errno != EINPROGRESS && errno != EALREADY) {
      ServerFinding("connect to the server", errno);
    }
    break;
  }
  // Interrupted: the handshake goes on; wait for it (a signal may interrupt poll too).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    pollfd p{fd, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) ServerFinding("no connection within 5 s", ETIMEDOUT);
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ServerFinding("poll for the connection", errno);
    if (n == 0) continue;
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) ServerFinding("connect to the server", error);
    return;
  }
}

std::string Exchange(std::uint16_t port, const std::uint8_t* data, std::size_t size) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) ServerFinding("socket", errno);  // the harness's descriptors leaked
  timeval tv{5, 0};  // a server that never answers nor closes fails by libFuzzer's timeout
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ConnectOrTrap(fd, port);
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;  // libFuzzer's SIGALRM, as above
    if (n <= 0) break;  // refused part-way: what it answered is still readable
    done += static_cast<std::size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string response;
  char buffer[65536];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;  // a cut-short answer would look malformed
    if (n <= 0) break;
    response.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return response;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Server server;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  (void)xferd::web::AcceptsGzip(input);

  const std::string response = Exchange(server.http->port(), data, size);
  if (response.empty()) return 0;  // closed without an answer: a refusal
  // One status line per answer: "HTTP/1.x NNN ".
  if (response.size() < 13 || response.compare(0, 7, "HTTP/1.") != 0 || response[8] != ' ' ||
      response[12] != ' ' || !std::isdigit(static_cast<unsigned char>(response[9]))) {
    __builtin_trap();
  }
  // The metrics only for the right credentials, in the clear or in gzip.
  const bool served = response.compare(9, 3, "200") == 0 &&
                      (response.find("xferd_fuzz_total") != std::string::npos ||
                       response.find("Content-Encoding: gzip") != std::string::npos);
  if (served && input.find(kGoodAuth) == std::string_view::npos) __builtin_trap();
  return 0;
}
