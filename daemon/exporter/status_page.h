// The status page (GET /): the status document (/api/v1/status) as a person reads it in ten
// seconds, the way Prometheus's own status pages are made: server-rendered HTML from the
// same state the API serves (the document's text, read by status_view.h: the page holds
// nothing the document does not), one table per concern with the age of each fact, a small
// inline SVG plot per GPU of its recent readings against its band; no JavaScript, no asset
// from anywhere else (styles inline), every outside string escaped. docs/http.md ("The
// status page") shows it.
//
// The routes render it once per rendering of the document, when a client first asks for it,
// and serve that text to every request meanwhile (exporter/routes.h).
#pragma once

#include <string>
#include <string_view>

namespace xferd::exporter {

// The page of a status document's text. `telemetry_path` is where the metrics are served
// (linked from the page beside /healthz and the document). A text that is no document gives
// a page that says so.
std::string RenderStatusPage(std::string_view document, std::string_view telemetry_path);

// Text made safe inside HTML elements and quoted attributes (& < > " ').
std::string EscapeHtml(std::string_view text);

}  // namespace xferd::exporter
