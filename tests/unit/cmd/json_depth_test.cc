// The depth check `xferd health`, `xferd status` and `xferd evidence` run before they build a
// document (cmd/json_depth.h): a GPU name or a cause's detail full of brackets is text, not
// nesting, so a real document is never refused for it; a text nested past the limit is.
#include "cmd/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace xferd::cmd {
namespace {

TEST(JsonNestsDeeperThan, CountsObjectsAndArraysInsideEachOther) {
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"gpus": [{"link": {}}]})", 4));
  EXPECT_TRUE(JsonNestsDeeperThan(R"({"gpus": [{"link": {}}]})", 3));
  EXPECT_FALSE(JsonNestsDeeperThan("[][][][]", 1));  // side by side, not inside
  EXPECT_TRUE(JsonNestsDeeperThan(std::string(100000, '['), 32));
}

TEST(JsonNestsDeeperThan, BracketsInStringsAreText) {
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"name": "[[[[{{{{"})", 1));
  // An escaped quote does not end the string; an escaped backslash before the quote does.
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"name": "a\"[[[["})", 1));
  EXPECT_TRUE(JsonNestsDeeperThan(R"({"name": "a\\", "b": [[]]})", 2));
}

}  // namespace
}  // namespace xferd::cmd
