// /metrics serves the registry's text from a cache between changes (Metrics::Generation)
// and renders the per-scrape collectables (process_*) every time.
#include <gtest/gtest.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exporter/metrics.h"
#include "exporter/routes.h"

namespace xferd::exporter {

using namespace xferd::core;
using namespace xferd::web;
namespace {

// A gauge family whose value is the number of times it was collected.
class CountingCollectable : public prometheus::Collectable {
 public:
  explicit CountingCollectable(std::string name) : name_(std::move(name)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const int n = ++collected_;
    prometheus::MetricFamily family;
    family.name = name_;
    family.help = "times collected";
    family.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric metric;
    metric.gauge.value = n;
    family.metric.push_back(metric);
    return {family};
  }
  int collected() const { return collected_; }

 private:
  std::string name_;
  mutable std::atomic<int> collected_{0};
};

std::string Scrape(const HttpServer::Handler& handler) {
  const HttpResponse response = handler(HttpRequest{"GET", "/metrics", "", ""});
  EXPECT_EQ(response.status, 200);
  return (response.shared_body ? *response.shared_body : std::string()) + response.body;
}

// Metrics in a registry served as `xferd run` serves it: rendered once per generation.
struct CachedMetrics {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  Metrics metrics{*registry};
  HttpServer::Handler handler = MakeExporterHandler(Routes());

  ExporterRoutes Routes() {
    ExporterRoutes routes;
    routes.cached_collectables = {registry};
    routes.generation = [this] { return metrics.Generation(); };
    return routes;
  }
};

TEST(MetricsCache, NewValuesShowAtTheNextScrape) {
  CachedMetrics cached;
  Metrics& metrics = cached.metrics;
  const auto& handler = cached.handler;

  EXPECT_NE(Scrape(handler).find("xferd_cycles_total{result=\"ok\"} 0\n"), std::string::npos);
  EXPECT_NE(Scrape(handler).find("xferd_cycles_total{result=\"ok\"} 0\n"), std::string::npos);
  metrics.RecordCycle(0.25, CycleResult::kOk);
  const std::string after = Scrape(handler);
  EXPECT_NE(after.find("xferd_cycles_total{result=\"ok\"} 1\n"), std::string::npos) << after;
  EXPECT_NE(after.find("xferd_cycle_duration_seconds 0.25\n"), std::string::npos) << after;
  metrics.RecordStateWrite(false);
  EXPECT_NE(Scrape(handler).find("xferd_state_write_errors_total 1\n"), std::string::npos);
}

TEST(MetricsCache, RendersTheRegistryOncePerChangeAndTheRestEveryScrape) {
  auto cached = std::make_shared<CountingCollectable>("cached_part");
  auto fresh = std::make_shared<CountingCollectable>("fresh_part");
  std::atomic<std::uint64_t> generation{7};
  ExporterRoutes routes;
  routes.cached_collectables = {cached};
  routes.collectables = {fresh};
  routes.generation = [&generation] { return generation.load(); };
  const auto handler = MakeExporterHandler(routes);

  std::string body;
  for (int i = 0; i < 3; ++i) body = Scrape(handler);
  EXPECT_EQ(cached->collected(), 1);
  EXPECT_EQ(fresh->collected(), 3);
  // The cached part comes first, the per-scrape part after it, both whole.
  const auto cached_at = body.find("cached_part 1\n");
  const auto fresh_at = body.find("fresh_part 3\n");
  ASSERT_NE(cached_at, std::string::npos) << body;
  ASSERT_NE(fresh_at, std::string::npos) << body;
  EXPECT_LT(cached_at, fresh_at);

  ++generation;
  body = Scrape(handler);
  EXPECT_EQ(cached->collected(), 2);
  EXPECT_NE(body.find("cached_part 2\n"), std::string::npos) << body;
}

TEST(MetricsCache, WithoutAGenerationEveryScrapeRenders) {
  auto cached = std::make_shared<CountingCollectable>("cached_part");
  ExporterRoutes routes;
  routes.cached_collectables = {cached};
  const auto handler = MakeExporterHandler(routes);
  Scrape(handler);
  EXPECT_NE(Scrape(handler).find("cached_part 2\n"), std::string::npos);
  EXPECT_EQ(cached->collected(), 2);
}

// Scrapes racing the probe thread never keep a stale text once the writes stop.
TEST(MetricsCache, ScrapesDuringWritesEndOnTheLastValue) {
  CachedMetrics cached;
  Metrics& metrics = cached.metrics;
  const auto& handler = cached.handler;

  constexpr int kCycles = 300;
  std::atomic<bool> done{false};
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 2; ++t) {
    scrapers.emplace_back([&] {
      while (!done) Scrape(handler);
    });
  }
  for (int i = 0; i < kCycles; ++i) metrics.RecordCycle(0.1, CycleResult::kPartial);
  done = true;
  for (auto& t : scrapers) t.join();
  const std::string body = Scrape(handler);
  EXPECT_NE(body.find("xferd_cycles_total{result=\"partial\"} " + std::to_string(kCycles) + "\n"),
            std::string::npos)
      << body;
}

}  // namespace
}  // namespace xferd::exporter
