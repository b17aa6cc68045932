// Text -> Config: the checks toml++ needs first, the parse, and each section's reader.
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "config/config.h"
#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "config/toml_workarounds.h"
#include "platform/files.h"

namespace xferd::config {
namespace {

bool IsBlank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  });
}

Config ParseConfigText(std::string_view text, const std::filesystem::path& source,
                       bool explain_values);

// Where the value of the `key = value` on `line` (1-based) is in `text`: from after the
// `=` (outside quotes) to the end of the line; nullopt when the line holds no `=`.
std::optional<std::pair<std::size_t, std::size_t>> ValueSpan(std::string_view text, int line) {
  std::size_t begin = 0;
  for (int at = 1; at < line; ++at) {
    begin = text.find('\n', begin);
    if (begin == std::string_view::npos) return std::nullopt;
    ++begin;
  }
  const std::size_t end = std::min(text.find('\n', begin), text.size());
  char quote = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '=') {
      return std::make_pair(i + 1, end);
    }
  }
  return std::nullopt;
}

// `text` with that value replaced by a date: a TOML type no xferd key takes, so that the
// key's reader says what type it does take.
std::optional<std::string> WithDateValue(std::string_view text, int line) {
  const auto span = ValueSpan(text, line);
  if (!span) return std::nullopt;
  return std::string(text.substr(0, span->first)) + " 1979-05-27" +
         std::string(text.substr(span->second));
}

// The value as written, without the blanks around it.
std::string ValueText(std::string_view text, int line) {
  const auto span = ValueSpan(text, line);
  if (!span) return "";
  std::string_view value = text.substr(span->first, span->second - span->first);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r'))
    value.remove_suffix(1);
  return std::string(value);
}

