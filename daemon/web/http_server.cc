#include "web/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "platform/printable.h"
#include "web/basic_auth.h"
#include "web/listen_address.h"
#include "web/listen_socket.h"
#include "web/paths.h"
#include "web/unix_socket.h"

namespace xferd::web {
namespace {

constexpr const char* kRealm = "xferd";

using Clock = std::chrono::steady_clock;

// The client address a connection counts against: the IPv4 address, or the /64 of an IPv6
// one (a single host usually holds a whole /64). An IPv4-mapped IPv6 address is IPv4.
std::string AddressKey(const sockaddr* address) {
  if (address == nullptr) return "?";
  // The health socket's clients: the socket file's permissions chose them.
  if (address->sa_family == AF_UNIX) return "local";
  char text[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
    return text;
  }
  if (address->sa_family == AF_INET6) {
    in6_addr a = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
      return text;
    }
    std::memset(&a.s6_addr[8], 0, 8);
    inet_ntop(AF_INET6, &a, text, sizeof text);
    return std::string(text) + "/64";
  }
  return "?";
}

// The descriptors the connections need, with room for the rest of the process: the soft
// limit is raised toward the hard one (systemd's default soft limit is 1024). Returns the
// connections that fit.
unsigned FitConnectionsToFileLimit(unsigned wanted) {
  constexpr rlim_t kOthers = 64;  // state, textfile, sysfs, logs, the listen socket, ITC pipes
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return wanted;
  const rlim_t needed = wanted + kOthers;
  if (limit.rlim_cur < needed) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? needed : std::min(needed, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return wanted;
  return static_cast<unsigned>(limit.rlim_cur > 2 * kOthers ? limit.rlim_cur - kOthers
                                                            : limit.rlim_cur / 2);
}

// The answer to a login that is not let through: 401 asks for credentials again; 503 (the
// checks are busy) and 429 (this address failed too often) say when to retry.
HttpResponse LoginRefusal(LoginVerdict verdict) {
  constexpr const char* kText = "text/plain; charset=utf-8";
  switch (verdict) {
    case LoginVerdict::kBusy:
      return {
          503, kText, "Busy checking other credentials; retry\n", {{"Retry-After", "1"}}, nullptr};
    case LoginVerdict::kRateLimited:
      return {429,
              kText,
              "Too many failed logins from this address; retry later\n",
              {{"Retry-After", "10"}},
              nullptr};
    default: return {401, kText, "Unauthorized\n", {}, nullptr};
  }
}

}  // namespace

std::string_view ToString(Refusal refusal) {
  switch (refusal) {
    case Refusal::kAddressLimit: return "address_limit";
    case Refusal::kConnectionLimit: return "connection_limit";
    case Refusal::kLoginRateLimited: return "login_rate_limited";
    case Refusal::kLoginBusy: return "login_busy";
  }
  return "address_limit";
}

namespace {

// What each refusal is, for the log.
const char* Said(Refusal refusal) {
  switch (refusal) {
    case Refusal::kAddressLimit: return "connections past the most one client address may hold";
    case Refusal::kConnectionLimit: return "connections while the server was full";
    case Refusal::kLoginRateLimited: return "logins from an address that failed too often (429)";
    case Refusal::kLoginBusy: return "logins while the password checks were full (503)";
  }
  return "";
}

// Refusals counted for /metrics and said in the log at most once a period: the first of a
// quiet spell at once, the rest summed up at the end of the period, with the addresses that
// were refused most.
class RefusalLog {
 public:
  explicit RefusalLog(std::chrono::seconds period) : period_(period) {}

