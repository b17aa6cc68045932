#include "cmd/daemon_client.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

#include "platform/files.h"
#include "platform/printable.h"
#include "web/http_client.h"
#include "web/listen_address.h"
#include "web/paths.h"

namespace xferd::cmd {
namespace {

constexpr const char* kDefaultConfig = "/etc/xferd/xferd.toml";
// A password is a line; a file much larger is the wrong file.
constexpr std::size_t kMaxPasswordFileBytes = 4096;
// The status document of a host with many GPUs is tens of KiB.
constexpr std::size_t kMaxStatusBytes = 8u << 20;

// What SIGALRM writes (ArmWatchdog). Async-signal-safe: a fixed text and _exit.
char alarm_line[256];
int alarm_fd = STDOUT_FILENO;
int alarm_exit = 2;
void OnAlarm(int) {
  const ssize_t ignored = ::write(alarm_fd, alarm_line, std::strlen(alarm_line));
  (void)ignored;
  _exit(alarm_exit);
}

// The daemon's address as a client reaches it: a wildcard listen address is this host.
web::HttpUrl UrlOf(const config::Config& config) {
  const web::ListenAddress listen = web::ParseListenAddress(config.listen_address);
  if (listen.port == 0) {
    throw UsageError("the daemon's listen address \"" + config.listen_address +
                     "\" has port 0 (a free port picked at start): give the address it "
                     "serves on with --url");
  }
  web::HttpUrl url;
  url.tls = config.web.TlsEnabled();
  url.port = listen.port;
  if (listen.host.empty() || listen.host == "0.0.0.0") {
    url.host = "127.0.0.1";
  } else if (listen.host == "::") {
    url.host = "::1";
  } else {
    url.host = listen.host;
  }
  return url;
}

std::string ReadPassword(const std::string& path) {
  std::string text;
  try {
    // A password file others can read is refused, as ssh refuses such a key: the daemon's
    // login would be every local user's (docs/operations.md).
    text = platform::ReadFileBounded(path, kMaxPasswordFileBytes, "password file",
                                     platform::Secrecy::kSecret);
  } catch (const platform::FileError& e) {
    throw UsageError(std::string(e.what()));
  }
  // One line: its newline is not part of the password.
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) {
    throw UsageError("password file " + platform::PrintablePath(path, 512) +
                     " is empty; write the password of the basic-auth user on its first line");
  }
  if (text.find('\n') != std::string::npos) {
    throw UsageError("password file " + platform::PrintablePath(path, 512) +
                     " holds more than one line; write the password alone on one line");
  }
  return text;
}

// The daemon's config, as `xferd run` reads it, for what the flags leave out (its web
// config is read by WithWebConfig, only when HTTP is asked).
config::Config DaemonConfig(const DaemonClientOptions& options) {
  config::Config config;
  std::error_code ec;
  const std::string file = options.config_file.value_or(
      std::filesystem::exists(kDefaultConfig, ec) ? kDefaultConfig : "");
  if (!file.empty()) config = config::ParseConfig(config::ReadConfigFile(file), file);
  if (options.listen_address) config.listen_address = *options.listen_address;
  return config;
}

// The web config is read only where no flag names another: a user who may not read the
// daemon's can give the one to use.
void WithWebConfig(const DaemonClientOptions& options, config::Config& config) {
  const std::filesystem::path web_file = options.web_config_file
                                             ? std::filesystem::path(*options.web_config_file)
                                             : config.web_config_file;
  config.web = web_file.empty() ? web::WebConfig{}
                                : config::LoadWebConfig(web_file, config::WebConfigUse::kAsk);
}

// Where the status is asked for over HTTP: --url, else the daemon's config.
web::HttpUrl StatusUrl(const DaemonClientOptions& options, const config::Config& config) {
  web::HttpUrl url;
  if (options.url) {
    try {
      url = web::ParseHttpUrl(*options.url);
    } catch (const web::HttpError& e) {
      throw UsageError("--url: " + std::string(e.what()));
    }
    if (url.path != "/") {
      throw UsageError("--url \"" + platform::Printable(web::RedactedUrl(*options.url), 200) +
                       "\": give the daemon's address only (scheme, host, port); xferd "
                       "asks for " +
                       std::string(web::kStatusPath) + " itself");
    }
  } else {
    try {
      url = UrlOf(config);
    } catch (const web::HttpError& e) {
      throw UsageError(std::string(e.what()));
    }
  }
  url.path = std::string(web::kStatusPath);
  return url;
}

// The login to send: none when the daemon's web config names no user and no flag asks for one.
std::optional<std::pair<std::string, std::string>> BasicAuthOf(const DaemonClientOptions& options,
                                                               const config::Config& config) {
  const auto& users = config.web.basic_auth_users;
  std::string user = options.username.value_or("");
  if (user.empty() && users.size() == 1) user = users.begin()->first;
  if (options.password_file) {
    if (user.empty()) {
      throw UsageError(users.empty()
                           ? "--basic-auth.password-file needs --basic-auth.username "
                             "(the daemon's web config names no user)"
                           : "the daemon's web config names " + std::to_string(users.size()) +
                                 " users: say which with --basic-auth.username");
    }
    return std::make_pair(user, ReadPassword(*options.password_file));
  }
  if (!users.empty() || options.username) {
    throw UsageError(
        "the daemon asks for a login (basic_auth_users in its web config): give the "
        "password in a file readable only by this user with --basic-auth.password-file "
        "(never on the command line)");
  }
  return std::nullopt;
}

// The health socket to ask first (docs/http.md, "The health socket"): --socket; else, when
// no flag names an HTTP address, the config's where one is (a socket file there: the daemon
// runs on this host). nullopt: ask over HTTP.
std::optional<std::filesystem::path> SocketToAsk(const DaemonClientOptions& options,
                                                 const config::Config& config) {
  if (options.socket) {
    if (options.socket->empty()) return std::nullopt;
    return std::filesystem::path(*options.socket);
  }
  if (options.url || options.listen_address) return std::nullopt;
  const std::filesystem::path path = config.HealthSocket();
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return std::nullopt;
  }
  return path;
}

