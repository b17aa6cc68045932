#include "web/http_client.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "platform/files.h"
#include "platform/printable.h"
#include "web/basic_auth.h"
#include "web/tls.h"
#include "web/unix_socket.h"

namespace xferd::web {
namespace {

using Clock = std::chrono::steady_clock;

// Status line and headers: xferd sends a few hundred bytes.
constexpr std::size_t kMaxHeaderBytes = 64u << 10;

// A connection the daemon closed before answering: what it does, before any TLS work or
// reading, to one past the most connections one client address may hold (docs/http.md).
constexpr const char* kClosedUnanswered =
    "the daemon closed the connection without an answer: it refuses a client address's "
    "connections past its limit (too many connections from this address?)";
constexpr const char* kClosedFix =
    "run xferd health on the daemon's host, where it asks over the health socket, which no "
    "other user can crowd out; or see what holds connections to the daemon (ss -tn; the "
    "daemon's log and xferd_http_refusals_total count its refusals)";

std::string Quoted(std::string_view text) {
  return "\"" + platform::Printable(text, 200, /*escape_quotes=*/true) + "\"";
}

bool IsIpLiteral(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 || inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One exchange with its deadline: every wait is a poll() that ends by then.
class Exchange {
 public:
  explicit Exchange(const HttpClientRequest& request)
      : request_(request), deadline_(Clock::now() + request.timeout) {}

  [[noreturn]] void TimedOut(const char* while_doing) const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", request_.timeout.count() / 1000.0);
    throw HttpError(
        request_.url.Text() + ": no answer within " + seconds + " s while " + while_doing,
        "check that xferd runs and listens there (systemctl status xferd; its log "
        "says \"serving ...\"), or give a longer --timeout");
  }

  // Waits until `fd` is ready for `events`; throws at the deadline.
  void Wait(int fd, short events, const char* while_doing) const {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) TimedOut(while_doing);
      pollfd p{fd, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 60000)));
      if (n > 0) return;
      if (n < 0 && errno != EINTR) {
        throw HttpError(request_.url.Text() + ": poll failed: " + std::strerror(errno),
                        "try again");
      }
    }
  }

  // The health socket: its permissions let this user in or not; it is never crowded out.
  int ConnectUnix() {
    const HttpUrl& url = request_.url;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      throw HttpConnectError(url.Text() + ": cannot create a socket: " + std::strerror(errno),
                             "check the process's file limits");
    }
    auto owned = std::make_unique<Fd>(fd);
    const UnixAddress address(url.unix_socket);
    for (;;) {
      if (::connect(fd, address.get(), address.length()) == 0) break;
      if (errno == EINPROGRESS) {
        Wait(fd, POLLOUT, "connecting");
        break;
      }
      // Its backlog full: the daemon accepts the waiting ones first; wait a little.
      if (errno == EAGAIN) {
        if (Clock::now() >= deadline_) TimedOut("connecting");
        ::poll(nullptr, 0, 10);
        continue;
      }
      const int error = errno;
      throw HttpConnectError(url.Text() + ": cannot connect: " + std::strerror(error),
                             error == EACCES
                                 ? "run xferd health as root or as a member of the daemon's group "
                                   "(the socket is mode 0660)"
                                 : "check that xferd runs on this host with this state directory "
                                   "([web] health_socket)");
    }
    fd_ = std::move(owned);
    return fd;
  }

  int Connect() {
    const HttpUrl& url = request_.url;
    if (!url.unix_socket.empty()) return ConnectUnix();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (IsIpLiteral(url.host)) hints.ai_flags |= AI_NUMERICHOST;
    addrinfo* found = nullptr;
    const int rc =
        ::getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &found);
    if (rc != 0) {
      throw HttpError(url.Text() + ": cannot resolve " + Quoted(url.host) + ": " + gai_strerror(rc),
                      "give the address as an IP address (127.0.0.1, [::1]) or a name this "
                      "host resolves");
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    std::string last_error = "no address";
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      auto owned = std::make_unique<Fd>(fd);
      if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last_error = std::strerror(errno);
          continue;
        }
        Wait(fd, POLLOUT, "connecting");
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
          last_error = std::strerror(error);
          continue;
        }
      }
      fd_ = std::move(owned);
      return fd;
    }
    throw HttpConnectError(url.Text() + ": cannot connect: " + last_error,
                           "check that xferd runs and listens on that address and port "
                           "(systemctl status xferd; [web] listen_address, "
                           "--web.listen-address)");
  }

  HttpClientResponse Run() {
    const int fd = Connect();
    if (request_.url.tls && request_.url.unix_socket.empty()) StartTls(fd);
    Send(RequestText());
    return ReadAnswer();
  }

  ~Exchange() {
    if (session_ != nullptr) gnutls_deinit(session_);
    if (credentials_ != nullptr) gnutls_certificate_free_credentials(credentials_);
  }

 private:
  std::string RequestText() const {
    const HttpUrl& url = request_.url;
    const std::string host = !url.unix_socket.empty() ? "localhost"
                             : url.host.find(':') != std::string::npos
                                 ? "[" + url.host + "]:" + std::to_string(url.port)
                                 : url.host + ":" + std::to_string(url.port);
    std::string text = "GET " + url.path + " HTTP/1.1\r\nHost: " + host +
                       "\r\nUser-Agent: xferd-health\r\nAccept: application/json\r\n"
                       "Connection: close\r\n";
    if (request_.basic_auth) {
      text += "Authorization: " +
              BasicAuthorization(request_.basic_auth->first, request_.basic_auth->second) + "\r\n";
    }
    return text + "\r\n";
  }

  // Whether the peer of `fd` closes a new connection at once, before anything is sent on it:
  // what the daemon does to a connection past the most one client address may hold. Waits
  // at most 300 ms (and never past the deadline).
  bool ClosedAtAccept(int fd) const {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return false;
    Fd probe(::socket(peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (probe.get() < 0) return false;
    const auto until = std::min(deadline_, Clock::now() + std::chrono::milliseconds(300));
    const auto wait = [&](short events) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      pollfd p{probe.get(), events, 0};
      return ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0))) > 0;
    };
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&peer), length) != 0) {
      if (errno != EINPROGRESS) return errno == ECONNRESET || errno == ECONNREFUSED;
      if (!wait(POLLOUT)) return false;
    }
    if (!wait(POLLIN)) return false;
    char byte = 0;
    const ssize_t n = ::recv(probe.get(), &byte, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  void StartTls(int fd) {
    const HttpUrl& url = request_.url;
    const std::string fix_ca =
        "give the certificate of the CA that issued the daemon's certificate (or that "
        "certificate itself) with --tls.ca-file";
    if (gnutls_certificate_allocate_credentials(&credentials_) != GNUTLS_E_SUCCESS) {
      throw HttpError("TLS: cannot allocate credentials", "try again");
    }
    if (!request_.ca_file.empty()) {
      std::string pem;
      try {
        pem = platform::ReadFileBounded(request_.ca_file, kMaxCertificateFileBytes, "CA file");
      } catch (const platform::FileError& e) {
        throw HttpError(e.what(), fix_ca);
      }
      gnutls_datum_t datum{reinterpret_cast<unsigned char*>(pem.data()),
                           static_cast<unsigned int>(pem.size())};
      const int n =
          gnutls_certificate_set_x509_trust_mem(credentials_, &datum, GNUTLS_X509_FMT_PEM);
      if (n <= 0) {
        throw HttpError("CA file " + platform::PrintablePath(request_.ca_file.string(), 512) +
                            " holds no PEM certificate" +
                            (n < 0 ? std::string(" (") + gnutls_strerror(n) + ")" : ""),
                        fix_ca);
      }
    } else if (gnutls_certificate_set_x509_system_trust(credentials_) < 0) {
      throw HttpError("TLS: the system's trust store cannot be read", fix_ca);
    }
    if (gnutls_init(&session_, GNUTLS_CLIENT | GNUTLS_NONBLOCK) != GNUTLS_E_SUCCESS) {
      session_ = nullptr;
      throw HttpError("TLS: cannot start a session", "try again");
    }
    // TLS 1.2 and 1.3, as the server accepts (docs/http.md).
    gnutls_priority_set_direct(session_, "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2", nullptr);
    gnutls_credentials_set(session_, GNUTLS_CRD_CERTIFICATE, credentials_);
    name_ = request_.server_name.empty() ? url.host : request_.server_name;
    if (!IsIpLiteral(name_)) {
      gnutls_server_name_set(session_, GNUTLS_NAME_DNS, name_.data(), name_.size());
    }
    // The chain and the name (a DNS name, or an IP address against the IP SANs).
    gnutls_session_set_verify_cert(session_, name_.c_str(), 0);
    gnutls_transport_set_int(session_, fd);
    for (;;) {
      const int rc = gnutls_handshake(session_);
      if (rc == GNUTLS_E_SUCCESS) return;
      if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) {
        Wait(fd, gnutls_record_get_direction(session_) == 0 ? POLLIN : POLLOUT,
             "in the TLS handshake");
        continue;
      }
      if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
        gnutls_datum_t why{};
        std::string reason = "not trusted";
        if (gnutls_certificate_verification_status_print(
                gnutls_session_get_verify_cert_status(session_), GNUTLS_CRT_X509, &why, 0) == 0) {
          reason.assign(reinterpret_cast<const char*>(why.data), why.size);
          gnutls_free(why.data);
        }
        throw HttpError(url.Text() + ": the daemon's certificate fails the check for " +
                            Quoted(name_) + ": " + platform::Printable(reason, 400),
                        fix_ca + ", and the name it was issued for with --tls.server-name");
      }
      if (rc == GNUTLS_E_PULL_ERROR || rc == GNUTLS_E_PUSH_ERROR) {
        // Reset before the server said anything: what the daemon does to a connection past
        // the most one client address may hold, closed at accept before any TLS work (the
        // ClientHello finds the socket gone).
        throw HttpError(url.Text() + ": " + kClosedUnanswered + " before the TLS handshake (" +
                            gnutls_strerror(rc) + ")",
                        kClosedFix);
      }
      if (rc == GNUTLS_E_PREMATURE_TERMINATION) {
        // Closed before answering: a server that does not speak TLS, or one that refused
        // the connection at accept. A connection that sends nothing tells which: the
        // refusing daemon closes it at once too, one that waits for a request keeps it.
        if (ClosedAtAccept(fd)) {
          throw HttpError(url.Text() + ": " + kClosedUnanswered + " before the TLS handshake",
                          kClosedFix);
        }
        // A second connection was let in: the first may still have been refused (an
        // address at its limit gets a connection back whenever one of its own closes).
        throw HttpError(url.Text() +
                            ": the daemon closed the connection before the TLS "
                            "handshake (" +
                            gnutls_strerror(rc) +
                            "): too many connections from this address (it refuses a client "
                            "address's connections past its limit)? or it does not serve TLS "
                            "there",
                        std::string(kClosedFix) +
                            "; else check that the daemon serves TLS there (its web config has "
                            "tls_server_config) and that the URL says https://");
      }
      if (gnutls_error_is_fatal(rc) != 0) {
        throw HttpError(url.Text() + ": TLS handshake failed: " + gnutls_strerror(rc),
                        "check that the daemon serves TLS there (its web config has "
                        "tls_server_config) and that the URL says https:// (plain http:// "
                        "otherwise)");
      }
    }
  }

  void Send(const std::string& text) {
    const int fd = fd_->get();
    std::size_t sent = 0;
    while (sent < text.size()) {
      ssize_t n = 0;
      if (session_ != nullptr) {
        n = gnutls_record_send(session_, text.data() + sent, text.size() - sent);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
          Wait(fd, POLLOUT, "sending the request");
          continue;
        }
        if (n < 0) {
          throw HttpError(
              request_.url.Text() + ": TLS send failed: " + gnutls_strerror(static_cast<int>(n)),
              "try again");
        }
      } else {
        n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          Wait(fd, POLLOUT, "sending the request");
          continue;
        }
        if (n < 0) {
          throw HttpError(request_.url.Text() + ": send failed: " + std::strerror(errno),
                          "try again");
        }
      }
      sent += static_cast<std::size_t>(n);
    }
  }

  // Some bytes of the answer into `out`; false at the end of the stream.
  bool Receive(std::string& out) {
    const int fd = fd_->get();
    char buffer[16384];
    for (;;) {
      // A peer that always has a byte ready never makes poll() wait: the deadline is
      // checked here too.
      if (Clock::now() >= deadline_) TimedOut("reading the answer");
      ssize_t n = 0;
      if (session_ != nullptr) {
        n = gnutls_record_recv(session_, buffer, sizeof buffer);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
          Wait(fd, POLLIN, "reading the answer");
          continue;
        }
        // A peer that closes without close_notify: the end; a short body shows it.
        if (n == GNUTLS_E_PREMATURE_TERMINATION) return false;
        if (n < 0) {
          throw HttpError(
              request_.url.Text() + ": TLS receive failed: " + gnutls_strerror(static_cast<int>(n)),
              "try again");
        }
      } else {
        n = ::recv(fd, buffer, sizeof buffer, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          Wait(fd, POLLIN, "reading the answer");
          continue;
        }
        if (n < 0 && errno == ECONNRESET && out.empty() && !answered_) {
          throw HttpError(
              request_.url.Text() + ": " + kClosedUnanswered + " (" + std::strerror(errno) + ")",
              kClosedFix);
        }
        if (n < 0) {
          throw HttpError(request_.url.Text() + ": receive failed: " + std::strerror(errno),
                          "try again");
        }
      }
      if (n == 0) return false;
      answered_ = true;
      out.append(buffer, static_cast<std::size_t>(n));
      return true;
    }
  }

  [[noreturn]] void Bad(const std::string& what) const {
    throw HttpError(request_.url.Text() + ": not an answer xferd gives: " + what,
                    "check that the address is xferd's (another service may listen there)");
  }

  HttpClientResponse ReadAnswer() {
    std::string data;
    std::size_t header_end = std::string::npos;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      if (data.size() > kMaxHeaderBytes) Bad("headers longer than 64 KiB");
      if (!Receive(data)) {
        if (data.empty()) {
          throw HttpError(request_.url.Text() + ": " + kClosedUnanswered, kClosedFix);
        }
        Bad("the answer ends inside its headers");
      }
    }
    if (header_end > kMaxHeaderBytes) Bad("headers longer than 64 KiB");
    HttpClientResponse response;
    const std::string head = data.substr(0, header_end);
    std::string body = data.substr(header_end + 4);

    // "HTTP/1.1 200 OK"
    const std::size_t line_end = std::min(head.find("\r\n"), head.size());
    const std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 || status_line[8] != ' ' ||
        !std::all_of(status_line.begin() + 9, status_line.begin() + 12,
                     [](char c) { return c >= '0' && c <= '9'; })) {
      Bad("status line " + Quoted(status_line));
    }
    response.status = std::stoi(status_line.substr(9, 3));

    std::optional<std::size_t> length;
    bool chunked = false;
    std::size_t pos = line_end;
    while (pos < head.size()) {
      pos += 2;
      const std::size_t end = std::min(head.find("\r\n", pos), head.size());
      const std::string line = head.substr(pos, end - pos);
      pos = end;
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) Bad("header line " + Quoted(line));
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      value.erase(value.find_last_not_of(" \t") + 1);
      if (name == "content-length") {
        if (value.empty() || value.size() > 12 ||
            !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          Bad("Content-Length " + Quoted(value));
        }
        length = static_cast<std::size_t>(std::stoull(value));
      } else if (name == "transfer-encoding") {
        std::string v = value;
        std::transform(v.begin(), v.end(), v.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (v != "chunked") Bad("Transfer-Encoding " + Quoted(value));
        chunked = true;
      } else if (name == "content-type") {
        response.content_type = value;
      }
    }
    const std::size_t cap = request_.max_body_bytes;
    const auto too_large = [&] { Bad("a body over " + std::to_string(cap) + " bytes"); };
    if (length && *length > cap) too_large();
    // Read to the end of the body: its length, or the end of the connection (we asked for
    // "Connection: close").
    for (;;) {
      if (length && !chunked && body.size() >= *length) break;
      if (body.size() > cap + (chunked ? 64u << 10 : 0u)) too_large();
      if (!Receive(body)) break;
    }
    if (chunked) body = Dechunk(body, cap);
    if (length && !chunked) {
      if (body.size() < *length) {
        Bad("the body ends after " + std::to_string(body.size()) + " of " +
            std::to_string(*length) + " bytes");
      }
      body.resize(*length);
    }
    response.body = std::move(body);
    return response;
  }

  std::string Dechunk(const std::string& in, std::size_t cap) const {
    std::string out;
    std::size_t pos = 0;
    for (;;) {
      const std::size_t end = in.find("\r\n", pos);
      if (end == std::string::npos) Bad("a chunked body cut short");
      std::string size_text = in.substr(pos, std::min(in.find(';', pos), end) - pos);
      if (size_text.empty() || size_text.size() > 8 ||
          !std::all_of(size_text.begin(), size_text.end(),
                       [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
        Bad("chunk size " + Quoted(size_text));
      }
      const std::size_t size = std::stoul(size_text, nullptr, 16);
      pos = end + 2;
      if (size == 0) return out;
      if (in.size() < pos + size + 2 || in.compare(pos + size, 2, "\r\n") != 0) {
        Bad("a chunked body cut short");
      }
      out.append(in, pos, size);
      if (out.size() > cap) Bad("a body over " + std::to_string(cap) + " bytes");
      pos += size + 2;
    }
  }

  const HttpClientRequest& request_;
  const Clock::time_point deadline_;
  std::unique_ptr<Fd> fd_;
  gnutls_certificate_credentials_t credentials_ = nullptr;
  gnutls_session_t session_ = nullptr;
  std::string name_;
  bool answered_ = false;  // a byte of the answer came
};

}  // namespace

