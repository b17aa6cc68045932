// The exporter's routes as a scraper meets them, through the real HTTP server over
// loopback: /metrics in the exposition format (gzip when asked), the landing page (the
// status page where there is a status document), /healthz, the telemetry path, and what is
// not served.
#include "exporter/routes.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <zlib.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "testing/http_client.h"
#include "web/http_server.h"

namespace xferd::exporter {

using namespace xferd::web;

namespace {

using fakes::Get;
using fakes::RawResponse;

// A server with the exporter's routes over a registry holding one counter.
struct Exporter {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::atomic<bool> healthy{true};
  std::unique_ptr<HttpServer> server;

  explicit Exporter(HttpServerOptions options = {}) {
    prometheus::BuildCounter()
        .Name("xferd_test_scrapes_total")
        .Help("A counter for the tests.")
        .Register(*registry)
        .Add({{"gpu", "0"}})
        .Increment(3);
    ExporterRoutes routes;
    routes.collectables = {registry};
    routes.version = "9.9.9-test";
    routes.health = [this] {
      return healthy ? HealthState{} : HealthState{false, "no probe cycle for 300 s"};
    };
    routes.status_line = [] { return std::string("gpu0: <ok> & steady"); };
    if (options.listen_address == ":9742") options.listen_address = "127.0.0.1:0";
    server = std::make_unique<HttpServer>(options, MakeExporterHandler(routes));
  }
  std::uint16_t port() const { return server->port(); }
};

// `r` is a 200 of `content_type` whose body holds each of `parts`.
void ExpectServed(const RawResponse& r, const std::string& content_type,
                  const std::vector<std::string>& parts) {
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), content_type);
  for (const std::string& part : parts) {
    EXPECT_NE(r.body.find(part), std::string::npos) << part << " not in:\n" << r.body;
  }
}

TEST(ExporterRoutes, ServesMetricsWithTheExpositionContentType) {
  Exporter exporter;
  ExpectServed(
      Get(exporter.port(), "/metrics"), "text/plain; version=0.0.4; charset=utf-8",
      {"# TYPE xferd_test_scrapes_total counter", "xferd_test_scrapes_total{gpu=\"0\"} 3"});
}

TEST(ExporterRoutes, UnknownPathsAndTraversalAre404) {
  Exporter exporter;
  for (const std::string path :
       {"/nope", "/metrics/", "//metrics", "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
        "/..%2f..%2fetc%2fpasswd", "/metrics/../../etc/passwd", "/healthz/..", "/index.html",
        "/metrics%00.html", "/metrics%00", "/%00"}) {
    const RawResponse r = Get(exporter.port(), path);
    EXPECT_TRUE(r.status == 404 || r.status == 400) << path << " -> " << r.status;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << path;
  }
}

TEST(ExporterRoutes, QueryStringDoesNotChangeTheRoute) {
  Exporter exporter;
  EXPECT_EQ(Get(exporter.port(), "/metrics?x=1").status, 200);
  // Paths are matched as sent: an encoded form of a served path is no path served.
  EXPECT_EQ(Get(exporter.port(), "/%6Detrics").status, 404);
}

TEST(ExporterRoutes, LandingPageLinksMetricsAndHealthAndEscapesStatus) {
  Exporter exporter;
  ExpectServed(
      Get(exporter.port(), "/"), "text/html; charset=utf-8",
      {"href=\"/metrics\"", "href=\"/healthz\"", "9.9.9-test", "gpu0: &lt;ok&gt; &amp; steady"});
}

