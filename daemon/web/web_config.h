// exporter-toolkit's web configuration (the YAML file behind --web.config.file) as the
// HTTP server uses it. config/ reads the YAML and the files it names; nothing here is read
// twice.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "web/tls.h"

namespace xferd::web {

struct WebConfig {
  std::optional<TlsMaterial> tls;                       // HTTPS when set
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
  bool TlsEnabled() const { return tls.has_value(); }
  bool AuthEnabled() const { return !basic_auth_users.empty(); }
};

}  // namespace xferd::web
