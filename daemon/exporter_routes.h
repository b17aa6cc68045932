// What xferd's HTTP endpoint answers: the metrics, a landing page, /healthz, 404 for the
// rest. No path ever reaches the filesystem.
#pragma once

#include <functional>
#include <string>

#include "daemon/exposition.h"
#include "daemon/http_server.h"

namespace xferd::daemon {

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
  std::string version;                       // shown on the landing page
};

// Throws HttpError when telemetry_path is not an absolute path other than "/healthz".
HttpServer::Handler MakeExporterHandler(ExporterRoutes routes);

}  // namespace xferd::daemon
