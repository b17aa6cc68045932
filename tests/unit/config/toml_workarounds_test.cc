// The nesting toml++ is kept from (config/toml_workarounds.cc): counted before it parses,
// only where TOML nests.
#include "config/toml_workarounds.h"

#include <string>

#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

TEST(ConfigNesting, LimitsCountOnlyWhatTomlNests) {
  // At the limits: accepted by the scan (toml++ then judges the keys).
  const std::string parts16 = "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a = 1\n";
  EXPECT_FALSE(FindTooDeepNesting(parts16));
  EXPECT_TRUE(FindTooDeepNesting("a." + parts16));
  EXPECT_FALSE(FindTooDeepNesting("x = " + std::string(16, '[') + std::string(16, ']') + "\n"));
  EXPECT_TRUE(FindTooDeepNesting("x = " + std::string(17, '[') + std::string(17, ']') + "\n"));
  // Dots and brackets inside strings and comments are not nesting.
  EXPECT_FALSE(FindTooDeepNesting("x = \"" + std::string(100, '.') + std::string(100, '[') +
                                  "\"\n# " + std::string(100, '{') + "\n"));
  EXPECT_FALSE(FindTooDeepNesting("x = '" + std::string(100, '.') + "'\n"));
  EXPECT_FALSE(FindTooDeepNesting("x = '''\n'" + std::string(100, '[') + "\n'''\n"));
  EXPECT_FALSE(FindTooDeepNesting("x = \"\"\"\n\"\"" + std::string(100, '[') + "\n\"\"\"\"\"\n"));
  // A multi-line string ends at its last quote: what follows is counted again.
  const auto deep = FindTooDeepNesting("x = \"\"\"a\"\"\"\"\ny = " + std::string(20, '[') + "\n");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->line, 2);
  // An escaped quote does not end a string; a newline ends a single-line one (an error).
  EXPECT_FALSE(FindTooDeepNesting("x = \"\\\"" + std::string(40, '[') + "\"\n"));
  EXPECT_TRUE(FindTooDeepNesting("x = \"open\ny = " + std::string(40, '[') + "\n"));
  // Numbers and dates have their own dots.
  EXPECT_FALSE(FindTooDeepNesting("[probe]\njitter = 0.1\nx = 1979-05-27T07:32:00.999Z\n"));
  EXPECT_FALSE(FindTooDeepNesting(ReadAll(kExample)));
}

}  // namespace
}  // namespace xferd::config
