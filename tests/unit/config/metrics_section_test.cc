// [metrics]: the profile, its errors, and what it does to the series a file is held to.
#include "unit/config/config_testing.h"

namespace xferd::config {
namespace {

using Profile = core::Settings::MetricsProfile;

TEST(MetricsSection, FullByDefaultAndFleetWhenAsked) {
  EXPECT_EQ(Parse("[probe]\n").metrics_profile, Profile::kFull);
  EXPECT_EQ(Parse("[metrics]\nprofile = \"full\"\n").metrics_profile, Profile::kFull);
  const Config fleet = Parse("[metrics]\nprofile = \"fleet\"\n");
  EXPECT_EQ(fleet.metrics_profile, Profile::kFleet);
  // The fleet profile is held to its own count: a fifth of the full one's, at most 60.
  EXPECT_LE(EstimateSeries(fleet).per_gpu + EstimateSeries(fleet).concurrent_per_gpu, 60u);
  EXPECT_LT(EstimateSeries(fleet).per_gpu * 5, EstimateSeries(Parse("[probe]\n")).per_gpu);
}

TEST(MetricsSection, AnUnknownProfileNamesBoth) {
  const ConfigError e = ErrorOf("[metrics]\nprofile = \"small\"\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_THAT(e.what(), HasSubstr("metrics.profile"));
  EXPECT_THAT(e.what(), HasSubstr("unknown profile \"small\""));
  EXPECT_THAT(e.what(), HasSubstr("\"full\""));
  EXPECT_THAT(e.what(), HasSubstr("\"fleet\""));
}

TEST(MetricsSection, UnknownKeysAndTypesAreRefused) {
  EXPECT_THAT(ErrorOf("[metrics]\nprofil = \"fleet\"\n").what(), HasSubstr("metrics.profil"));
  EXPECT_THAT(ErrorOf("[metrics]\nprofile = 1\n").what(), HasSubstr("metrics.profile"));
}

TEST(MetricsSection, HeadlineHistogramsBesideTheFleetProfileAreRefused) {
  const ConfigError e =
      ErrorOf("[probe]\nhistograms = \"headline\"\n\n[metrics]\nprofile = \"fleet\"\n");
  EXPECT_EQ(e.line(), 2);
  EXPECT_THAT(e.what(), HasSubstr("probe.histograms"));
  EXPECT_THAT(e.what(), HasSubstr("line 5"));
  EXPECT_THAT(e.what(), HasSubstr("remove probe.histograms"));
  // "all", the default the shipped file spells out, only says what the full profile does.
  EXPECT_EQ(Parse("[probe]\nhistograms = \"all\"\n[metrics]\nprofile = \"fleet\"\n")
                .metrics_profile,
            Profile::kFleet);
  EXPECT_EQ(Parse("[probe]\nhistograms = \"headline\"\n[metrics]\nprofile = \"full\"\n")
                .histograms,
            core::Settings::Histograms::kHeadline);
}

}  // namespace
}  // namespace xferd::config
