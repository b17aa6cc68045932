// A small HTTP(S) client: one GET to an xferd daemon, for `xferd health`. Every step is held
// to one deadline (resolving a numeric address, connecting, the TLS handshake, the request,
// the answer), the answer to a size cap, and TLS to a verified certificate that names the
// host; whatever the other end sends, it returns an answer or throws HttpError naming the
// cause and the fix, and never hangs past the deadline on a socket.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "web/http_error.h"

namespace xferd::web {

// Where to send it: "http://127.0.0.1:9742/api/v1/status", "https://[::1]:9742/...", or
// over a unix-domain socket (the daemon's health socket): "unix:/var/lib/xferd/health.sock".
struct HttpUrl {
  bool tls = false;
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 0;
  std::filesystem::path unix_socket;  // set: this socket, not host and port (never TLS)
  std::string path = "/";
  std::string Text() const;  // back as a URL, for messages
};
// Throws HttpError for anything but http:// or https://, a host, an optional port (default
// 80 / 443) and an optional absolute path without query or fragment. Credentials in it
// ("http://user:password@host") are refused, and the message never shows them.
HttpUrl ParseHttpUrl(std::string_view url);

// `url` as a message may show it: credentials before an '@' in its authority (with a
// scheme or without) become "***" ("http://***@127.0.0.1:9742"). Every message that quotes a
// URL as given quotes this: a health check's line ends up in node-problem-detector's events,
// Nagios and syslog.
std::string RedactedUrl(std::string_view url);

struct HttpClientRequest {
  HttpUrl url;
  std::chrono::milliseconds timeout{5000};  // the whole exchange
  std::size_t max_body_bytes = 16u << 20;
  // https: the certificates to trust (PEM); empty = the system's trust store. The server's
  // certificate must chain to one of them and name `server_name` (empty: the URL's host).
  std::filesystem::path ca_file;
  std::string server_name;
  std::optional<std::pair<std::string, std::string>> basic_auth;  // user, password
};

struct HttpClientResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

// The daemon could not be connected to at all (refused, no such socket, no permission, no
// route): nothing was sent, so another way to it may be tried.
class HttpConnectError : public HttpError {
 public:
  using HttpError::HttpError;
};

// Throws HttpConnectError when no connection is made, HttpError for the rest: the deadline,
// the TLS handshake or the certificate check failed, the daemon closed the connection
// unanswered (its limit per client address?), the answer is not HTTP, too large or cut
// short.
HttpClientResponse HttpGet(const HttpClientRequest& request);

}  // namespace xferd::web
