// The client of `xferd health` against the real server (plain, TLS, basic auth) and against
// raw sockets that answer what no server should: it answers or throws, within its deadline.
#include "web/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "web/http_server.h"
#include "web/tls.h"

namespace xferd::web {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::filesystem::path kTls = std::filesystem::path(XFERD_TEST_DATA_DIR) / "tls";
// bcrypt (cost 10) of "test-password", made with Python's crypt module.
constexpr const char* kHash = "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi";

std::string Message(const std::function<void()>& f) {
  try {
    f();
  } catch (const HttpError& e) {
    return e.what();
  }
  return "(no error)";
}

// A listening socket on 127.0.0.1 whose one connection gets `answer`: it reads the request,
// then writes what `answer` returns for it (or does nothing, for as long as it is told).
class RawServer {
 public:
  explicit RawServer(std::function<void(int fd)> answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 4);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buffer[4096];
      timeval tv{2, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      (void)::recv(c, buffer, sizeof buffer, 0);
      answer_(c);
      ::close(c);
    });
  }
  ~RawServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  HttpClientRequest Request() const {
    HttpClientRequest r;
    r.url = ParseHttpUrl("http://127.0.0.1:" + std::to_string(port_) + "/api/v1/status");
    r.timeout = 1500ms;
    r.max_body_bytes = 1u << 20;
    return r;
  }

 private:
  std::function<void(int)> answer_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

void Write(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

// The review: a URL with credentials was refused, but the message quoted it whole.
TEST(HttpUrl, CredentialsNeverShowInAMessage) {
  EXPECT_EQ(RedactedUrl("http://alice:goodpw@127.0.0.1:9742"), "http://***@127.0.0.1:9742");
  EXPECT_EQ(RedactedUrl("alice:goodpw@host:1/x"), "***@host:1/x");
  EXPECT_EQ(RedactedUrl("https://a:p@ss/w@rd@[::1]:1/"), "https://***@[::1]:1/");
  EXPECT_EQ(RedactedUrl("http://127.0.0.1:9742/x"), "http://127.0.0.1:9742/x");
  for (const char* url : {"http://alice:goodpw@127.0.0.1:9742", "alice:goodpw@127.0.0.1",
                          "http://alice:go@odpw@[::1]:9742/metrics?x"}) {
    try {
      ParseHttpUrl(url);
      ADD_FAILURE() << url << " was accepted";
    } catch (const HttpError& e) {
      EXPECT_EQ(std::string(e.what()).find("goodpw"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("odpw"), std::string::npos) << e.what();
    }
  }
}

TEST(HttpUrl, ParsesWhatTheFlagTakesAndRefusesTheRest) {
  HttpUrl u = ParseHttpUrl("https://[::1]:9742");
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 9742);
  EXPECT_EQ(u.path, "/");
  EXPECT_EQ(u.Text(), "https://[::1]:9742/");
  u = ParseHttpUrl("http://node-7.example:80/api/v1/status");
  EXPECT_FALSE(u.tls);
  EXPECT_EQ(u.host, "node-7.example");
  EXPECT_EQ(u.path, "/api/v1/status");
  EXPECT_EQ(ParseHttpUrl("https://localhost").port, 443);
  for (const char* bad :
       {"", "127.0.0.1:9742", "ftp://x", "http://", "http://:9742", "http://host:0",
        "http://host:99999", "http://host:12ab", "http://user:pw@host:1", "http://[::1",
        "http://[zz]:1", "http://host/a?b", "http://ho st:1", "http://host:"}) {
    EXPECT_THROW(ParseHttpUrl(bad), HttpError) << bad;
  }
}

TEST(HttpClient, GetsTheAnswerOfTheRealServer) {
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  HttpServer server(options, [](const HttpRequest& r) {
    HttpResponse response;
    response.content_type = "application/json";
    response.body = "{\"path\": \"" + r.path + "\"}";
    return response;
  });
  HttpClientRequest request;
  request.url =
      ParseHttpUrl("http://127.0.0.1:" + std::to_string(server.port()) + "/api/v1/status");
  const HttpClientResponse r = HttpGet(request);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "{\"path\": \"/api/v1/status\"}");
}

