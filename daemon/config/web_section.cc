// [web]: where and how the endpoint listens, and what a reload may not take from it.
#include <string>
#include <vector>

#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "web/listen_address.h"
#include "web/paths.h"

namespace xferd::config {

void ReadWeb(const std::string& file, const std::filesystem::path& source, const toml::table& root,
             Config& config) {
  const toml::table* table = SectionTable(file, root, "web");
  if (!table) return;
  TableReader r(file, *table, "web");
  if (auto v = r.String("listen_address", "\":9742\"")) {
    try {
      web::ParseListenAddress(*v);
    } catch (const web::HttpError& e) {
      r.Fail(*r.Find("listen_address"), "listen_address", e.problem(),
             "write listen_address = \":9742\" (all interfaces), \"127.0.0.1:9742\" or "
             "\"[::1]:9742\"");
    }
    config.listen_address = *v;
  }
  if (auto v = r.String("telemetry_path", "\"/metrics\"")) {
    try {
      web::CheckTelemetryPath(*v);
    } catch (const web::HttpError& e) {
      r.Fail(*r.Find("telemetry_path"), "telemetry_path", e.problem(),
             "write telemetry_path = \"/metrics\"");
    }
    config.telemetry_path = *v;
  }
  if (auto v = r.String("config_file", "\"/etc/xferd/web-config.yml\"")) {
    if (v->empty()) {
      r.Fail(*r.Find("config_file"), "config_file", "must not be empty",
             "remove the line for plain HTTP, or name the web-config YAML file");
    }
    config.web_config_file = ResolveAgainst(source, *v);
  }
  if (auto v = r.Bool("reload_may_remove_protection")) config.reload_may_remove_protection = *v;
  if (auto v = r.String("health_socket", "\"/var/lib/xferd/health.sock\"")) {
    // "" turns it off; a relative path is the config file's directory's, as every path.
    config.health_socket = v->empty() ? std::filesystem::path() : ResolveAgainst(source, *v);
  }
  r.RejectUnknown();
}

void CheckReloadKeepsProtection(const Config& running, const Config& next) {
  if (next.reload_may_remove_protection) return;
  std::vector<std::string> removed;
  std::string key;
  if (running.web.TlsEnabled() && !next.web.TlsEnabled()) {
    removed.push_back("TLS (" + running.web.tls->cert_file.string() + ")");
    key = "tls_server_config";
  }
  if (running.web.AuthEnabled() && !next.web.AuthEnabled()) {
    removed.push_back("basic auth (" + std::to_string(running.web.basic_auth_users.size()) +
                      (running.web.basic_auth_users.size() == 1 ? " user" : " users") + ")");
    key = key.empty() ? "basic_auth_users" : "";
  }
  if (removed.empty()) return;
  std::string what = removed.front();
  if (removed.size() > 1) what += " and " + removed.back();
  // The file the protection came from; or, when the config file no longer names one, that.
  const bool named = !next.web_config_file.empty();
  const std::filesystem::path file = named ? next.web_config_file : next.source;
  throw ConfigError(
      file.empty() ? running.web_config_file.string() : file.string(), 0, named ? key : "",
      "reload refused: it would turn off " + what + ", which the running xferd serves with (" +
          (named ? "the web config no longer configures it" : "no web config file is named now") +
          ")",
      "restore the web config (a failed copy or an emptied file?); to turn protection off on "
      "purpose set [web] reload_may_remove_protection = true before the reload, or restart "
      "xferd");
}

}  // namespace xferd::config
