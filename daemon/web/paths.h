// The paths the endpoint serves besides the metrics, and the one check of a telemetry path
// (config file, --web.telemetry-path and the routes ask the same question). Paths are
// compared as sent (below).
#pragma once

#include <cstddef>
#include <string_view>

namespace xferd::web {

inline constexpr std::string_view kLandingPath = "/";
inline constexpr std::string_view kHealthPath = "/healthz";
// The status API (JSON; docs/http.md): versioned in its path.
inline constexpr std::string_view kStatusPath = "/api/v1/status";

// The longest request path the server routes; longer ones get 414 (URI Too Long). A
// telemetry path is held to the same limit, so that it can always be requested (and the
// request line fits the server's per-connection buffer, 32 KiB, with room for headers).
inline constexpr std::size_t kMaxPathBytes = 1024;

// An absolute, plain path (no spaces, '?', '#' or '%', at most kMaxPathBytes) other than /,
// /healthz and /api/v1/status. Throws HttpError naming the problem; the fix suggests /metrics.
void CheckTelemetryPath(std::string_view path);

// A request path is matched as it was sent, never percent-decoded: "/api%2fv1%2fstatus",
// "/%6detrics" or "/metrics%00.html" name no path the server serves (404), as a front
// proxy's rule on the raw path reads them. No path served holds '%' (CheckTelemetryPath),
// so no encoded form can reach one.

}  // namespace xferd::web
