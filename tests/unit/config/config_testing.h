// What the config tests share: the test data, the shipped example, a parse of text as a
// file would be parsed, and the ConfigError a text gets.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "config/config.h"
#include "testing/fakes.h"

namespace xferd::config {

inline const std::filesystem::path kDataDir = XFERD_TEST_DATA_DIR;
inline const std::filesystem::path kExample = kDataDir / ".." / ".." / "deploy" / "xferd.toml";
// A syntactically valid bcrypt hash (of "secret", cost 4).
inline constexpr const char* kHash = "$2b$04$aHyav/PGMFasSu1k8usBye249LsIcGIogrG34pf.Tv/ttTDmuphaK";

class TempDir : public fakes::TempDir {
 public:
  TempDir() : fakes::TempDir("config") {
    // Traversable by the unprivileged user the unreadable-file test runs as.
    std::filesystem::permissions(path(), std::filesystem::perms::owner_all |
                                             std::filesystem::perms::group_exec |
                                             std::filesystem::perms::others_exec);
  }
};

inline std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline Config Parse(const std::string& text) {
  return ParseConfig(text, "test.toml");
}

// The ConfigError ParseConfig throws for `text`; fails the test when none is thrown.
inline ConfigError ErrorOf(const std::string& text) {
  try {
    Parse(text);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return ConfigError("", 0, "", "", "");
}

}  // namespace xferd::config