std::string HttpUrl::Text() const {
  if (!unix_socket.empty()) {
    return "unix:" + platform::PrintablePath(unix_socket.string());
  }
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return std::string(tls ? "https://" : "http://") + platform::Printable(h, 300) + ":" +
         std::to_string(port) + platform::Printable(path, 300);
}

std::string RedactedUrl(std::string_view url) {
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  // Everything up to the last '@' goes: a password may hold '@', '/' or ':' itself, so
  // where the authority ends cannot be told from a URL that carries one. (A path with an
  // '@' in it loses its start in the message too: no URL xferd asks for has one.)
  const std::size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  return std::string(url.substr(0, start)) + "***" + std::string(url.substr(at));
}

HttpUrl ParseHttpUrl(std::string_view text) {
  const std::string shown = Quoted(RedactedUrl(text));
  const auto bad = [&](const std::string& why) {
    return HttpError("URL " + shown + ": " + why,
                     "give it as http://HOST:PORT or https://HOST:PORT, e.g. "
                     "https://127.0.0.1:9742 or http://[::1]:9742");
  };
  HttpUrl url;
  std::string_view rest;
  if (text.rfind("http://", 0) == 0) {
    rest = text.substr(7);
  } else if (text.rfind("https://", 0) == 0) {
    url.tls = true;
    rest = text.substr(8);
  } else {
    throw bad("it must start with http:// or https://");
  }
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) url.path = std::string(rest.substr(slash));
  if (url.path.find_first_of("?# \t\r\n") != std::string::npos) {
    throw bad("the path may hold no query, fragment or spaces");
  }
  if (authority.find('@') != std::string_view::npos) {
    throw bad(
        "credentials do not belong in the URL (use --basic-auth.username and "
        "--basic-auth.password-file)");
  }
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) throw bad("an IPv6 address needs a closing ']'");
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw bad("unexpected text after the IPv6 address");
      port = after.substr(1);
    }
    in6_addr probe{};
    if (inet_pton(AF_INET6, url.host.c_str(), &probe) != 1) throw bad("not an IPv6 address");
  } else {
    const std::size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
    if (url.host.empty()) throw bad("no host");
    if (!std::all_of(url.host.begin(), url.host.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '-'; })) {
      throw bad("the host may hold only letters, digits, '.' and '-' (IPv6 in brackets)");
    }
  }
  url.port = url.tls ? 443 : 80;
  if (!port.empty() || authority.ends_with(":")) {
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoul(std::string(port)) == 0 || std::stoul(std::string(port)) > 65535) {
      throw bad("the port must be a number from 1 to 65535");
    }
    url.port = static_cast<std::uint16_t>(std::stoul(std::string(port)));
  }
  return url;
}

HttpClientResponse HttpGet(const HttpClientRequest& request) {
  if (request.basic_auth && request.basic_auth->first.find(':') != std::string::npos) {
    throw HttpError("basic auth user " + Quoted(request.basic_auth->first) + " holds a ':'",
                    "user names of basic auth cannot hold ':'");
  }
  Exchange exchange(request);
  return exchange.Run();
}

}  // namespace xferd::web
