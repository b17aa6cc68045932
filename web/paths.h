// The paths the endpoint serves besides the metrics, and the one check of a telemetry path
// (config file, --web.telemetry-path and the routes ask the same question).
#pragma once

#include <string_view>

namespace xferd::web {

inline constexpr std::string_view kLandingPath = "/";
inline constexpr std::string_view kHealthPath = "/healthz";

// An absolute, plain path (no spaces, '?', '#' or '%') other than / and /healthz. Throws
// HttpError naming the problem; the fix suggests /metrics.
void CheckTelemetryPath(std::string_view path);

}  // namespace xferd::web
