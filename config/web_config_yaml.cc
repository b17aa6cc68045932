// exporter-toolkit's web config (YAML) -> web::WebConfig, with the TLS files it names read.
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>

#include "config/config.h"
#include "config/messages.h"
#include "platform/files.h"
#include "web/basic_auth.h"
#include "web/tls.h"

namespace xferd::config {
namespace {

int YamlLine(const YAML::Node& node) {
  return node.Mark().is_null() ? 0 : node.Mark().line + 1;
}

std::string YamlScalar(const std::string& file, const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) {
    throw ConfigError(file, YamlLine(node), key, "must be a single value (a string)",
                      "write " + key.substr(key.rfind('.') + 1) + ": <value>");
  }
  return node.Scalar();
}

// tls_server_config: cert_file and key_file, read once here (web::ReadTlsMaterial).
std::optional<web::TlsMaterial> ReadTlsServerConfig(const std::string& file,
                                                    const std::filesystem::path& path,
                                                    const YAML::Node& value, int line) {
  const std::string key = "tls_server_config";
  if (value.IsNull()) return std::nullopt;
  if (!value.IsMap()) {
    throw ConfigError(file, line, key, "must be a map with cert_file and key_file",
                      "indent cert_file: and key_file: under it");
  }
  std::filesystem::path cert_file, key_file;
  int cert_line = line, key_line = line;
  for (const auto& tls : value) {
    const std::string tls_key = tls.first.Scalar();
    const std::string name = key + "." + tls_key;
    if (tls_key != "cert_file" && tls_key != "key_file") {
      throw ConfigError(file, YamlLine(tls.first), name,
                        "not supported by xferd (it supports cert_file and key_file only)",
                        "remove it; for client certificates put a TLS proxy in front");
    }
    const std::string given = YamlScalar(file, tls.second, name);
    if (given.empty()) {
      throw ConfigError(file, YamlLine(tls.second), name, "must not be empty", "name the PEM file");
    }
    (tls_key == "cert_file" ? cert_file : key_file) = ResolveAgainst(path, given);
    (tls_key == "cert_file" ? cert_line : key_line) = YamlLine(tls.second);
  }
  if (cert_file.empty() != key_file.empty()) {
    throw ConfigError(file, line, key + (cert_file.empty() ? ".cert_file" : ".key_file"),
                      "TLS needs both cert_file and key_file",
                      "add the missing one, or remove tls_server_config for plain HTTP");
  }
  if (cert_file.empty()) return std::nullopt;
  try {
    return web::ReadTlsMaterial(cert_file, key_file);
  } catch (const platform::FileError& e) {
    const bool cert = e.path() == cert_file;
    throw ConfigError(
        file, cert ? cert_line : key_line, key + (cert ? ".cert_file" : ".key_file"),
        "cannot read " + e.path().string() + ": " + e.cause(),
        e.fix() + " (relative paths are relative to " +
            (path.parent_path().empty() ? std::string(".") : path.parent_path().string()) + ")");
  }
}

// basic_auth_users: user -> bcrypt hash.
std::map<std::string, std::string> ReadBasicAuthUsers(const std::string& file,
                                                      const YAML::Node& value, int line) {
  const std::string key = "basic_auth_users";
  std::map<std::string, std::string> users;
  if (value.IsNull()) return users;
  if (!value.IsMap()) {
    throw ConfigError(file, line, key, "must be a map of user: bcrypt-hash",
                      "write one line per user, e.g.  prometheus: $2y$10$...");
  }
  for (const auto& user : value) {
    const std::string name = user.first.Scalar();
    const std::string full = key + "." + name;
    if (name.empty() || name.find(':') != std::string::npos) {
      throw ConfigError(file, YamlLine(user.first), full,
                        "a user name must be non-empty and hold no ':'", "rename the user");
    }
    const std::string hash = YamlScalar(file, user.second, full);
    if (const auto problem = web::BcryptHashProblem(hash)) {
      throw ConfigError(file, YamlLine(user.second), full, "the value " + *problem,
                        web::kBcryptFix);
    }
    if (!users.emplace(name, hash).second) {
      throw ConfigError(file, YamlLine(user.first), full, "user listed twice",
                        "keep one entry per user");
    }
  }
  return users;
}

}  // namespace

WebConfig LoadWebConfig(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = ReadConfigFile(path);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, e.mark.is_null() ? 0 : e.mark.line + 1, "", "not valid YAML: " + e.msg,
                      "correct the syntax on that line (see docs/configuration.md for the format)");
  }
  WebConfig web;
  // An empty file is what exporter-toolkit accepts too: plain HTTP, no auth.
  if (root.IsNull()) return web;
  if (!root.IsMap()) {
    throw ConfigError(file, YamlLine(root), "",
                      "must be a map of tls_server_config and basic_auth_users",
                      "see docs/configuration.md for the format");
  }
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      const int line = YamlLine(entry.first);
      if (key == "tls_server_config") {
        web.tls = ReadTlsServerConfig(file, path, entry.second, line);
      } else if (key == "basic_auth_users") {
        web.basic_auth_users = ReadBasicAuthUsers(file, entry.second, line);
      } else if (key == "http_server_config") {
        // Rejected rather than ignored: an operator who asked for headers or HTTP/2 must
        // not believe they are in effect.
        throw ConfigError(file, line, key,
                          "not supported by xferd (HTTP/2 and custom headers are not implemented)",
                          "remove the http_server_config block");
      } else {
        std::string fix = "remove it; xferd reads tls_server_config and basic_auth_users";
        for (std::string_view known :
             {"tls_server_config", "basic_auth_users", "http_server_config"}) {
          if (EditDistance(key, known) <= 3) fix = "did you mean " + std::string(known) + "?";
        }
        throw ConfigError(file, line, key, "unknown key", fix);
      }
    }
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, e.mark.is_null() ? 0 : e.mark.line + 1, "",
                      "unexpected structure: " + e.msg, "see docs/configuration.md for the format");
  }
  return web;
}

}  // namespace xferd::config
