// `xferd health`: asks the local daemon for its status (/api/v1/status) and prints one line
// with an exit status a node-problem-detector plugin, a Slurm health check or a Nagios check
// acts on (cmd/health_report.h). Where the daemon listens, whether it speaks TLS and whether
// it wants a login come from the config file `xferd run` reads; flags override each.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cmd/commands.h"
#include "cmd/health_report.h"
#include "config/config.h"
#include "core/diagnosis.h"
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

// The last resort against a hang the deadlines cannot reach (a name lookup stuck in the
// resolver): SIGALRM prints the unknown line and leaves. Async-signal-safe: a fixed text
// and _exit.
char alarm_line[256];
int alarm_exit = 2;
void OnAlarm(int) {
  const ssize_t ignored = ::write(STDOUT_FILENO, alarm_line, std::strlen(alarm_line));
  (void)ignored;
  _exit(alarm_exit);
}

void ArmWatchdog(std::chrono::milliseconds timeout, bool nagios) {
  const HealthReport report =
      UnknownReport(core::NoVerdict::kDaemonUnreachable, "no answer from xferd within the timeout");
  const std::string line = (nagios ? NagiosLine(report) : report.line) + "\n";
  std::snprintf(alarm_line, sizeof alarm_line, "%s", line.c_str());
  alarm_exit = HealthExitCode(HealthOutcome::kUnknown, nagios);
  struct sigaction action {};
  action.sa_handler = OnAlarm;
  sigaction(SIGALRM, &action, nullptr);
  alarm(static_cast<unsigned>(std::ceil(timeout.count() / 1000.0)) + 2);
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

// --stale-after and --cause, into what judges the answer.
void ReadJudgeFlags(const HealthCommandOptions& options, HealthJudgeOptions& judge) {
  if (options.stale_after) {
    const auto stale = config::ParseDuration(*options.stale_after);
    if (!stale || stale->count() <= 0) {
      throw UsageError("--stale-after \"" + platform::Printable(*options.stale_after, 40) +
                       "\": give a duration, e.g. 5m");
    }
    judge.stale_after_s = std::chrono::duration<double>(*stale).count();
  }
  if (options.cause) {
    // In the order they lead (core::CauseRank); the notes apart: they name no fault.
    std::vector<core::DiagnosisCause> ranked(core::kAllDiagnosisCauses.begin(),
                                             core::kAllDiagnosisCauses.end());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](auto a, auto b) { return core::CauseRank(a) < core::CauseRank(b); });
    std::string faults, notes;
    for (core::DiagnosisCause c : ranked) {
      std::string& list = core::IsNote(c) ? notes : faults;
      list += (list.empty() ? "" : ", ") + std::string(core::ToString(c));
    }
    if (!core::ParseDiagnosisCause(*options.cause)) {
      throw UsageError("--cause \"" + platform::Printable(*options.cause, 40) +
                       "\": not a cause xferd names; use one of " + faults +
                       "; notes (not a fault, never a problem): " + notes);
    }
    judge.cause = *options.cause;
  }
}