TEST(HttpClient, ChecksTheCertificateAndLogsIn) {
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.web.tls = LoadTlsMaterial(kTls / "server.crt", kTls / "server.key");
  options.web.basic_auth_users["prometheus"] = kHash;
  HttpServer server(options, [](const HttpRequest& r) {
    HttpResponse response;
    response.body = "hello " + r.user;
    return response;
  });
  const std::string port = std::to_string(server.port());
  HttpClientRequest request;
  request.url = ParseHttpUrl("https://127.0.0.1:" + port + "/x");
  request.ca_file = kTls / "server.crt";
  request.basic_auth = std::make_pair("prometheus", "test-password");
  HttpClientResponse r = HttpGet(request);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello prometheus");
  // By name too: the certificate names localhost.
  request.url = ParseHttpUrl("https://localhost:" + port + "/x");
  EXPECT_EQ(HttpGet(request).status, 200);

  request.basic_auth = std::make_pair("prometheus", "wrong");
  EXPECT_EQ(HttpGet(request).status, 401);
  request.basic_auth.reset();
  EXPECT_EQ(HttpGet(request).status, 401);
  request.basic_auth = std::make_pair("pro:metheus", "x");
  EXPECT_NE(Message([&] { HttpGet(request); }).find("holds a ':'"), std::string::npos);
  request.basic_auth = std::make_pair("prometheus", "test-password");

  // A certificate that is not the one trusted, a name it does not carry, no CA at all.
  HttpClientRequest other = request;
  other.ca_file = kTls / "ca.crt";
  std::string m = Message([&] { HttpGet(other); });
  EXPECT_NE(m.find("fails the check"), std::string::npos) << m;
  EXPECT_NE(m.find("--tls.ca-file"), std::string::npos) << m;
  other = request;
  other.server_name = "gpu-node-7.example";
  m = Message([&] { HttpGet(other); });
  EXPECT_NE(m.find("fails the check for \"gpu-node-7.example\""), std::string::npos) << m;
  EXPECT_NE(m.find("--tls.server-name"), std::string::npos) << m;
  other = request;
  other.ca_file.clear();
  EXPECT_NE(Message([&] { HttpGet(other); }).find("fails the check"), std::string::npos);
  other.ca_file = kTls / "missing.crt";
  m = Message([&] { HttpGet(other); });
  EXPECT_NE(m.find("missing.crt"), std::string::npos) << m;
  other.ca_file = kTls / "server.key";
  m = Message([&] { HttpGet(other); });
  EXPECT_NE(m.find("holds no PEM certificate"), std::string::npos) << m;

  // Plain HTTP to the TLS port: no answer it takes for one, within the deadline.
  other = request;
  other.url.tls = false;
  other.timeout = 2s;
  const auto start = Clock::now();
  m = Message([&] { HttpGet(other); });
  EXPECT_NE(m, "(no error)");
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(HttpClient, ACertificateIssuedByATrustedCaIsAccepted) {
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.web.tls = LoadTlsMaterial(kTls / "chain.crt", kTls / "leaf.key");
  HttpServer server(options, [](const HttpRequest&) { return HttpResponse{}; });
  HttpClientRequest request;
  request.url = ParseHttpUrl("https://127.0.0.1:" + std::to_string(server.port()) + "/");
  request.ca_file = kTls / "ca.crt";
  EXPECT_EQ(HttpGet(request).status, 200);
}

TEST(HttpClient, TlsToAPlainServerFailsWithTheFix) {
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  HttpServer server(options, [](const HttpRequest&) { return HttpResponse{}; });
  HttpClientRequest request;
  request.url = ParseHttpUrl("https://127.0.0.1:" + std::to_string(server.port()) + "/");
  request.ca_file = kTls / "server.crt";
  request.timeout = 3s;
  const std::string m = Message([&] { HttpGet(request); });
  // Whichever way the plain server answers (an HTTP 400, or closing): the fix says TLS.
  EXPECT_NE(m.find("check that the daemon serves TLS there"), std::string::npos) << m;
  EXPECT_NE(m.find("tls_server_config"), std::string::npos) << m;
}

TEST(HttpClient, NobodyListeningIsAnErrorNamingTheAddress) {
  // A port that was free a moment ago.
  std::uint16_t port = 0;
  {
    RawServer gone([](int) {});
    port = gone.port();
  }
  HttpClientRequest request;
  request.url = ParseHttpUrl("http://127.0.0.1:" + std::to_string(port));
  const std::string m = Message([&] { HttpGet(request); });
  EXPECT_NE(m.find("cannot connect"), std::string::npos) << m;
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
}

TEST(HttpClient, AServerThatSaysNothingTimesOutOnTime) {
  std::atomic<bool> done{false};
  RawServer silent([&](int) {
    for (int i = 0; i < 100 && !done; ++i) std::this_thread::sleep_for(50ms);
  });
  HttpClientRequest request = silent.Request();
  request.timeout = 700ms;
  const auto start = Clock::now();
  const std::string m = Message([&] { HttpGet(request); });
  const auto took = Clock::now() - start;
  done = true;
  EXPECT_NE(m.find("no answer within 0.7 s while reading the answer"), std::string::npos) << m;
  EXPECT_GE(took, 650ms);
  EXPECT_LT(took, 2s);
}

TEST(HttpClient, ATrickleCannotStretchTheDeadline) {
  std::atomic<bool> done{false};
  RawServer trickle([&](int fd) {
    Write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
    for (int i = 0; i < 200 && !done; ++i) {
      Write(fd, "x");
      std::this_thread::sleep_for(20ms);
    }
  });
  HttpClientRequest request = trickle.Request();
  request.timeout = 800ms;
  const auto start = Clock::now();
  const std::string m = Message([&] { HttpGet(request); });
  done = true;
  EXPECT_NE(m.find("no answer within"), std::string::npos) << m;
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(HttpClient, AnswersThatAreNotHttpAreErrorsNotCrashes) {
  struct Case {
    const char* what;
    std::string answer;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"nothing", "", "closed the connection without an answer"},
      {"garbage", "\x16\x03\x01 binary junk\r\n\r\n", "status line"},
      {"SSH banner", "SSH-2.0-OpenSSH_9.2\r\n", "ends inside its headers"},
      {"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", "status line"},
      {"header without colon", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header line"},
      {"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "Content-Length"},
      {"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "a body over"},
      {"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "ends after 3 of 10"},
      {"gzip transfer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "Transfer-Encoding"},
      {"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"},
      {"cut chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", "cut short"},
      {"endless headers", "HTTP/1.1 200 OK\r\n" + std::string(70000, 'a') + ": b\r\n\r\n",
       "headers longer"},
      {"endless body", "HTTP/1.1 200 OK\r\n\r\n" + std::string(2u << 20, 'x'), "a body over"},
  };
  for (const Case& c : cases) {
    RawServer server([&](int fd) { Write(fd, c.answer); });
    const std::string m = Message([&] { HttpGet(server.Request()); });
    EXPECT_NE(m.find(c.error), std::string::npos) << c.what << ": " << m;
  }
}

TEST(HttpClient, ReadsChunkedAndUnsizedBodies) {
  {
    RawServer server([](int fd) {
      Write(fd,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n "
            "world\r\n0\r\n\r\n");
    });
    EXPECT_EQ(HttpGet(server.Request()).body, "hello world");
  }
  {
    RawServer server([](int fd) { Write(fd, "HTTP/1.0 503 Busy\r\n\r\ntry later"); });
    const HttpClientResponse r = HttpGet(server.Request());
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.body, "try later");
  }
}

}  // namespace
}  // namespace xferd::web
