#include "web/paths.h"

#include <string>

#include "platform/printable.h"
#include "web/http_error.h"

namespace xferd::web {

void CheckTelemetryPath(std::string_view path) {
  const std::string quoted = "\"" + platform::Printable(path, 80, /*escape_quotes=*/true) + "\"";
  const char* fix =
      "give --web.telemetry-path (or [web] telemetry_path) an absolute path such as /metrics";
  if (path.size() > kMaxPathBytes) {
    throw HttpError("telemetry path " + quoted + " is " + std::to_string(path.size()) +
                        " bytes long; the server answers paths of at most " +
                        std::to_string(kMaxPathBytes) + " bytes (414 beyond)",
                    fix);
  }
  if (path.empty() || path.front() != '/') {
    throw HttpError("telemetry path " + quoted + " must start with '/'", fix);
  }
  if (path == kLandingPath || path == kHealthPath || path == kStatusPath) {
    throw HttpError("telemetry path " + quoted + " is taken by the " +
                        (path == kLandingPath  ? "landing page"
                         : path == kHealthPath ? "health check"
                                               : "status API"),
                    fix);
  }
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    // The server decodes %XX and cuts the query at '?': such a path could never match.
    if (u <= 0x20 || u == 0x7f || c == '?' || c == '#' || c == '%') {
      throw HttpError(
          "telemetry path " + quoted + " must be a plain path without spaces, '?', '#' or '%'",
          fix);
    }
  }
}

}  // namespace xferd::web
