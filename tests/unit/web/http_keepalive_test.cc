// Scrapers reuse their connection: a bodiless GET/HEAD keeps it open (a new TCP connection
// per scrape used to cost more than the scrape); a request with a body still closes it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

#include "web/http_server.h"

namespace xferd::web {

namespace {

class Connection {
 public:
  explicit Connection(std::uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{20, 0};  // a hang fails the test instead of blocking it
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Connection() { close(fd_); }
  bool connected() const { return connected_; }

  void Send(const std::string& data) {
    ASSERT_EQ(send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
  }

  // One response: the head, then Content-Length bytes of body (none for HEAD). Empty when
  // the server closed first.
  std::string ReadResponse(bool head_request = false) {
    while (buffer_.find("\r\n\r\n") == std::string::npos) {
      if (!Fill()) return {};
    }
    const std::size_t head_end = buffer_.find("\r\n\r\n") + 4;
    std::size_t length = 0;
    const auto at = Lower(buffer_.substr(0, head_end)).find("\r\ncontent-length:");
    if (at != std::string::npos && !head_request) {
      length = std::strtoul(buffer_.c_str() + at + 17, nullptr, 10);
    }
    while (buffer_.size() < head_end + length) {
      if (!Fill()) return {};
    }
    std::string response = buffer_.substr(0, head_end + length);
    buffer_.erase(0, head_end + length);
    return response;
  }

  // True when the server closes the connection with nothing more sent.
  bool ClosedByServer() { return buffer_.empty() && !Fill(); }

  static std::string Lower(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }

 private:
  bool Fill() {
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

class HttpKeepAlive : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.listen_address = "127.0.0.1:0";
    server_ = std::make_unique<HttpServer>(options, [this](const HttpRequest& request) {
      ++handled_;
      HttpResponse response;
      response.body = "answer to " + request.path + "\n";
      return response;
    });
  }
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> handled_{0};
};

TEST_F(HttpKeepAlive, ScrapesShareOneConnection) {
  Connection c(server_->port());
  ASSERT_TRUE(c.connected());
  for (const char* path : {"/metrics", "/healthz", "/metrics"}) {
    c.Send(std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string response = c.ReadResponse();
    ASSERT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response;
    EXPECT_EQ(Connection::Lower(response).find("connection: close"), std::string::npos) << response;
    EXPECT_NE(response.find(std::string("answer to ") + path), std::string::npos) << response;
  }
  c.Send("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.ReadResponse(/*head_request=*/true).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(handled_, 4);
}

TEST_F(HttpKeepAlive, ConnectionCloseIsHonoured) {
  Connection c(server_->port());
  ASSERT_TRUE(c.connected());
  c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(c.ReadResponse().rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_TRUE(c.ClosedByServer());
}

// A body is never read: the answer goes out at once and the connection closes, so what
// the client sent after the headers is not taken for a next request.
TEST_F(HttpKeepAlive, RequestWithABodyIsAnsweredAndClosed) {
  Connection c(server_->port());
  ASSERT_TRUE(c.connected());
  const std::string body = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body);
  const std::string response = c.ReadResponse();
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response;
  EXPECT_TRUE(c.ClosedByServer());
  EXPECT_EQ(handled_, 1);
}

}  // namespace
}  // namespace xferd::web
