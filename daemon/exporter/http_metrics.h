// xferd_http_refusals_total{reason}: what the HTTP server (and the health socket) turned
// away, read from the servers at each scrape. Not in the registry: a flood changes it
// thousands of times a second, and the registry's text is rendered once per change
// (Metrics::Generation), which a flood would turn into once per scrape.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <vector>

#include "web/http_server.h"

namespace xferd::exporter {

class HttpRefusalMetrics : public prometheus::Collectable {
 public:
  explicit HttpRefusalMetrics(std::function<web::HttpRefusals()> source);
  // One series per web::Refusal, 0 until the first.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<web::HttpRefusals()> source_;
};

}  // namespace xferd::exporter