// What the key on `line` takes, as its reader says it ("must be an integer") and its fix,
// for a value TOML could not parse: the file is read again with a date in its place (and in
// the place of any other value TOML cannot parse), and the reader's complaint about the date
// is the answer. nullopt when the file fails first somewhere else, or the key takes anything.
std::optional<std::pair<std::string, std::string>> ExpectedValue(
    std::string_view text, int line, const std::filesystem::path& source) {
  std::optional<std::string> patched = WithDateValue(text, line);
  for (int attempt = 0; patched && attempt < 16; ++attempt) {
    try {
      ParseConfigText(*patched, source, /*explain_values=*/false);
      return std::nullopt;
    } catch (const ConfigError& e) {
      const std::size_t got = e.problem().find(", got a date");
      if (e.line() == line && got != std::string::npos) {
        return std::make_pair(e.problem().substr(0, got), e.fix());
      }
      // Another value further down that TOML cannot parse either: replace it too.
      if (e.line() <= line || e.problem().rfind("not valid TOML: ", 0) != 0) return std::nullopt;
      patched = WithDateValue(*patched, e.line());
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

std::filesystem::path ResolveAgainst(const std::filesystem::path& base_file,
                                     const std::filesystem::path& path) {
  if (path.empty() || path.is_absolute()) return path;
  return base_file.parent_path() / path;
}

std::string ReadConfigFile(const std::filesystem::path& path, std::size_t max_bytes,
                           std::string_view what) {
  try {
    return platform::ReadFileBounded(path, max_bytes, what);
  } catch (const platform::FileError& e) {
    std::string fix = e.fix();
    if (e.error() == ENOENT) fix += "; the example config is deploy/xferd.toml";
    throw ConfigError(path.string(), 0, "", "cannot read the file: " + e.cause(), fix);
  }
}

Config ParseConfig(std::string_view text, const std::filesystem::path& source) {
  return ParseConfigText(text, source, /*explain_values=*/true);
}

namespace {

// `explain_values`: a value TOML cannot parse is explained with the type its key takes.
Config ParseConfigText(std::string_view text, const std::filesystem::path& source,
                       bool explain_values) {
  const std::string file = source.string();
  if (IsBlank(text)) {
    throw ConfigError(file, 0, "", "the file is empty",
                      "start from the annotated example deploy/xferd.toml (installed as "
                      "/etc/xferd/xferd.toml), which spells out every default");
  }
  if (text.size() > kMaxConfigBytes) {
    throw ConfigError(
        file, 0, "", "the file is " + std::to_string(text.size()) + " bytes; a config is a few KiB",
        "check that this is the xferd configuration (start from deploy/xferd.toml)");
  }
  unsigned bad_byte = 0;
  // "not valid TOML: WHAT (byte 0x00); is this a binary file?"
  const auto binary = [&bad_byte](const char* what) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", bad_byte);
    return std::string("not valid TOML: ") + what + " (byte " + byte + "); is this a binary file?";
  };
  if (const int line = FirstInvalidUtf8Line(text, &bad_byte)) {
    throw ConfigError(file, line, KeyAtLine(text, line), binary("invalid UTF-8"),
                      "save the file as UTF-8 text; start from deploy/xferd.toml");
  }
  if (const int line = FirstControlCharacterLine(text, &bad_byte)) {
    throw ConfigError(file, line, KeyAtLine(text, line), binary("a control character"),
                      "remove the character: TOML allows none but tab, even in strings and "
                      "comments (write a NUL inside a string as \\u0000 if you must)");
  }
  if (const int line = FirstNonAsciiOutsideStrings(text)) {
    throw ConfigError(file, line, KeyAtLine(text, line),
                      "not valid TOML: a non-ASCII character outside a string or comment (or "
                      "right after a backslash in a string)",
                      "keys and values other than strings are plain ASCII; quote text, or remove "
                      "the stray character (often a non-breaking space pasted from a web page)");
  }
  // toml++ recurses per level of nesting: a file nested deep enough would overflow the stack
  // (a crash, where the promise is exit 78 or, on reload, the old configuration kept).
  if (const auto nesting = FindTooDeepNesting(text)) {
    throw ConfigError(file, nesting->line, "", "not an xferd config: " + nesting->problem,
                      "xferd's keys have at most 3 parts (simulate.fault.kind) and its values "
                      "nest 2 deep; check that this is the xferd configuration (start from "
                      "deploy/xferd.toml)");
  }
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    int line = static_cast<int>(e.source().begin.line);
    std::string problem(e.description());
    std::string key = KeyAtLine(text, line);
    // Something left open at the end of the file (a string, an array) began at the last
    // key above: name that one.
    if (key.empty() && problem.find("end-of-file") != std::string::npos) {
      auto [above, above_key] = LastKeyAtOrAbove(text, line);
      if (above > 0) line = above, key = std::move(above_key);
    }
    if (!problem.empty())
      problem[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(problem[0])));
    // A value TOML cannot read (`consecutive_bad = three`, `interval = 60s`): say what the
    // key takes, in its reader's words, rather than what toml++ guessed it began as.
    if (!key.empty() && explain_values && problem.find("end-of-file") == std::string::npos) {
      if (const auto expected = ExpectedValue(text, line, source)) {
        // toml++'s guess at what the value began as ("error while parsing boolean" for
        // `three`) only misleads here: what the key takes is the point.
        throw ConfigError(file, line, key,
                          "not valid TOML: " + Quote(ValueText(text, line)) +
                              " is no value TOML can read (a string needs quotes); the value " +
                              expected->first,
                          expected->second);
      }
    }
    throw ConfigError(file, line, key, "not valid TOML: " + problem,
                      "correct the syntax on that line (strings need \"quotes\", one key per line, "
                      "each key and [section] once; see deploy/xferd.toml)");
  }

  RejectControlCharacters(file, root);

  Config config;
  config.source = source;
  TableReader top(file, root, "");
  top.RejectUnknown();

  // [simulate] first: whether the device is simulated changes the limits in [probe].
  ReadSimulate(file, root, config);
  ReadWeb(file, source, root, config);
  ReadDaemon(file, source, root, config);
  ReadProbe(file, root, config.simulate, config);
  ReadBusy(file, root, config);
  ReadHealth(file, root, config);
  ReadMetrics(file, root, config);
  CheckBudget(config, text);
  return config;
}

}  // namespace

Config LoadConfig(const std::filesystem::path& path) {
  const std::string text = ReadConfigFile(path);
  Config config = ParseConfig(text, path);
  if (config.web_config_file.empty()) return config;
  try {
    config.web = LoadWebConfig(config.web_config_file);
  } catch (const ConfigError& e) {
    // A YAML file that cannot be read at all is a mistake in this file's web.config_file.
    if (e.line() != 0 || e.file() != config.web_config_file.string()) throw;
    throw ConfigError(path.string(), LineOfKey(text, "web.config_file"), "web.config_file",
                      "cannot use " + e.file() + ": " + e.problem(),
                      "check the path (relative paths are relative to this file's directory), or "
                      "remove config_file for plain HTTP");
  }
  return config;
}

}  // namespace xferd::config
