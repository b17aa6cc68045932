// exporter-toolkit's web configuration (the YAML file behind --web.config.file), as the
// HTTP server uses it. config/ reads the YAML; this layer loads and checks what it names.
#pragma once

#include <filesystem>
#include <map>
#include <string>

namespace xferd::web {

struct WebConfig {
  std::filesystem::path cert_file;  // TLS when cert_file and key_file are both set
  std::filesystem::path key_file;
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
  bool TlsEnabled() const { return !cert_file.empty(); }
  bool AuthEnabled() const { return !basic_auth_users.empty(); }
};

}  // namespace xferd::web
