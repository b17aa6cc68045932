#include "exporter/http_metrics.h"

#include <string>
#include <utility>

namespace xferd::exporter {

HttpRefusalMetrics::HttpRefusalMetrics(std::function<web::HttpRefusals()> source)
    : source_(std::move(source)) {}

std::vector<prometheus::MetricFamily> HttpRefusalMetrics::Collect() const {
  const web::HttpRefusals refusals = source_ ? source_() : web::HttpRefusals{};
  prometheus::MetricFamily family;
  family.name = "xferd_http_refusals_total";
  family.help =
      "Connections and logins the HTTP server refused, by reason: address_limit (past the "
      "connections one client address may hold), connection_limit (the server full), "
      "login_rate_limited (429), login_busy (503). Each is also said in the log, at most once "
      "a minute.";
  family.type = prometheus::MetricType::Counter;
  for (const web::Refusal reason : web::kAllRefusals) {
    prometheus::ClientMetric metric;
    metric.label.push_back({"reason", std::string(web::ToString(reason))});
    metric.counter.value = static_cast<double>(refusals.Of(reason));
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

}  // namespace xferd::exporter
