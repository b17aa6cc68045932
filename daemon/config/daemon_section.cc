// [daemon]: where state, the textfile and the log go.
#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "platform/logging.h"

namespace xferd::config {

void ReadDaemon(const std::string& file, const std::filesystem::path& source,
                const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "daemon");
  if (!table) return;
  TableReader r(file, *table, "daemon");
  if (auto v = r.String("state_dir", "\"/var/lib/xferd\"")) {
    if (v->empty())
      r.Fail(*r.Find("state_dir"), "state_dir", "must not be empty",
             "write state_dir = \"/var/lib/xferd\"");
    config.state_dir = ResolveAgainst(source, *v);
  }
  if (auto v = r.String("textfile_path", "\"/var/lib/prometheus/node-exporter/xferd.prom\"")) {
    if (!v->empty()) {
      const std::filesystem::path path(*v);
      if (path.extension() != ".prom" || path.filename() == ".prom") {
        r.Fail(*r.Find("textfile_path"), "textfile_path",
               "node_exporter's textfile collector reads only *.prom files, got " + Quote(*v),
               "name a file ending in .prom, e.g. textfile_path = "
               "\"/var/lib/prometheus/node-exporter/xferd.prom\", or \"\" for none");
      }
    }
    config.textfile_path = ResolveAgainst(source, *v);
  }
  if (auto v = r.String("log_level", "\"info\"")) {
    if (!platform::ParseLogLevel(*v)) {
      r.Fail(*r.Find("log_level"), "log_level", "unknown level " + Quote(*v),
             std::string("use one of ") + platform::kLogLevelNames);
    }
    config.log_level = *v;
  }
  r.RejectUnknown();
}

}  // namespace xferd::config