  void Count(Refusal refusal, const std::string& address, const std::string& detail) {
    const auto i = static_cast<std::size_t>(refusal);
    std::lock_guard lock(mutex_);
    ++total_.count[i];
    if (!in_period_) {
      in_period_ = true;
      period_start_ = Clock::now();
      spdlog::warn(
          "http: refused {} from {}: {}; more refusals are summed up every {} s "
          "(xferd_http_refusals_total{{reason=\"{}\"}})",
          refusal == Refusal::kLoginRateLimited || refusal == Refusal::kLoginBusy ? "a login"
                                                                                  : "a connection",
          platform::Printable(address, 60), detail, period_.count(), ToString(refusal));
      return;
    }
    ++window_[i];
    if (by_address_[i].size() < kAddressesKept || by_address_[i].count(address) != 0) {
      ++by_address_[i][address];
    }
  }

  // At the end of a period: the summary of what came after its first line, if anything.
  void Tick() {
    std::lock_guard lock(mutex_);
    if (!in_period_ || Clock::now() - period_start_ < period_) return;
    std::string parts;
    std::uint64_t all = 0;
    for (Refusal r : kAllRefusals) {
      const auto i = static_cast<std::size_t>(r);
      if (window_[i] == 0) continue;
      all += window_[i];
      std::string most;
      std::uint64_t most_count = 0;
      for (const auto& [address, n] : by_address_[i]) {
        if (n > most_count) most = address, most_count = n;
      }
      parts += fmt::format("{}{} {} (most from {}: {})", parts.empty() ? "" : "; ", window_[i],
                           Said(r), platform::Printable(most, 60), most_count);
      window_[i] = 0;
      by_address_[i].clear();
    }
    if (all == 0) {
      in_period_ = false;  // quiet: the next refusal is said at once
      return;
    }
    spdlog::warn(
        "http: refused {} more in the last {} s: {}", all,
        std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - period_start_).count(),
        parts);
    period_start_ = Clock::now();
  }

  HttpRefusals Total() const {
    std::lock_guard lock(mutex_);
    return total_;
  }

 private:
  static constexpr std::size_t kAddressesKept = 256;
  const std::chrono::seconds period_;
  mutable std::mutex mutex_;
  HttpRefusals total_;
  std::array<std::uint64_t, kAllRefusals.size()> window_{};
  std::array<std::map<std::string, std::uint64_t>, kAllRefusals.size()> by_address_;
  bool in_period_ = false;
  Clock::time_point period_start_;
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  MHD_Daemon* daemon = nullptr;
  ListenSocket socket;
  std::string tls_cert, tls_key;  // MHD keeps pointers to these while it runs
  std::unique_ptr<PasswordVerifier> verifier;
  std::atomic<bool> auth_on{false};
  std::unique_ptr<RefusalLog> refusals;
  unsigned per_address_limit = 0;  // connections one client address may hold

  std::mutex log_mutex;
  bool starting = true;
  std::string startup_log;

  // What the server knows of each open connection, for the limits.
  enum class Phase {
    kOpening,  // no whole request yet (TLS handshake included)
    kServing,  // a request is in: being answered (or waiting for its login check)
    kIdle,     // answered, waiting for the next request on the same connection
  };
  struct Tracked {
    int fd;
    std::string address;
    Clock::time_point opened, since;  // since: opened, or the previous request's end
    // opened + the header timeout, spread over 0.75..1.25 of it: sockets opened together
    // (one client's flood) do not all time out, and reconnect, in the same instant.
    Clock::time_point header_deadline;
    Phase phase = Phase::kOpening;
    bool cut = false;  // shut down by us; gone once MHD reports it closed
  };
  std::mutex connections_mutex;
  std::unordered_map<MHD_Connection*, Tracked> connections;
  std::unordered_map<std::string, unsigned> live_per_address;  // not cut
  // Let in by AcceptPolicy, not yet started (OnConnection): when each was let in.
  std::unordered_map<std::string, std::deque<Clock::time_point>> starting_per_address;
  std::minstd_rand random{std::random_device{}()};  // under connections_mutex
  std::uniform_real_distribution<double> spread{0.0, 1.0};
  unsigned live = 0;
  unsigned peak_live = 0;  // since memory was last handed back (ReturnMemoryAfterAFlood)
  // A flood's memory was handed back while some of its connections were still open (slow
  // readers holding old documents): handed back again once the last one is gone.
  bool flood_tail = false;
  std::condition_variable reaper_wake;
  bool stopping = false;
  std::thread reaper;

