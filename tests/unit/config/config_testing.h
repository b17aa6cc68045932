// What the config tests share: the test data, the shipped example, a parse of text as a
// file would be parsed, and the ConfigError a text gets.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "config/config.h"
#include "testing/fakes.h"

namespace xferd::config {

// What the config's tests name most: the layers the config is made of, and the matchers.
using namespace xferd::core;
using namespace xferd::web;
using ::testing::HasSubstr;
using ::testing::StartsWith;

inline const std::filesystem::path kDataDir = XFERD_TEST_DATA_DIR;
inline const std::filesystem::path kExample = kDataDir / ".." / ".." / "deploy" / "xferd.toml";
// A syntactically valid bcrypt hash (of "secret", cost 4).
inline constexpr const char* kHash = "$2b$04$aHyav/PGMFasSu1k8usBye249LsIcGIogrG34pf.Tv/ttTDmuphaK";

class TempDir : public fakes::TempDir {
 public:
  TempDir() : fakes::TempDir("config") {}
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
