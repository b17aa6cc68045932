// [metrics]: which series the exporter publishes (docs/metrics.md, "Profiles").
#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"

namespace xferd::config {

void ReadMetrics(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "metrics");
  if (!table) return;
  TableReader r(file, *table, "metrics");
  if (auto v = r.String("profile", "\"full\"")) {
    if (*v == "full") {
      config.metrics_profile = core::Settings::MetricsProfile::kFull;
    } else if (*v == "fleet") {
      config.metrics_profile = core::Settings::MetricsProfile::kFleet;
    } else {
      r.Fail(*r.Find("profile"), "profile", "unknown profile " + Quote(*v),
             "write profile = \"full\" (every series: histograms, every mode's gauges; about "
             "300 a GPU) or \"fleet\" (what fleet alerts and dashboards read: about 45 a GPU)");
    }
  }
  r.RejectUnknown();
  // The fleet profile exports no histograms: asking for the headline's beside it would
  // ask for something that does not happen. ("all", the default the shipped file writes,
  // only says what the full profile does.)
  const toml::table* probe = root["probe"].as_table();
  const toml::node* histograms = probe != nullptr ? probe->get("histograms") : nullptr;
  if (config.metrics_profile == core::Settings::MetricsProfile::kFleet && histograms != nullptr &&
      config.histograms == core::Settings::Histograms::kHeadline) {
    throw ConfigError(file, LineOf(*histograms), "probe.histograms",
                      "histograms = \"headline\" asks for the headline probes' duration "
                      "histograms, which the fleet profile ([metrics] profile = \"fleet\", line " +
                          std::to_string(LineOf(*r.Find("profile"))) + ") does not export",
                      "remove probe.histograms (the fleet profile keeps the headline "
                      "bandwidth gauges), or set [metrics] profile = \"full\"");
  }
}

}  // namespace xferd::config
