#include "web/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "web/basic_auth.h"
#include "web/listen_address.h"

namespace xferd::web {
namespace {

constexpr const char* kRealm = "xferd";

// Checked against when the user is unknown, so that a wrong user name costs the same
// bcrypt time as a wrong password and names cannot be probed by timing.
constexpr const char* kDummyHash = "$2b$10$cj8KCBicPSusXR8GyesWZe/lMmWL70Qk59mImNDcQJDNxB.cfTzZ2";

std::string Sha256(const std::string& data) {
  std::array<unsigned char, 32> digest{};
  if (gnutls_hash_fast(GNUTLS_DIG_SHA256, data.data(), data.size(), digest.data()) < 0) {
    throw std::runtime_error("gnutls_hash_fast(SHA256) failed");
  }
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

struct BoundSocket {
  int fd = -1;
  int family = AF_INET;
  bool wildcard = false;
  std::uint16_t port = 0;
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

BoundSocket OpenListenSocket(const std::string& spec, const ListenAddress& address) {
  std::vector<sockaddr_storage> candidates;
  std::vector<socklen_t> lengths;
  BoundSocket out;
  if (address.host.empty()) {
    // Every interface: IPv6 dual stack when the host has IPv6, else IPv4.
    out.wildcard = true;
    sockaddr_storage ss{};
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(address.port);
    candidates.push_back(ss);
    lengths.push_back(sizeof(sockaddr_in6));
    sockaddr_storage s4{};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&s4);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(address.port);
    candidates.push_back(s4);
    lengths.push_back(sizeof(sockaddr_in));
  } else {
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
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      sockaddr_storage ss{};
      std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
      candidates.push_back(ss);
      lengths.push_back(ai->ai_addrlen);
    }
    freeaddrinfo(found);
  }

  int last_error = EAFNOSUPPORT;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const int family = candidates[i].ss_family;
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
    if (bind(fd, reinterpret_cast<const sockaddr*>(&candidates[i]), lengths[i]) != 0) {
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
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    out.fd = fd;
    out.family = family;
    out.port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return out;
  }
  ThrowBindError(spec, address.port, last_error);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  MHD_Daemon* daemon = nullptr;
  BoundSocket socket;
  std::string tls_cert, tls_key;  // MHD keeps pointers to these while it runs

  std::mutex log_mutex;
  bool starting = true;
  std::string startup_log;

  std::mutex users_mutex;
  std::shared_ptr<const std::map<std::string, std::string>> users;

  std::mutex bcrypt_mutex;
  std::mutex cache_mutex;
  std::set<std::string> verified;  // SHA-256(user, password, hash) of recent successes
  std::deque<std::string> verified_order;

  // Open connections, for the request deadline.
  struct Tracked {
    int fd;
    std::chrono::steady_clock::time_point since;
    bool cut = false;
  };
  std::mutex connections_mutex;
  std::unordered_map<MHD_Connection*, Tracked> connections;
  std::condition_variable reaper_wake;
  bool stopping = false;
  std::thread reaper;

  std::shared_ptr<const std::map<std::string, std::string>> Users() {
    std::lock_guard lock(users_mutex);
    return users;
  }

  enum class Verdict { kAllowed, kDenied, kBusy };

  // Successful logins are cached, so a scraper pays bcrypt once. Uncached checks run one
  // at a time (a try-lock, not a queue): a flood of wrong passwords can hold at most one
  // of the server threads, and cached scrapes keep being served on the others.
  Verdict Authenticate(const std::string& user, const std::string& password) {
    const auto current = Users();
    const auto it = current->find(user);
    const std::string& hash = it == current->end() ? std::string(kDummyHash) : it->second;
    const std::string key = Sha256(user + '\0' + password + '\0' + hash);
    {
      std::lock_guard lock(cache_mutex);
      if (it != current->end() && verified.count(key) != 0) return Verdict::kAllowed;
    }
    std::unique_lock bcrypt(bcrypt_mutex, std::try_to_lock);
    if (!bcrypt.owns_lock()) return Verdict::kBusy;
    const bool ok = VerifyPasswordHash(password, hash) && it != current->end();
    bcrypt.unlock();
    if (ok) {
      std::lock_guard lock(cache_mutex);
      if (verified.insert(key).second) {
        verified_order.push_back(key);
        while (verified_order.size() > std::max<std::size_t>(options.auth_cache_entries, 1)) {
          verified.erase(verified_order.front());
          verified_order.pop_front();
        }
      }
    }
    return ok ? Verdict::kAllowed : Verdict::kDenied;
  }

  void ReapSlowConnections() {
    std::unique_lock lock(connections_mutex);
    const auto tick = std::clamp<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(options.request_deadline) / 4,
        std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
    while (!stopping) {
      reaper_wake.wait_for(lock, tick);
      const auto now = std::chrono::steady_clock::now();
      for (auto& [connection, tracked] : connections) {
        if (!tracked.cut && now - tracked.since > options.request_deadline) {
          // The fd stays open until MHD's close notification, which takes this mutex
          // first, so this never touches a reused descriptor. MHD sees the shutdown as
          // the peer going away and cleans up in its own thread.
          shutdown(tracked.fd, SHUT_RDWR);
          tracked.cut = true;
          spdlog::debug("http: closed a connection that sent no complete request in {} s",
                        options.request_deadline.count());
        }
      }
    }
  }

  static void Log(void* cls, const char* format, va_list ap) {
    auto* self = static_cast<Impl*>(cls);
    char buffer[1024];
    std::vsnprintf(buffer, sizeof(buffer), format, ap);
    std::string line(buffer);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    std::lock_guard lock(self->log_mutex);
    if (self->starting) {
      if (!self->startup_log.empty()) self->startup_log += "; ";
      self->startup_log += line;
    } else {
      // Client mistakes (bad TLS handshakes, malformed requests) are not the operator's.
      spdlog::debug("http: {}", line);
    }
  }

  static void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard lock(self->connections_mutex);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const auto* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      if (info != nullptr) {
        self->connections[connection] = {info->connect_fd, std::chrono::steady_clock::now()};
      }
    } else {
      self->connections.erase(connection);
    }
  }

