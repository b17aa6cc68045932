// exporter-toolkit's web config (YAML) -> web::WebConfig, with the TLS files it names read
// and checked.
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <utility>

#include "config/config.h"
#include "config/messages.h"
#include "platform/files.h"
#include "web/basic_auth.h"
#include "web/tls.h"

namespace xferd::config {
namespace {

// A web config is a few hundred bytes (a few KiB with many users).
constexpr std::size_t kMaxWebConfigBytes = 64u << 10;

// yaml-cpp recurses once per level of nesting: "[[[[..." or "- - - - ..." a few thousand
// levels deep overflows the stack. The web config nests 3 levels; these bounds keep any
// accepted file within 128 + 16 + 16 + 1 levels.
constexpr int kMaxYamlIndent = 128;     // columns of leading spaces
constexpr int kMaxYamlIndicators = 16;  // "- - - x", "? ? x": a level each, on one line
constexpr int kMaxYamlFlowDepth = 16;   // [ and { within each other

// The first line that nests deeper than the bounds above, and how; nullopt if none. Errs
// toward finding too much: every '[' and '{' counts as an opening (even inside what looks
// like a quoted string), a closing one counts only outside one, so no guess about quotes
// or comments can hide nesting from it.
std::optional<std::pair<int, std::string>> FindTooDeepYaml(std::string_view text) {
  int line = 1;
  int depth = 0;
  char quote = 0;  // the quote we are inside, or 0
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    // The start of a line: its indentation and leading indicators.
    if (quote == 0) {
      int indent = 0;
      while (i < n && (text[i] == ' ' || text[i] == '\t')) ++i, ++indent;
      if (indent > kMaxYamlIndent) {
        return std::make_pair(
            line, "a line indented more than " + std::to_string(kMaxYamlIndent) + " columns");
      }
      int indicators = 0;
      while (i < n && (text[i] == '-' || text[i] == '?' || text[i] == ':') &&
             (i + 1 == n || text[i + 1] == ' ' || text[i + 1] == '\n')) {
        if (++indicators > kMaxYamlIndicators) {
          return std::make_pair(line, "more than " + std::to_string(kMaxYamlIndicators) +
                                          " nested '- ' or '? ' on one line");
        }
        ++i;
        while (i < n && text[i] == ' ') ++i;
      }
    }
    char previous = ' ';  // the last character before i on this line, ' ' at its start
    for (; i < n && text[i] != '\n'; ++i) {
      const char c = text[i];
      if (quote != 0) {
        if (c == '\\' && quote == '"') {
          if (i + 1 < n && text[i + 1] != '\n') ++i;
        } else if (c == quote) {
          quote = 0;
        }
        if (c == '[' || c == '{') {
          if (++depth > kMaxYamlFlowDepth) break;
        }
        previous = c;
        continue;
      }
      if (c == '#' && (previous == ' ' || previous == '\t')) {
        while (i < n && text[i] != '\n') ++i;
        break;
      }
      if ((c == '\'' || c == '"') &&
          std::string_view(" \t:[{,-?!&").find(previous) != std::string_view::npos) {
        quote = c;
      } else if (c == '[' || c == '{') {
        if (++depth > kMaxYamlFlowDepth) break;
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;
      }
      previous = c;
    }
    if (depth > kMaxYamlFlowDepth) {
      return std::make_pair(line, "lists or maps in [ ] or { } nested more than " +
                                      std::to_string(kMaxYamlFlowDepth) + " deep");
    }
    if (i < n && text[i] == '\n') {
      ++line;
      ++i;
    }
  }
  return std::nullopt;
}

int YamlLine(const YAML::Node& node) {
  return node.Mark().is_null() ? 0 : node.Mark().line + 1;
}

// A NUL inside a value ("\0" in a double-quoted YAML string) would cut a path short where it
// reaches the system, and is never part of a user name or a hash.
void RejectNul(const std::string& file, int line, const std::string& key, const std::string& text) {
  if (text.find('\0') != std::string::npos) {
    throw ConfigError(
        file, line, key,
        "holds a NUL character (\\0), which would cut it short where it is used: " + Quote(text),
        "remove the \\0 escape (or the NUL byte)");
  }
}

std::string YamlScalar(const std::string& file, const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) {
    throw ConfigError(file, YamlLine(node), key, "must be a single value (a string)",
                      "write " + key.substr(key.rfind('.') + 1) + ": <value>");
  }
  RejectNul(file, YamlLine(node), key, node.Scalar());
  return node.Scalar();
}