// What is asked over HTTP (--url or the config's address, TLS, the login); throws
// platform::Error naming what is wrong.
web::HttpClientRequest HttpRequestOf(const DaemonClientOptions& options, config::Config& config,
                                     std::chrono::milliseconds timeout) {
  WithWebConfig(options, config);
  web::HttpClientRequest request;
  request.timeout = timeout;
  request.url = StatusUrl(options, config);
  request.max_body_bytes = kMaxStatusBytes;
  if (request.url.tls) {
    // The daemon's own certificate is a trust anchor that needs no CA at hand; a CA file
    // given wins.
    if (options.ca_file) {
      request.ca_file = *options.ca_file;
    } else if (config.web.tls) {
      request.ca_file = config.web.tls->cert_file;
    }
    request.server_name = options.server_name.value_or("");
  }
  request.basic_auth = BasicAuthOf(options, config);
  return request;
}

std::chrono::milliseconds TimeoutOf(const DaemonClientOptions& options) {
  const auto timeout = config::ParseDuration(options.timeout);
  if (!timeout || timeout->count() <= 0 || *timeout > std::chrono::minutes(10)) {
    throw UsageError("--timeout \"" + platform::Printable(options.timeout, 40) +
                     "\": give a duration from 1ms to 10m, e.g. 5s");
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(*timeout);
}

HealthReport UnknownAnswer(std::string line) {
  return UnknownReport(core::NoVerdict::kDaemonUnreachable, line);
}

// The daemon's answer: its document (200), or why it gave none.
StatusAnswer AnswerOf(const web::HttpUrl& url, const web::HttpClientResponse& response) {
  const std::string where = url.Text();
  switch (response.status) {
    case 200: return {response.body, {}};
    case 401:
      return {std::nullopt, UnknownAnswer(where + " refused the login (401): check "
                                                  "--basic-auth.username and the password file")};
    case 404:
      return {std::nullopt, UnknownAnswer(where + " has no status API (404): is it an older xferd, "
                                                  "or another service on that port?")};
    case 429:
    case 503:
      return {std::nullopt,
              UnknownAnswer(where + " answered " + std::to_string(response.status) +
                            (response.status == 429 ? " (too many failed logins from this address)"
                                                    : " (busy checking other logins)") +
                            ": the daemon refused the check; on the daemon's host xferd asks over "
                            "the health socket, which needs no login")};
    default:
      return {std::nullopt,
              UnknownAnswer(where + " answered " + std::to_string(response.status) + ": " +
                            platform::Printable(response.body.substr(0, 200), 200))};
  }
}

HealthReport Unreachable(const std::string& why) {
  return UnknownReport(core::NoVerdict::kDaemonUnreachable, "xferd unreachable: " + why);
}

}  // namespace

void ArmWatchdog(std::chrono::milliseconds timeout, const std::string& line, int fd,
                 int exit_code) {
  std::snprintf(alarm_line, sizeof alarm_line, "%s\n", line.c_str());
  alarm_fd = fd;
  alarm_exit = exit_code;
  struct sigaction action {};
  action.sa_handler = OnAlarm;
  sigaction(SIGALRM, &action, nullptr);
  alarm(static_cast<unsigned>(std::ceil(timeout.count() / 1000.0)) + 2);
}

DaemonClient::DaemonClient(const DaemonClientOptions& options)
    : options_(options),
      timeout_(TimeoutOf(options)),
      config_(DaemonConfig(options)),
      socket_(SocketToAsk(options, config_)) {}

StatusAnswer DaemonClient::FetchStatus() {
  // The health socket first: no other local user can crowd it out, and it needs no TLS or
  // login. One that cannot be connected to (no daemon there now, no permission) leaves
  // HTTP.
  std::string socket_problem;
  if (socket_) {
    web::HttpClientRequest request;
    request.timeout = timeout_;
    request.url.unix_socket = *socket_;
    request.url.path = std::string(web::kStatusPath);
    request.max_body_bytes = kMaxStatusBytes;
    try {
      return AnswerOf(request.url, web::HttpGet(request));
    } catch (const web::HttpConnectError& e) {
      socket_problem = e.problem();
    } catch (const web::HttpError& e) {
      return {std::nullopt, Unreachable(e.what())};
    }
  }
  const std::string before = socket_problem.empty() ? "" : socket_problem + "; and ";
  web::HttpClientRequest request;
  try {
    request = HttpRequestOf(options_, config_, timeout_);
  } catch (const platform::Error& e) {
    return {std::nullopt, UnknownReport(core::NoVerdict::kDaemonUnreachable,
                                        before + platform::Printable(e.what(), 1000))};
  }
  try {
    return AnswerOf(request.url, web::HttpGet(request));
  } catch (const web::HttpError& e) {
    return {std::nullopt, Unreachable(before + e.what())};
  }
}

}  // namespace xferd::cmd