TEST(ExporterRoutes, HealthzFollowsTheDaemonsVerdict) {
  Exporter exporter;
  RawResponse r = Get(exporter.port(), "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
  exporter.healthy = false;
  r = Get(exporter.port(), "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("no probe cycle for 300 s"), std::string::npos);
  EXPECT_NE(Get(exporter.port(), "/").body.find("unhealthy: no probe cycle"), std::string::npos);
}

TEST(ExporterRoutes, CustomTelemetryPath) {
  auto registry = std::make_shared<prometheus::Registry>();
  ExporterRoutes routes;
  routes.telemetry_path = "/probe/metrics";
  routes.collectables = {registry};
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  HttpServer server(options, MakeExporterHandler(routes));
  EXPECT_EQ(Get(server.port(), "/probe/metrics").status, 200);
  EXPECT_EQ(Get(server.port(), "/metrics").status, 404);
  EXPECT_NE(Get(server.port(), "/").body.find("href=\"/probe/metrics\""), std::string::npos);
}

TEST(ExporterRoutes, BadTelemetryPathIsAClearError) {
  for (const std::string path : {"", "metrics", "/healthz", "/", "/metrics?x", "/a b", "/%6d"}) {
    ExporterRoutes routes;
    routes.telemetry_path = path;
    try {
      MakeExporterHandler(routes);
      ADD_FAILURE() << "accepted '" << path << "'";
    } catch (const HttpError& e) {
      EXPECT_NE(std::string(e.what()).find("--web.telemetry-path"), std::string::npos);
    }
  }
}

TEST(ExporterRoutes, ExpiredCollectablesDropOut) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("xferd_gone_total").Help("h").Register(*registry).Add({});
  ExporterRoutes routes;
  routes.collectables = {registry};
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  HttpServer server(options, MakeExporterHandler(routes));
  EXPECT_NE(Get(server.port(), "/metrics").body.find("xferd_gone_total"), std::string::npos);
  registry.reset();
  const RawResponse r = Get(server.port(), "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.find("xferd_gone_total"), std::string::npos);
}

std::string Gunzip(const std::string& data) {
  z_stream stream{};
  EXPECT_EQ(inflateInit2(&stream, 15 + 16), Z_OK);
  std::string out(data.size() * 20 + 1024, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&stream, Z_FINISH), Z_STREAM_END);
  EXPECT_EQ(stream.avail_in, 0u);  // one gzip member, nothing after it
  out.resize(out.size() - stream.avail_out);
  inflateEnd(&stream);
  return out;
}

TEST(ExporterRoutes, MetricsInGzipWhenTheScraperAsks) {
  Exporter exporter;
  const auto port = exporter.port();
  const RawResponse plain = Get(port, "/metrics");
  EXPECT_EQ(plain.header("content-encoding"), "");
  EXPECT_EQ(plain.header("vary"), "Accept-Encoding");
  // What Prometheus sends.
  const RawResponse gzip = Get(port, "/metrics", "GET", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gzip.status, 200);
  EXPECT_EQ(gzip.header("content-encoding"), "gzip");
  EXPECT_EQ(gzip.header("vary"), "Accept-Encoding");
  EXPECT_EQ(gzip.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(Gunzip(gzip.body), plain.body);
  // HEAD: the length of the gzip body, no body.
  const RawResponse head = Get(port, "/metrics", "HEAD", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(std::stoul(head.header("content-length")), gzip.body.size());
  // Refused at q=0: identity.
  const RawResponse refused = Get(port, "/metrics", "GET", "Accept-Encoding: gzip;q=0\r\n");
  EXPECT_EQ(refused.header("content-encoding"), "");
  EXPECT_EQ(refused.body, plain.body);
}

// Where the daemon has a status document, / is its page: rendered from the document of the
// same rendering (one source), once per rendering whatever the number of requests, in gzip
// when asked, and loading nothing from elsewhere (its Content-Security-Policy says so).
TEST(ExporterRoutes, TheStatusPageIsAViewOfTheDocumentRenderedOnce) {
  std::atomic<int> renders{0};
  std::atomic<std::uint64_t> generation{1};
  ExporterRoutes routes;
  routes.status = [&] {
    ++renders;
    return "{\"version\":1,\"verdict\":\"ok\",\"summary\":\"render " +
           std::to_string(renders.load()) +
           "\",\"gpus\":[{\"gpu\":0,\"name\":\"<GPU>\",\"verdict\":\"ok\"}]}";
  };
  routes.status_generation = [&] { return generation.load(); };
  routes.status_max_age = std::chrono::hours(1);
  HttpServerOptions options;
  options.listen_address = "127.0.0.1:0";
  HttpServer server(options, MakeExporterHandler(routes));

  const RawResponse page = Get(server.port(), "/");
  ExpectServed(page, "text/html; charset=utf-8",
               {"render 1", "&lt;GPU&gt;", "href=\"/api/v1/status\"", "href=\"/metrics\"",
                "data-verdict=\"ok\""});
  EXPECT_EQ(page.header("cache-control"), "no-store");
  EXPECT_NE(page.header("content-security-policy").find("default-src 'none'"), std::string::npos);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Get(server.port(), "/").body, page.body);
  EXPECT_NE(Get(server.port(), "/api/v1/status").body.find("render 1"), std::string::npos);
  EXPECT_EQ(renders, 1) << "the page and the document: one rendering";
  const RawResponse gzip = Get(server.port(), "/", "GET", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gzip.header("content-encoding"), "gzip");
  EXPECT_EQ(Gunzip(gzip.body), page.body);
  EXPECT_LT(gzip.body.size(), page.body.size());

  ++generation;  // a record: the next request renders both again
  EXPECT_NE(Get(server.port(), "/").body.find("render 2"), std::string::npos);
  EXPECT_NE(Get(server.port(), "/api/v1/status").body.find("render 2"), std::string::npos);
  EXPECT_EQ(renders, 2);
}

}  // namespace
}  // namespace xferd::exporter