// tls_server_config: cert_file and key_file, read and checked once here
// (web::LoadTlsMaterial): check-config and run refuse the same files, with the same exit
// code (78), before any port is opened.
std::optional<web::TlsMaterial> ReadTlsServerConfig(const std::string& file,
                                                    const std::filesystem::path& path,
                                                    const YAML::Node& value, int line,
                                                    WebConfigUse use) {
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
    RejectNul(file, YamlLine(tls.first), name, tls_key);
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
  if (use == WebConfigUse::kAsk) return web::TlsMaterial{cert_file, key_file, {}, {}};
  try {
    return web::LoadTlsMaterial(cert_file, key_file);
  } catch (const platform::FileError& e) {
    const bool cert = e.path() == cert_file;
    throw ConfigError(
        file, cert ? cert_line : key_line, key + (cert ? ".cert_file" : ".key_file"),
        "cannot read " + e.path().string() + ": " + e.cause(),
        e.fix() + " (relative paths are relative to " +
            (path.parent_path().empty() ? std::string(".") : path.parent_path().string()) + ")");
  } catch (const web::TlsMaterialError& e) {
    const bool cert = e.file() == web::TlsMaterialError::File::kCertificate;
    throw ConfigError(file, cert ? cert_line : key_line, key + (cert ? ".cert_file" : ".key_file"),
                      e.problem(), e.fix());
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
    RejectNul(file, YamlLine(user.first), full, name);
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

WebConfig LoadWebConfig(const std::filesystem::path& path, WebConfigUse use) {
  const std::string file = path.string();
  const std::string text = ReadConfigFile(path, kMaxWebConfigBytes, "web config file");
  if (const auto deep = FindTooDeepYaml(text)) {
    throw ConfigError(file, deep->first, "", "not a web config: " + deep->second,
                      "the web config nests 3 levels (tls_server_config: cert_file: ...); check "
                      "that this is the right file (format: docs/configuration.md)");
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, e.mark.is_null() ? 0 : e.mark.line + 1, "", "not valid YAML: " + e.msg,
                      "correct the syntax on that line (see docs/configuration.md for the format)");
  }
  WebConfig web;
  // exporter-toolkit takes an empty file for plain HTTP without auth; xferd does not, as it
  // refuses an empty TOML: a web config is named to protect the endpoint, and an empty one
  // is far more often a failed copy or a config-management run that wrote nothing. Also
  // checked below: a file whose keys turn nothing on ("basic_auth_users:" and the rest cut).
  const auto configures_nothing = [&file] {
    return ConfigError(file, 1, "",
                       "turns on neither TLS nor basic auth (an empty or cut-short file?); a "
                       "web config that protects nothing is refused, so that a failed copy "
                       "never turns protection off",
                       "restore tls_server_config and/or basic_auth_users (format: "
                       "docs/configuration.md), or to serve plain HTTP without auth on purpose "
                       "remove web.config_file (or --web.config.file)");
  };
  if (root.IsNull()) throw configures_nothing();
  if (!root.IsMap()) {
    throw ConfigError(file, YamlLine(root), "",
                      "must be a map of tls_server_config and basic_auth_users",
                      "see docs/configuration.md for the format");
  }
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      const int line = YamlLine(entry.first);
      RejectNul(file, line, key, key);
      if (key == "tls_server_config") {
        web.tls = ReadTlsServerConfig(file, path, entry.second, line, use);
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
  if (!web.TlsEnabled() && !web.AuthEnabled()) throw configures_nothing();
  return web;
}

}  // namespace xferd::config
