#include "web/content_coding.h"

#include <gtest/gtest.h>

namespace xferd::web {
namespace {

TEST(AcceptsGzip, FollowsTheHeaderWithItsQualities) {
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("GZip"));
  EXPECT_TRUE(AcceptsGzip("x-gzip"));
  EXPECT_TRUE(AcceptsGzip("gzip, deflate, br"));  // curl, browsers
  EXPECT_TRUE(AcceptsGzip("identity;q=0.5, gzip;q=1.0"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_TRUE(AcceptsGzip(" deflate ;q=0.9 , * ; q=0.1"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0.000"));
  EXPECT_FALSE(AcceptsGzip("*;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0, *"));  // gzip named at 0 wins over the wildcard
  EXPECT_TRUE(AcceptsGzip("*;q=0, gzip;q=0.001"));
  EXPECT_FALSE(AcceptsGzip("deflate, br, identity"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=2"));       // malformed quality: not listed
  EXPECT_FALSE(AcceptsGzip("gzip;q=0.5000"));  // four decimals
  EXPECT_FALSE(AcceptsGzip("gzip;level=9"));   // not a quality
  EXPECT_FALSE(AcceptsGzip("gzipx, xgzip"));
  EXPECT_FALSE(AcceptsGzip(",,,;;;==="));
}

}  // namespace
}  // namespace xferd::web