  // One request's progress across MHD's calls of OnRequest.
  struct RequestContext {
    bool bodiless = false;       // a GET/HEAD without a body: answered once it is all in
    bool waiting_login = false;  // parked while the verifier checks the password
    std::optional<LoginVerdict> verdict;
    std::string user;
  };

  // Shuts a connection down; MHD sees the peer gone and closes it in its own thread. The
  // descriptor stays open until MHD's close notification, which takes connections_mutex
  // first, so this never touches a reused descriptor.
  void CutLocked(Tracked& tracked) {
    if (tracked.cut) return;
    shutdown(tracked.fd, SHUT_RDWR);
    tracked.cut = true;
    --live;
    if (--live_per_address[tracked.address] == 0) live_per_address.erase(tracked.address);
  }

  // Over the limit, a new connection from the address that holds the most is closed at
  // once, before anything is read from it (no TLS handshake is spent on it): an address
  // flooding the server with idle sockets keeps what it holds until their header timeout
  // and gets no more. One from any other address makes room: the oldest connection of the
  // address holding the most that is not being answered is closed. So one address never
  // takes the slots of another, and a scraper (its request is in the socket when the
  // connection is accepted) is answered at once.
  void EnforceLimitLocked(Tracked& newcomer) {
    if (live <= options.connection_limit) return;
    unsigned most = 0;
    std::string biggest;
    for (const auto& [address, count] : live_per_address) {
      if (count > most) most = count, biggest = address;
    }
    if (live_per_address[newcomer.address] >= most) {
      CutLocked(newcomer);
      refusals->Count(Refusal::kConnectionLimit, newcomer.address,
                      fmt::format("{} connections are open, the most the server holds, and "
                                  "this address holds the most of them ({})",
                                  options.connection_limit, most));
      return;
    }
    Tracked* victim = nullptr;
    for (auto& [connection, tracked] : connections) {
      if (tracked.cut || tracked.phase == Phase::kServing || tracked.address != biggest) continue;
      if (victim == nullptr || tracked.since < victim->since) victim = &tracked;
    }
    if (victim == nullptr) return;  // all being answered: MHD's own limit holds the rest
    CutLocked(*victim);
    spdlog::debug("http: {} connections open: closed an idle one from {} for {}",
                  options.connection_limit, platform::Printable(biggest),
                  platform::Printable(newcomer.address));
  }

  void SetPhase(MHD_Connection* connection, Phase phase) {
    std::lock_guard lock(connections_mutex);
    const auto it = connections.find(connection);
    if (it == connections.end()) return;
    it->second.phase = phase;
    if (phase == Phase::kIdle) it->second.since = Clock::now();
  }

  // Once a flood of connections is over (most of its peak gone), the memory their TLS
  // sessions and buffers held goes back to the system: glibc keeps freed memory for reuse,
  // and a TLS flood left RSS at its peak for good (13 MB -> 90 MB) without this.
  void ReturnMemoryAfterAFloodLocked(std::unique_lock<std::mutex>& lock) {
    constexpr unsigned kFlood = 32;
    const bool tail_gone = flood_tail && live == 0;
    if (!tail_gone && (peak_live < kFlood || live > peak_live / 4)) return;
    const unsigned peak = peak_live;  // never below `live`: raised with every connection
    flood_tail = !tail_gone && live > 0;
    peak_live = live;
    lock.unlock();
    malloc_trim(0);
    lock.lock();
    spdlog::debug("http: {} connections open, down from {}: freed memory handed back", live, peak);
  }