  static void OnCompleted(void* cls, MHD_Connection* connection, void** /*con_cls*/,
                          MHD_RequestTerminationCode /*code*/) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard lock(self->connections_mutex);
    const auto it = self->connections.find(connection);
    if (it != self->connections.end()) it->second.since = std::chrono::steady_clock::now();
  }

  // %HH decoding in place, except %00: a NUL would cut the path short in the C string the
  // handler gets ("/metrics%00.html" would read as "/metrics"), so it stays encoded.
  static std::size_t Unescape(void* /*cls*/, MHD_Connection* /*connection*/, char* s) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    char* out = s;
    for (const char* in = s; *in != '\0';) {
      if (in[0] == '%' && hex(in[1]) >= 0 && hex(in[2]) >= 0 && (in[1] != '0' || in[2] != '0')) {
        *out++ = static_cast<char>(hex(in[1]) * 16 + hex(in[2]));
        in += 3;
      } else {
        *out++ = *in++;
      }
    }
    *out = '\0';
    return static_cast<std::size_t>(out - s);
  }

  static MHD_Result Queue(MHD_Connection* connection, const HttpResponse& response,
                          bool auth_challenge) {
    MHD_Response* r = MHD_create_response_from_buffer(
        response.body.size(), const_cast<char*>(response.body.data()), MHD_RESPMEM_MUST_COPY);
    if (r == nullptr) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    for (const auto& [name, value] : response.headers) {
      MHD_add_response_header(r, name.c_str(), value.c_str());
    }
    const MHD_Result rc =
        auth_challenge ? MHD_queue_basic_auth_fail_response(connection, kRealm, r)
                       : MHD_queue_response(connection, static_cast<unsigned>(response.status), r);
    MHD_destroy_response(r);
    return rc;
  }

  // A GET or HEAD that announces no body: Content-Length absent or 0, no Transfer-Encoding.
  static bool BodilessRead(MHD_Connection* connection, const char* method) {
    if (method == nullptr ||
        (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0)) {
      return false;
    }
    if (MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Transfer-Encoding") != nullptr) {
      return false;
    }
    const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Content-Length");
    return length == nullptr || std::strcmp(length, "0") == 0;
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/, std::size_t* upload_size,
                              void** con_cls) {
    auto* self = static_cast<Impl*>(cls);
    // MHD calls this when the headers are in and again when the request is complete. An
    // answer queued at the first call makes MHD close the connection after it (it cannot
    // know what else follows), so a bodiless GET/HEAD is answered at the second call and
    // the connection stays open for the next scrape: a TCP connection per scrape costs
    // more than the scrape (docs/performance.md). Everything else is answered at once,
    // before any body, which MHD then discards, closing the connection.
    static char deferred;
    if (*con_cls == nullptr && BodilessRead(connection, method)) {
      *con_cls = &deferred;
      return MHD_YES;
    }
    if (*con_cls == &deferred && *upload_size != 0) {
      *upload_size = 0;  // a body despite the headers: not read, only skipped
      return MHD_YES;
    }
    try {
      HttpRequest request;
      request.method = method != nullptr ? method : "";
      request.path = url != nullptr ? url : "";

      const auto users = self->Users();
      if (!users->empty()) {
        char* password = nullptr;
        char* user = MHD_basic_auth_get_username_password(connection, &password);
        const Verdict verdict = user != nullptr && password != nullptr
                                    ? self->Authenticate(user, password)
                                    : Verdict::kDenied;
        if (user != nullptr) request.user = user;
        if (password != nullptr) {
          std::memset(password, 0, std::strlen(password));
          MHD_free(password);
        }
        if (user != nullptr) MHD_free(user);
        if (verdict == Verdict::kBusy) {
          HttpResponse busy{503,
                            "text/plain; charset=utf-8",
                            "Busy checking other credentials; retry\n",
                            {{"Retry-After", "1"}}};
          return Queue(connection, busy, false);
        }
        if (verdict == Verdict::kDenied) {
          HttpResponse denied{401, "text/plain; charset=utf-8", "Unauthorized\n", {}};
          return Queue(connection, denied, true);
        }
      }

      if (request.method != "GET" && request.method != "HEAD") {
        HttpResponse not_allowed{405,
                                 "text/plain; charset=utf-8",
                                 "Method Not Allowed: only GET and HEAD\n",
                                 {{"Allow", "GET, HEAD"}}};
        return Queue(connection, not_allowed, false);
      }
      // MHD leaves the body out of HEAD answers and keeps Content-Length.
      return Queue(connection, self->handler(request), false);
    } catch (const std::exception& e) {
      spdlog::error("http: handler failed for {}: {}", url != nullptr ? url : "?", e.what());
      HttpResponse failed{500, "text/plain; charset=utf-8", "Internal Server Error\n", {}};
      return Queue(connection, failed, false);
    }
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>()) {
  // Create spdlog's registry here, before the server's threads can race to create it on
  // their first log line (it is built lazily inside the shared library).
  spdlog::default_logger_raw();
  Impl& s = *impl_;
  s.options = std::move(options);
  s.handler = std::move(handler);
  s.users =
      std::make_shared<const std::map<std::string, std::string>>(s.options.web.basic_auth_users);
  const WebConfig& web = s.options.web;

  const bool tls = web.TlsEnabled();
  if (tls) {
    ValidateTlsMaterial(*web.tls);
    // MHD keeps pointers to these while it runs: copies owned by the server.
    s.tls_cert = web.tls->cert_pem;
    s.tls_key = web.tls->key_pem;
  }
  for (const auto& [user, hash] : web.basic_auth_users) {
    if (const auto problem = BcryptHashProblem(hash)) {
      throw HttpError("web config: basic_auth_users." + user + " " + *problem, kBcryptFix);
    }
  }

  const ListenAddress address = ParseListenAddress(s.options.listen_address);
  s.socket = OpenListenSocket("'" + s.options.listen_address + "'", address);

  // poll, not epoll: with MHD 0.9.75's edge-triggered epoll a client that sends part of a
  // request and closes is noticed only at the idle timeout (measured: 20 such connections
  // held 20 descriptors for 10 s); with poll they are released at once.
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
  if (tls) flags |= MHD_USE_TLS;
  if (s.socket.family == AF_INET6) flags |= MHD_USE_IPv6;

  std::vector<MHD_OptionItem> items;
  auto add = [&items](MHD_OPTION option, intptr_t value, void* ptr = nullptr) {
    items.push_back(MHD_OptionItem{option, value, ptr});
  };
  add(MHD_OPTION_LISTEN_SOCKET, s.socket.fd);
  add(MHD_OPTION_CONNECTION_LIMIT, std::max(1u, s.options.connection_limit));
  add(MHD_OPTION_CONNECTION_TIMEOUT, static_cast<intptr_t>(s.options.idle_timeout.count()));
  add(MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(s.options.connection_memory_bytes));
  if (s.options.threads > 1) add(MHD_OPTION_THREAD_POOL_SIZE, s.options.threads);
  add(MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Impl::OnConnection), &s);
  add(MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&Impl::OnCompleted), &s);
  add(MHD_OPTION_UNESCAPE_CALLBACK, reinterpret_cast<intptr_t>(&Impl::Unescape), &s);
  if (tls) {
    add(MHD_OPTION_HTTPS_MEM_CERT, 0, s.tls_cert.data());
    add(MHD_OPTION_HTTPS_MEM_KEY, 0, s.tls_key.data());
    // TLS 1.2 and 1.3 only, as exporter-toolkit's default minimum.
    add(MHD_OPTION_HTTPS_PRIORITIES, 0,
        const_cast<char*>("NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"));
  }
  add(MHD_OPTION_END, 0);

  s.daemon =
      MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::OnRequest, &s, MHD_OPTION_EXTERNAL_LOGGER,
                       &Impl::Log, &s, MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  if (s.daemon == nullptr) {
    // Not closing s.socket.fd: MHD closes a given listen socket when it fails (checked
    // with 0.9.75), and a second close could hit a descriptor another thread just opened.
    std::lock_guard lock(s.log_mutex);
    throw HttpError(
        "cannot start the HTTP server on " + s.options.listen_address + ": " +
            (s.startup_log.empty() ? std::string("libmicrohttpd gave no reason") : s.startup_log),
        "check the listen address and the web config file");
  }
  {
    std::lock_guard lock(s.log_mutex);
    s.starting = false;
  }
  s.reaper = std::thread([&s] { s.ReapSlowConnections(); });
}

HttpServer::~HttpServer() {
  {
    std::lock_guard lock(impl_->connections_mutex);
    impl_->stopping = true;
  }
  impl_->reaper_wake.notify_all();
  if (impl_->reaper.joinable()) impl_->reaper.join();
  // Closes the listen socket too.
  if (impl_->daemon != nullptr) MHD_stop_daemon(impl_->daemon);
}

std::uint16_t HttpServer::port() const {
  return impl_->socket.port;
}

bool HttpServer::tls() const {
  return impl_->options.web.TlsEnabled();
}

std::string HttpServer::url() const {
  const ListenAddress a = ParseListenAddress(impl_->options.listen_address);
  std::string host = a.host;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return std::string(tls() ? "https" : "http") + "://" + host + ":" + std::to_string(port());
}

void HttpServer::SetBasicAuthUsers(std::map<std::string, std::string> users) {
  {
    std::lock_guard lock(impl_->users_mutex);
    impl_->users = std::make_shared<const std::map<std::string, std::string>>(std::move(users));
  }
  std::lock_guard lock(impl_->cache_mutex);
  impl_->verified.clear();
  impl_->verified_order.clear();
}

}  // namespace xferd::web
