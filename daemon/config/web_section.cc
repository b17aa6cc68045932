// [web]: where and how the endpoint listens.
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
  r.RejectUnknown();
}

}  // namespace xferd::config
