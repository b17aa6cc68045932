#include "exporter/routes.h"

#include <memory>
#include <mutex>
#include <utility>

#include "web/paths.h"

namespace xferd::exporter {

using web::HttpRequest;
using web::HttpResponse;
using web::HttpServer;
using web::kHealthPath;
using web::kLandingPath;
namespace {

std::string EscapeHtml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

HttpResponse Text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return r;
}

std::string LandingPage(const ExporterRoutes& routes) {
  const HealthState health = routes.health ? routes.health() : HealthState{};
  const std::string status = routes.status_line ? routes.status_line() : std::string();
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">"
      "<title>xferd</title></head>\n<body>\n<h1>xferd</h1>\n"
      "<p>Host&harr;GPU transfer bandwidth exporter, version " +
      EscapeHtml(routes.version) + "</p>\n";
  page += "<p>Health: " +
          EscapeHtml(health.healthy ? std::string("ok") : "unhealthy: " + health.reason) + "</p>\n";
  if (!status.empty()) page += "<p>Status: " + EscapeHtml(status) + "</p>\n";
  page += "<ul>\n<li><a href=\"" + EscapeHtml(routes.telemetry_path) + "\">Metrics</a></li>\n" +
          "<li><a href=\"" + std::string(kHealthPath) + "\">Health check</a></li>\n</ul>\n" +
          "</body>\n</html>\n";
  return page;
}

// The last rendered text of the cached collectables and the generation it was rendered at.
class RenderedRegistry {
 public:
  std::shared_ptr<const std::string> Text(const ExporterRoutes& routes) {
    if (!routes.generation) {
      return std::make_shared<const std::string>(RenderExposition(routes.cached_collectables));
    }
    // Read before rendering: a write during the render bumps it past `now`, so the next
    // scrape renders again rather than keep a half-old text.
    const std::uint64_t now = routes.generation();
    {
      std::lock_guard lock(mutex_);
      if (text_ && generation_ == now) return text_;
    }
    auto text = std::make_shared<const std::string>(RenderExposition(routes.cached_collectables));
    std::lock_guard lock(mutex_);
    if (!text_ || now >= generation_) {
      text_ = text;
      generation_ = now;
    }
    return text;
  }

 private:
  std::mutex mutex_;
  std::shared_ptr<const std::string> text_;
  std::uint64_t generation_ = 0;
};

std::string MetricsBody(const ExporterRoutes& routes, RenderedRegistry& registry) {
  std::string body;
  if (!routes.cached_collectables.empty()) body = *registry.Text(routes);
  body += RenderExposition(routes.collectables);
  return body;
}

}  // namespace

HttpServer::Handler MakeExporterHandler(ExporterRoutes routes) {
  web::CheckTelemetryPath(routes.telemetry_path);
  auto shared = std::make_shared<const ExporterRoutes>(std::move(routes));
  auto rendered = std::make_shared<RenderedRegistry>();
  return [shared, rendered](const HttpRequest& request) -> HttpResponse {
    const ExporterRoutes& r = *shared;
    // Exact matches only: "/metrics/", "/../metrics" and the like are not the metrics.
    if (request.path == r.telemetry_path) {
      HttpResponse response = Text(200, MetricsBody(r, *rendered));
      response.content_type = std::string(kExpositionContentType);
      return response;
    }
    if (request.path == kHealthPath) {
      const HealthState health = r.health ? r.health() : HealthState{};
      if (health.healthy) return Text(200, "ok\n");
      HttpResponse response = Text(503, "unhealthy: " + health.reason + "\n");
      response.headers.emplace_back("Cache-Control", "no-store");
      return response;
    }
    if (request.path == kLandingPath) {
      HttpResponse response = Text(200, LandingPage(r));
      response.content_type = "text/html; charset=utf-8";
      return response;
    }
    return Text(404, "Not Found\n");
  };
}

}  // namespace xferd::exporter
