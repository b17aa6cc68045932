// The HTTP(S) listener behind /metrics: libmicrohttpd with GnuTLS, basic auth with bcrypt.
//
// prometheus-cpp's Exposer is not used: Debian 12's civetweb under it crashes on the first
// TLS connection. This server only routes bytes; what each path answers is the handler's
// business (exporter/routes.h builds the exporter's one).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "web/http_error.h"
#include "web/password_verifier.h"
#include "web/web_config.h"

namespace xferd::web {

// One request as the handler sees it. Only GET and HEAD reach the handler; the server
// answers every other method with 405 itself.
struct HttpRequest {
  std::string method;           // "GET" or "HEAD"
  std::string path;             // as sent (never percent-decoded), without the query string
  std::string user;             // the authenticated user; empty when auth is off
  std::string accept_encoding;  // the Accept-Encoding header as sent; empty when absent
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  // A body shared with other answers (a document rendered once and read by many clients at
  // once), sent before `body` without a copy and kept until the last answer is sent: the
  // answer is *shared_body + body.
  std::shared_ptr<const std::string> shared_body;
};

// What the server turned away, by why (xferd_http_refusals_total{reason}); docs/http.md.
enum class Refusal {
  kAddressLimit,      // a connection past the most one client address may hold: closed at accept
  kConnectionLimit,   // a connection while the server is full, from the address holding most
  kLoginRateLimited,  // a login from an address that failed too often, its queue full: 429
  kLoginBusy,         // a login while the checks are full, or one that waited too long: 503
};
inline constexpr std::array<Refusal, 4> kAllRefusals = {
    Refusal::kAddressLimit, Refusal::kConnectionLimit, Refusal::kLoginRateLimited,
    Refusal::kLoginBusy};
// "address_limit", "connection_limit", "login_rate_limited", "login_busy".
std::string_view ToString(Refusal refusal);

// Refusals since the server started, per kind (indexed by Refusal).
struct HttpRefusals {
  std::array<std::uint64_t, kAllRefusals.size()> count{};
  std::uint64_t Of(Refusal r) const { return count[static_cast<std::size_t>(r)]; }
};

// How the server shares itself out; docs/http.md explains each limit and what happens at it.
struct HttpServerOptions {
  // node_exporter's spelling: ":9742" (every interface), "127.0.0.1:0", "[::1]:9742",
  // "localhost:9742". Port 0 picks a free port; port() tells which.
  std::string listen_address = ":9742";
  // Instead of listen_address: a unix-domain socket at this path, made with this mode
  // (web/unix_socket.h): the health socket, which only its owner and group may connect to.
  std::filesystem::path unix_socket;
  mode_t unix_socket_mode = 0660;
  WebConfig web;  // TLS when cert and key are set; basic auth when users are set
  // Connections held open at once. Beyond this a new connection from the client address
  // that holds the most is closed at once; one from any other address closes the oldest
  // connection of that address that is not being answered (still opening, or idle between
  // requests). Idle sockets from one address never keep another's scrape out.
  unsigned connection_limit = 1024;
  // Over TLS each connection holds ~40 KB of GnuTLS state, mid-handshake or idle alike
  // (docs/http.md): at most this many in all, so that a flood of TLS connections keeps the
  // daemon within its 32 MiB...
  unsigned tls_connection_limit = 256;
  // ...and this many per client address: a new one past it is closed as it is accepted,
  // before any TLS work (each handshake costs the server a key exchange and a signature),
  // so one address's flood of half-finished handshakes costs at most this many per header
  // timeout, and holds at most half the TLS room. A scraper uses one (kept alive); this
  // leaves room for a burst of 100 behind one address.
  unsigned tls_connections_per_address = 128;
  // A connection must send a whole request (its TLS handshake included) within this long
  // of opening, or it is closed.
  std::chrono::seconds header_timeout{5};
  // A connection with no traffic for this long is closed.
  std::chrono::seconds idle_timeout{10};
  // A request must arrive in full, and its response leave, within this long from the
  // connection's start or its previous request: a client trickling a byte at a time is cut
  // off (the idle timeout alone would let it hold the connection for hours).
  std::chrono::seconds request_deadline{30};
  unsigned threads = 2;
  // Per-connection buffer for the request line and headers; larger requests get 431.
  std::size_t connection_memory_bytes = 32 * 1024;
  // Logins that are not cached: how many bcrypts run at once, how many wait, for how long
  // (web/password_verifier.h).
  PasswordVerifierOptions auth;
  // Refusals are said in the log at most once in this long: the first at once, the rest
  // summed up at the end of the period (a flood never floods the journal).
  std::chrono::seconds refusal_log_period{60};
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds and starts serving on background threads. Throws HttpError.
  HttpServer(HttpServerOptions options, Handler handler);
  // Stops accepting, finishes or drops open connections, joins the threads.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;
  bool tls() const;
  // "http://127.0.0.1:PORT" or "https://...", for logs; the wildcard address shows as
  // the loopback one; "unix:PATH" for a unix-domain socket.
  std::string url() const;

  // What the server refused since it started (xferd_http_refusals_total).
  HttpRefusals Refusals() const;

  // Replace the basic-auth users (a reloaded web config); an empty map turns auth off.
  // TLS settings cannot change without a restart of the server.
  void SetBasicAuthUsers(std::map<std::string, std::string> users);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xferd::web
