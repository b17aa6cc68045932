// What xferd's HTTP endpoint answers: the metrics, a landing page, /healthz, the status API
// (/api/v1/status), 404 for the rest. No path ever reaches the filesystem.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "exporter/exposition.h"
#include "web/http_server.h"

namespace xferd::exporter {

// The daemon's own view of whether it is working, for /healthz and the landing page.
struct HealthState {
  bool healthy = true;
  std::string reason;  // why not, e.g. "no probe cycle finished for 185 s (interval 60 s)"
};

struct ExporterRoutes {
  std::string telemetry_path = "/metrics";
  Collectables collectables;
  std::function<HealthState()> health;       // unset: always healthy
  std::function<std::string()> status_line;  // one line on the landing page; unset: none
  // The status API's document (exporter/status.h) for web::kStatusPath; unset: 404 there.
  // Rendered once per change of `status_generation` and at most once per `status_max_age`
  // (the daemon's own part: its age, its health), and that text (and its gzip, made once
  // when a client asks for it) served to every request meanwhile, without a copy: a 64-GPU host's
  // document is ~600 KB, and 50 clients rendering and holding one each took the daemon past
  // its 32 MiB (docs/performance.md). The document's `time` says when it was rendered.
  std::function<std::string()> status;
  std::chrono::milliseconds status_max_age{1000};
  // What the document is rendered from changes when this does (unset: only its age counts).
  std::function<std::uint64_t()> status_generation;
  std::string version;  // shown on the landing page
  // Collectables whose values change only when `generation()` does (the registry: only
  // Metrics writes it; see Metrics::Generation). Their text is rendered once per change
  // and served from a cache in between, ahead of `collectables`, which are rendered on
  // every scrape (process_* metrics change all the time). Rendering the registry is most
  // of a scrape's cost (docs/performance.md) and it changes once per probe, not per
  // scrape. Without `generation` they are rendered on every scrape too.
  Collectables cached_collectables;
  std::function<std::uint64_t()> generation;
};

// Throws web::HttpError when telemetry_path fails web::CheckTelemetryPath.
web::HttpServer::Handler MakeExporterHandler(ExporterRoutes routes);

}  // namespace xferd::exporter