  void ReapSlowConnections() {
    std::unique_lock lock(connections_mutex);
    const auto shortest = std::min(options.header_timeout, options.request_deadline);
    const auto tick = std::clamp<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(shortest) / 4,
        std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
    while (!stopping) {
      reaper_wake.wait_for(lock, tick);
      ReturnMemoryAfterAFloodLocked(lock);
      refusals->Tick();
      const auto now = Clock::now();
      for (auto it = starting_per_address.begin(); it != starting_per_address.end();) {
        while (!it->second.empty() && now - it->second.front() > std::chrono::seconds(1)) {
          it->second.pop_front();
        }
        it = it->second.empty() ? starting_per_address.erase(it) : std::next(it);
      }
      for (auto& [connection, tracked] : connections) {
        if (tracked.cut) continue;
        if (tracked.phase == Phase::kOpening && now > tracked.header_deadline) {
          CutLocked(tracked);
          spdlog::debug("http: closed a connection that sent no whole request in {} s",
                        options.header_timeout.count());
        } else if (now - tracked.since > options.request_deadline) {
          CutLocked(tracked);
          spdlog::debug("http: closed a connection whose request took over {} s",
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
    // MHD quotes what clients sent in some of its messages.
    line = platform::Printable(line, 300);
    std::lock_guard lock(self->log_mutex);
    if (self->starting) {
      if (!self->startup_log.empty()) self->startup_log += "; ";
      self->startup_log += line;
    } else {
      // Client mistakes (bad TLS handshakes, malformed requests) are not the operator's.
      spdlog::debug("http: {}", line);
    }
  }

  // Called by libmicrohttpd for each connection it accepts, before any memory or TLS session
  // is spent on it: an address at its limit gets no more (counted and said, where MHD's own
  // per-IP limit closed them unseen).
  static MHD_Result AcceptPolicy(void* cls, const sockaddr* address, socklen_t /*length*/) {
    auto* self = static_cast<Impl*>(cls);
    const std::string key = AddressKey(address);
    std::lock_guard lock(self->connections_mutex);
    const auto it = self->live_per_address.find(key);
    const auto now = Clock::now();
    // Let in but not started yet (MHD's threads accept at once): counted, or two threads
    // could both let in the one that fills the address. One MHD let in but dropped before
    // it started (out of memory, its own limit) is forgotten after a second.
    auto& starting = self->starting_per_address[key];
    while (!starting.empty() && now - starting.front() > std::chrono::seconds(1)) {
      starting.pop_front();
    }
    const unsigned held = (it == self->live_per_address.end() ? 0 : it->second) +
                          static_cast<unsigned>(starting.size());
    if (held < self->per_address_limit) {
      starting.push_back(now);
      return MHD_YES;
    }
    if (starting.empty()) self->starting_per_address.erase(key);
    self->refusals->Count(
        Refusal::kAddressLimit, key,
        fmt::format("it holds {} connections, the most one client address may hold{}; closed "
                    "before any {}work",
                    held, self->options.web.TlsEnabled() ? " over TLS" : "",
                    self->options.web.TlsEnabled() ? "TLS " : ""));
    return MHD_NO;
  }

  static void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard lock(self->connections_mutex);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const auto* fd = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      const auto* peer = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      if (fd == nullptr) return;
      const auto now = Clock::now();
      Tracked tracked{fd->connect_fd, AddressKey(peer != nullptr ? peer->client_addr : nullptr),
                      now, now, now};
      const auto spread = std::chrono::duration_cast<Clock::duration>(
          self->options.header_timeout * (0.75 + 0.5 * self->spread(self->random)));
      tracked.header_deadline = now + spread;
      ++self->live;
      self->peak_live = std::max(self->peak_live, self->live);
      ++self->live_per_address[tracked.address];
      if (const auto s = self->starting_per_address.find(tracked.address);
          s != self->starting_per_address.end()) {
        s->second.pop_front();
        if (s->second.empty()) self->starting_per_address.erase(s);
      }
      Tracked& added = self->connections[connection] = std::move(tracked);
      self->EnforceLimitLocked(added);
    } else {
      const auto it = self->connections.find(connection);
      if (it == self->connections.end()) return;
      if (!it->second.cut) {
        --self->live;
        if (--self->live_per_address[it->second.address] == 0) {
          self->live_per_address.erase(it->second.address);
        }
      }
      self->connections.erase(it);
    }
  }

  static void OnCompleted(void* cls, MHD_Connection* connection, void** con_cls,
                          MHD_RequestTerminationCode /*code*/) {
    auto* self = static_cast<Impl*>(cls);
    delete static_cast<RequestContext*>(*con_cls);
    *con_cls = nullptr;
    self->SetPhase(connection, Phase::kIdle);
  }

  // libmicrohttpd's hook for decoding the path and the query: nothing is decoded, so the
  // handler matches the path as sent (web/paths.h). Its default decodes %2f, %73 and %00
  // alike: "/api%2fv1%2fstatus" answered as the status API.
  static std::size_t Unescape(void* /*cls*/, MHD_Connection* /*connection*/, char* s) {
    return std::strlen(s);
  }

  static MHD_Result Queue(MHD_Connection* connection, const HttpResponse& response,
                          bool auth_challenge) {
    MHD_Response* r = nullptr;
    if (response.shared_body && response.body.empty()) {
      // No copy: the response holds a reference until MHD has sent it to its last client.
      auto* held = new std::shared_ptr<const std::string>(response.shared_body);
      r = MHD_create_response_from_buffer_with_free_callback_cls(
          (*held)->size(), const_cast<char*>((*held)->data()),
          [](void* cls) { delete static_cast<std::shared_ptr<const std::string>*>(cls); }, held);
      if (r == nullptr) delete held;
    } else if (response.shared_body) {
      // The shared part by reference, the rest (a scrape's process_* lines) owned: read out
      // piece by piece as the socket takes it, never joined into one copy.
      struct Parts {
        std::shared_ptr<const std::string> head;
        std::string tail;
      };
      auto* parts = new Parts{response.shared_body, response.body};
      const auto read = [](void* cls, std::uint64_t pos, char* buf, std::size_t max) -> ssize_t {
        const auto* p = static_cast<const Parts*>(cls);
        const std::size_t head = p->head->size();
        const std::size_t total = head + p->tail.size();
        if (pos >= total) return MHD_CONTENT_READER_END_OF_STREAM;
        std::size_t n = std::min<std::size_t>(max, total - pos);
        if (pos < head) {
          n = std::min<std::size_t>(n, head - pos);
          std::memcpy(buf, p->head->data() + pos, n);
        } else {
          std::memcpy(buf, p->tail.data() + (pos - head), n);
        }
        return static_cast<ssize_t>(n);
      };
      r = MHD_create_response_from_callback(parts->head->size() + parts->tail.size(), 16 * 1024,
                                            read, parts,
                                            [](void* cls) { delete static_cast<Parts*>(cls); });
      if (r == nullptr) delete parts;
    } else {
      r = MHD_create_response_from_buffer(
          response.body.size(), const_cast<char*>(response.body.data()), MHD_RESPMEM_MUST_COPY);
    }
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

  // The login of this request: from the cache at once, or (only for a bodiless GET/HEAD,
  // the one kind of request that is served) from the verifier, parking the connection
  // until it answers. nullopt: parked. The credentials are decoded here from the header as
  // sent (ParseBasicAuthorization), never through libmicrohttpd's decoder: it hands them out
  // as C strings, cut at a NUL, so "bob:bobpw\0zzz" would have been the password "bobpw".
  std::optional<LoginVerdict> CheckLogin(MHD_Connection* connection, RequestContext& context) {
    const char* value = nullptr;
    std::size_t value_size = 0;
    constexpr std::string_view kHeader = MHD_HTTP_HEADER_AUTHORIZATION;
    if (MHD_lookup_connection_value_n(connection, MHD_HEADER_KIND, kHeader.data(), kHeader.size(),
                                      &value, &value_size) != MHD_YES ||
        value == nullptr) {
      return LoginVerdict::kDenied;
    }
    std::optional<BasicCredentials> credentials =
        ParseBasicAuthorization(std::string_view(value, value_size));
    if (!credentials) return LoginVerdict::kDenied;
    // Scrubbed on every way out: the password is a secret, the decoded copy ours.
    struct Scrub {
      std::string& secret;
      ~Scrub() { std::fill(secret.begin(), secret.end(), '\0'); }
    } scrub{credentials->password};
    context.user = credentials->user;
    if (!context.bodiless) {
      // Not a request xferd serves (405 or 404 follows): the cache may let it through to
      // be told so; it never costs a bcrypt.
      return verifier->CheckCached(credentials->user, credentials->password)
          .value_or(LoginVerdict::kDenied);
    }
    const auto* peer = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return verifier->Check(
        AddressKey(peer != nullptr ? peer->client_addr : nullptr), credentials->user,
        credentials->password,
        [&] {
          MHD_suspend_connection(connection);
          context.waiting_login = true;
        },
        [connection, &context](LoginVerdict answer) {
          context.verdict = answer;
          MHD_resume_connection(connection);
        });
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/, std::size_t* upload_size,
                              void** con_cls) {
    auto* self = static_cast<Impl*>(cls);
    auto* context = static_cast<RequestContext*>(*con_cls);
    // MHD calls this when the headers are in and again when the request is complete. An
    // answer queued at the first call makes MHD close the connection after it (it cannot
    // know what else follows), so a bodiless GET/HEAD is answered at the second call and
    // the connection stays open for the next scrape: a TCP connection per scrape costs
    // more than the scrape (docs/performance.md). Everything else is answered at once,
    // before any body, which MHD then discards, closing the connection.
    if (context == nullptr) {
      self->SetPhase(connection, Phase::kServing);
      context = new RequestContext;  // freed by OnCompleted
      *con_cls = context;
      context->bodiless = BodilessRead(connection, method);
      if (context->bodiless) return MHD_YES;
    } else if (context->bodiless && *upload_size != 0) {
      *upload_size = 0;  // a body despite the headers: not read, only skipped
      return MHD_YES;
    }
    try {
      HttpRequest request;
      request.method = method != nullptr ? method : "";
      request.path = url != nullptr ? url : "";
      if (request.path.size() > kMaxPathBytes) {
        // No path served is this long (the telemetry path is held to the same limit).
        HttpResponse too_long{414, "text/plain; charset=utf-8", "URI Too Long\n", {}, nullptr};
        return Queue(connection, too_long, false);
      }

      if (self->auth_on) {
        if (!context->waiting_login) {
          // Not assigned when parked: the verifier may have answered (from its thread)
          // before this call returns.
          const std::optional<LoginVerdict> verdict = self->CheckLogin(connection, *context);
          if (!verdict) return MHD_YES;  // parked; MHD calls again once resumed
          context->verdict = verdict;
        }
        if (!context->verdict) return MHD_YES;  // not answered yet (never so once resumed)
        request.user = context->user;
        switch (*context->verdict) {
          case LoginVerdict::kAllowed: break;
          case LoginVerdict::kBusy:
          case LoginVerdict::kRateLimited:
            self->CountLoginRefusal(connection, *context->verdict);
            [[fallthrough]];
          case LoginVerdict::kDenied:
            return Queue(connection, LoginRefusal(*context->verdict),
                         *context->verdict == LoginVerdict::kDenied);
        }
      }

      if (request.method != "GET" && request.method != "HEAD") {
        HttpResponse not_allowed{405,
                                 "text/plain; charset=utf-8",
                                 "Method Not Allowed: only GET and HEAD\n",
                                 {{"Allow", "GET, HEAD"}},
                                 nullptr};
        return Queue(connection, not_allowed, false);
      }
      if (const char* encoding =
              MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Accept-Encoding")) {
        request.accept_encoding = encoding;
      }
      // MHD leaves the body out of HEAD answers and keeps Content-Length.
      return Queue(connection, self->handler(request), false);
    } catch (const std::exception& e) {
      spdlog::error("http: handler failed for {}: {}",
                    platform::Printable(url != nullptr ? url : "?"), e.what());
      HttpResponse failed{500, "text/plain; charset=utf-8", "Internal Server Error\n", {}, nullptr};
      return Queue(connection, failed, false);
    }
  }

  void CountLoginRefusal(MHD_Connection* connection, LoginVerdict verdict) {
    const auto* peer = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const std::string address = AddressKey(peer != nullptr ? peer->client_addr : nullptr);
    if (verdict == LoginVerdict::kRateLimited) {
      refusals->Count(Refusal::kLoginRateLimited, address,
                      "it failed to log in too often and has as many logins waiting as it may");
    } else {
      refusals->Count(Refusal::kLoginBusy, address,
                      "the password checks are full, or its login waited past its bound");
    }
  }

  // The users' bcrypt hashes are checked once, here, so that a bad one is named at start.
  void SetUpLogins() {
    const WebConfig& web = options.web;
    for (const auto& [user, hash] : web.basic_auth_users) {
      if (const auto problem = BcryptHashProblem(hash)) {
        throw HttpError(
            "web config: basic_auth_users." + platform::Printable(user) + " " + *problem,
            kBcryptFix);
      }
    }
    verifier = std::make_unique<PasswordVerifier>(options.auth);
    verifier->SetUsers(web.basic_auth_users);
    auth_on = !web.basic_auth_users.empty();
  }

  // Sets options.connection_limit to what holds: MHD's own limit, returned, is a backstop
  // above ours (EnforceLimitLocked keeps below it while any connection can be closed); MHD
  // splits it between its threads, unevenly at times.
  unsigned FitConnectionLimits(bool tls) {
    if (tls) {
      options.connection_limit = std::min(options.connection_limit, options.tls_connection_limit);
    }
    options.connection_limit = std::max(1u, options.connection_limit);
    const unsigned hard_limit = FitConnectionsToFileLimit(
        options.connection_limit + options.connection_limit / 4 + 16 * Threads());
    options.connection_limit = std::min(options.connection_limit, std::max(1u, hard_limit * 4 / 5));
    return hard_limit;
  }

  unsigned Threads() const { return std::max(1u, options.threads); }

  std::vector<MHD_OptionItem> DaemonOptions(bool tls, unsigned hard_limit) {
    std::vector<MHD_OptionItem> items;
    auto add = [&items](MHD_OPTION option, intptr_t value, void* ptr = nullptr) {
      items.push_back(MHD_OptionItem{option, value, ptr});
    };
    add(MHD_OPTION_LISTEN_SOCKET, socket.fd);
    add(MHD_OPTION_CONNECTION_LIMIT, hard_limit);
    // An address at the limit gets no more: AcceptPolicy has MHD close its new connection
    // right after accept, before any memory or TLS session is spent on it (EnforceLimitLocked
    // would do the same, only later and dearer: a flood of reconnects then costs a TLS
    // handshake each), and counts it.
    per_address_limit =
        tls ? std::min(options.connection_limit, std::max(1u, options.tls_connections_per_address))
            : options.connection_limit;
    add(MHD_OPTION_CONNECTION_TIMEOUT, static_cast<intptr_t>(options.idle_timeout.count()));
    add(MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(options.connection_memory_bytes));
    if (Threads() > 1) add(MHD_OPTION_THREAD_POOL_SIZE, Threads());
    add(MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Impl::OnConnection), this);
    add(MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&Impl::OnCompleted), this);
    add(MHD_OPTION_UNESCAPE_CALLBACK, reinterpret_cast<intptr_t>(&Impl::Unescape), this);
    if (tls) {
      add(MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert.data());
      add(MHD_OPTION_HTTPS_MEM_KEY, 0, tls_key.data());
      // TLS 1.2 and 1.3 only, as exporter-toolkit's default minimum.
      add(MHD_OPTION_HTTPS_PRIORITIES, 0,
          const_cast<char*>("NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"));
    }
    add(MHD_OPTION_END, 0);
    return items;
  }

  // Starts libmicrohttpd on the listen socket; throws HttpError with what it logged.
  void StartDaemon(bool tls) {
    // poll, not epoll: with MHD 0.9.75's edge-triggered epoll a client that sends part of a
    // request and closes is noticed only at the idle timeout (measured: 20 such connections
    // held 20 descriptors for 10 s); with poll they are released at once.
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME;
    if (tls) flags |= MHD_USE_TLS;
    if (socket.family == AF_INET6) flags |= MHD_USE_IPv6;
    std::vector<MHD_OptionItem> items = DaemonOptions(tls, FitConnectionLimits(tls));
    daemon = MHD_start_daemon(flags, 0, &Impl::AcceptPolicy, this, &Impl::OnRequest, this,
                              MHD_OPTION_EXTERNAL_LOGGER, &Impl::Log, this, MHD_OPTION_ARRAY,
                              items.data(), MHD_OPTION_END);
    if (daemon == nullptr) {
      // Not closing socket.fd: MHD closes a given listen socket when it fails (checked
      // with 0.9.75), and a second close could hit a descriptor another thread just opened.
      std::lock_guard lock(log_mutex);
      throw HttpError(
          "cannot start the HTTP server on " + options.listen_address + ": " +
              (startup_log.empty() ? std::string("libmicrohttpd gave no reason") : startup_log),
          "check the listen address and the web config file");
    }
    std::lock_guard lock(log_mutex);
    starting = false;
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
  const WebConfig& web = s.options.web;

  // The TLS material was checked when it was loaded (web::LoadTlsMaterial), once.
  const bool tls = web.TlsEnabled();
  if (tls) {
    // MHD keeps pointers to these while it runs: copies owned by the server.
    s.tls_cert = web.tls->cert_pem;
    s.tls_key = web.tls->key_pem;
  }
  s.SetUpLogins();

  s.refusals = std::make_unique<RefusalLog>(s.options.refusal_log_period);
  if (!s.options.unix_socket.empty()) {
    s.socket = OpenUnixListenSocket(s.options.unix_socket, s.options.unix_socket_mode);
  } else {
    const ListenAddress address = ParseListenAddress(s.options.listen_address);
    s.socket = OpenListenSocket("'" + s.options.listen_address + "'", address);
  }
  try {
    s.StartDaemon(tls);
  } catch (...) {
    UnlinkUnixSocket(s.socket);
    throw;
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
  // Every parked login is answered (503) and its connection resumed: MHD must not stop
  // with a connection suspended, and a bcrypt in progress is not waited for.
  if (impl_->verifier) impl_->verifier->Stop();
  // Closes the listen socket too.
  if (impl_->daemon != nullptr) MHD_stop_daemon(impl_->daemon);
  UnlinkUnixSocket(impl_->socket);
}

std::uint16_t HttpServer::port() const {
  return impl_->socket.port;
}

bool HttpServer::tls() const {
  return impl_->options.web.TlsEnabled();
}

std::string HttpServer::url() const {
  if (!impl_->options.unix_socket.empty()) return "unix:" + impl_->options.unix_socket.string();
  const ListenAddress a = ParseListenAddress(impl_->options.listen_address);
  std::string host = a.host;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return std::string(tls() ? "https" : "http") + "://" + host + ":" + std::to_string(port());
}

HttpRefusals HttpServer::Refusals() const {
  return impl_->refusals->Total();
}

void HttpServer::SetBasicAuthUsers(std::map<std::string, std::string> users) {
  const bool on = !users.empty();
  impl_->verifier->SetUsers(std::move(users));
  impl_->auth_on = on;
}

}  // namespace xferd::web