// The daemon's config, as `xferd run` reads it, for what the flags leave out (its web
// config is read by WithWebConfig, only when HTTP is asked).
config::Config DaemonConfig(const HealthCommandOptions& options) {
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
void WithWebConfig(const HealthCommandOptions& options, config::Config& config) {
  const std::filesystem::path web_file = options.web_config_file
                                             ? std::filesystem::path(*options.web_config_file)
                                             : config.web_config_file;
  config.web = web_file.empty() ? web::WebConfig{}
                                : config::LoadWebConfig(web_file, config::WebConfigUse::kAsk);
}

// Where the status is asked for over HTTP: --url, else the daemon's config.
web::HttpUrl StatusUrl(const HealthCommandOptions& options, const config::Config& config) {
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
                       "health asks for " +
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
std::optional<std::pair<std::string, std::string>> BasicAuthOf(const HealthCommandOptions& options,
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
std::optional<std::filesystem::path> SocketToAsk(const HealthCommandOptions& options,
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
web::HttpClientRequest HttpRequestOf(const HealthCommandOptions& options, config::Config& config,
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

std::chrono::milliseconds TimeoutOf(const HealthCommandOptions& options) {
  const auto timeout = config::ParseDuration(options.timeout);
  if (!timeout || timeout->count() <= 0 || *timeout > std::chrono::minutes(10)) {
    throw UsageError("--timeout \"" + platform::Printable(options.timeout, 40) +
                     "\": give a duration from 1ms to 10m, e.g. 5s");
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(*timeout);
}

HealthReport Judge(const web::HttpUrl& url, const web::HttpClientResponse& response,
                   const HealthJudgeOptions& judge) {
  const std::string where = url.Text();
  switch (response.status) {
    case 200: return JudgeStatus(response.body, judge);
    case 401:
      return UnknownReport(core::NoVerdict::kDaemonUnreachable,
                           where +
                               " refused the login (401): check --basic-auth.username and "
                               "the password file");
    case 404:
      return UnknownReport(core::NoVerdict::kDaemonUnreachable,
                           where +
                               " has no status API (404): is it an older xferd, or "
                               "another service on that port?");
    case 429:
    case 503:
      return UnknownReport(
          core::NoVerdict::kDaemonUnreachable,
          where + " answered " + std::to_string(response.status) +
              (response.status == 429 ? " (too many failed logins from this address)"
                                      : " (busy checking other logins)") +
              ": the daemon refused the check; on the daemon's host xferd health asks "
              "over the health socket, which needs no login");
    default:
      return UnknownReport(core::NoVerdict::kDaemonUnreachable,
                           where + " answered " + std::to_string(response.status) + ": " +
                               platform::Printable(response.body.substr(0, 200), 200));
  }
}

HealthReport Unreachable(const std::string& why) {
  return UnknownReport(core::NoVerdict::kDaemonUnreachable, "xferd unreachable: " + why);
}

}  // namespace

int HealthCommand(const HealthCommandOptions& options) {
  const auto print = [&](const HealthReport& report) {
    const std::string line = options.nagios ? NagiosLine(report) : report.line;
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
    return HealthExitCode(report.state, options.nagios);
  };
  // A plugin runner sees only the line and the status: a mistake is "unknown", said on the
  // line a person will read.
  const auto mistake = [&](const platform::Error& e, const std::string& before = "") {
    return print(UnknownReport(core::NoVerdict::kDaemonUnreachable,
                               before + platform::Printable(e.what(), 1000)));
  };
  HealthJudgeOptions judge;
  std::chrono::milliseconds timeout{};
  config::Config config;
  std::optional<std::filesystem::path> socket;
  try {
    timeout = TimeoutOf(options);
    ReadJudgeFlags(options, judge);
    config = DaemonConfig(options);
    socket = SocketToAsk(options, config);
  } catch (const platform::Error& e) {
    return mistake(e);
  }
  ArmWatchdog(timeout, options.nagios);

  // The health socket first: no other local user can crowd it out, and it needs no TLS or
  // login. One that cannot be connected to (no daemon there now, no permission) leaves HTTP.
  std::string socket_problem;
  if (socket) {
    web::HttpClientRequest request;
    request.timeout = timeout;
    request.url.unix_socket = *socket;
    request.url.path = std::string(web::kStatusPath);
    request.max_body_bytes = kMaxStatusBytes;
    try {
      return print(Judge(request.url, web::HttpGet(request), judge));
    } catch (const web::HttpConnectError& e) {
      socket_problem = e.problem();
    } catch (const web::HttpError& e) {
      return print(Unreachable(e.what()));
    }
  }
  const std::string before = socket_problem.empty() ? "" : socket_problem + "; and ";
  web::HttpClientRequest request;
  try {
    request = HttpRequestOf(options, config, timeout);
  } catch (const platform::Error& e) {
    return mistake(e, before);
  }
  try {
    return print(Judge(request.url, web::HttpGet(request), judge));
  } catch (const web::HttpError& e) {
    return print(Unreachable(before + e.what()));
  }
}

}  // namespace xferd::cmd
