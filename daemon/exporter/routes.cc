#include "exporter/routes.h"

#include <malloc.h>
#include <zlib.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "exporter/status_page.h"
#include "web/content_coding.h"
#include "web/paths.h"

namespace xferd::exporter {

using web::HttpRequest;
using web::HttpResponse;
using web::HttpServer;
using web::kHealthPath;
using web::kLandingPath;
using web::kStatusPath;
namespace {

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
  page +=
      "<ul>\n<li><a href=\"" + EscapeHtml(routes.telemetry_path) + "\">Metrics</a></li>\n" +
      "<li><a href=\"" + std::string(kHealthPath) + "\">Health check</a></li>\n" +
      (routes.status ? "<li><a href=\"" + std::string(kStatusPath) + "\">Status (JSON)</a></li>\n"
                     : std::string()) +
      "</ul>\n" + "</body>\n</html>\n";
  return page;
}

// The registry's text at one generation and, made the first time a scraper asks for gzip,
// the start of a gzip stream of it: the text deflated and flushed to a byte boundary
// (Z_SYNC_FLUSH), with the compressor's state kept. A gzip scrape copies that state
// (deflateCopy, ~256 KiB of memcpy), compresses only the per-scrape text (process_*) onto
// the copy and finishes the stream: the registry's text is compressed once per generation,
// like it is rendered once, and the answer is still one ordinary gzip member.
class RenderedText {
 public:
  explicit RenderedText(std::string text)
      : shared_(std::make_shared<const std::string>(std::move(text))), text_(*shared_) {}
  ~RenderedText() {
    if (ready_) deflateEnd(&state_);
  }
  RenderedText(const RenderedText&) = delete;
  RenderedText& operator=(const RenderedText&) = delete;

  const std::string& text() const { return text_; }
  // The same text, for answers that hold it until they are sent.
  const std::shared_ptr<const std::string>& shared_text() const { return shared_; }

  // text() + tail, gzipped. Safe from several threads at once: the kept state is only read.
  std::string Gzip(std::string_view tail) const {
    std::call_once(compressed_, [this] { CompressText(); });
    z_stream stream{};
    if (!ready_ || deflateCopy(&stream, &state_) != Z_OK) {
      throw std::runtime_error("zlib: cannot copy the compressor state");
    }
    std::string out = head_;
    const std::size_t start = out.size();
    out.resize(start + deflateBound(&stream, tail.size()) + 64);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(tail.data()));
    stream.avail_in = static_cast<uInt>(tail.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + start);
    stream.avail_out = static_cast<uInt>(out.size() - start);
    int rc = Z_OK;
    while ((rc = deflate(&stream, Z_FINISH)) == Z_OK || rc == Z_BUF_ERROR) {
      // Out of room (deflateBound errs high, so only in theory): grow and go on.
      const std::size_t used = out.size() - stream.avail_out;
      out.resize(out.size() * 2);
      stream.next_out = reinterpret_cast<Bytef*>(out.data() + used);
      stream.avail_out = static_cast<uInt>(out.size() - used);
    }
    out.resize(out.size() - stream.avail_out);
    deflateEnd(&stream);
    if (rc != Z_STREAM_END) throw std::runtime_error("zlib: cannot finish the gzip stream");
    return out;
  }

 private:
  void CompressText() const {
    // 15 + 16: a gzip header and trailer around the deflate data.
    if (deflateInit2(&state_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
      return;
    }
    head_.resize(deflateBound(&state_, text_.size()) + 64);
    state_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text_.data()));
    state_.avail_in = static_cast<uInt>(text_.size());
    state_.next_out = reinterpret_cast<Bytef*>(head_.data());
    state_.avail_out = static_cast<uInt>(head_.size());
    const int rc = deflate(&state_, Z_SYNC_FLUSH);
    head_.resize(head_.size() - state_.avail_out);
    if (rc != Z_OK || state_.avail_in != 0) {
      deflateEnd(&state_);
      return;
    }
    ready_ = true;
  }

  const std::shared_ptr<const std::string> shared_;
  const std::string& text_;
  mutable std::once_flag compressed_;
  mutable std::string head_;
  mutable z_stream state_{};
  mutable bool ready_ = false;
};

// The last rendered text of the cached collectables and the generation it was rendered at.
class RenderedRegistry {
 public:
  std::shared_ptr<const RenderedText> Text(const ExporterRoutes& routes) {
    if (!routes.generation) {
      return std::make_shared<const RenderedText>(RenderExposition(routes.cached_collectables));
    }
    // Read before rendering: a write during the render bumps it past `now`, so the next
    // scrape renders again rather than keep a half-old text.
    const std::uint64_t now = routes.generation();
    {
      std::lock_guard lock(mutex_);
      if (text_ && generation_ == now) return text_;
    }
    // One render at a time: scrapes that come meanwhile wait and take its text (rendering a
    // 64-GPU host's registry builds ~10 MB of families; two at once, and each server
    // thread's arena kept its peak).
    std::lock_guard render(render_mutex_);
    {
      std::lock_guard lock(mutex_);
      if (text_ && generation_ >= now) return text_;
    }
    auto text = std::make_shared<const RenderedText>(RenderExposition(routes.cached_collectables));
    malloc_trim(0);  // what the render built and let go, handed back
    std::lock_guard lock(mutex_);
    if (!text_ || now >= generation_) {
      text_ = text;
      generation_ = now;
    }
    return text;
  }

 private:
  std::mutex mutex_;         // text_ and generation_
  std::mutex render_mutex_;  // one render at a time
  std::shared_ptr<const RenderedText> text_;
  std::uint64_t generation_ = 0;
};

// The status document as last rendered, shared by every answer until it is older than
// routes.status_max_age; one render at a time (the others wait for it, then share it).
class RenderedStatus {
 public:
  struct Text {
    std::shared_ptr<const std::string> plain;
    mutable std::once_flag zipped_once;
    mutable std::shared_ptr<const std::string> zipped;
    // The status page of this document (RenderStatusPage), made when a client first asks.
    mutable std::once_flag page_once;
    mutable std::shared_ptr<const std::string> page;
    mutable std::once_flag page_zipped_once;
    mutable std::shared_ptr<const std::string> page_zipped;
  };

  std::shared_ptr<const Text> Get(const ExporterRoutes& routes) {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    // Read before rendering: a record during the render moves it, and the next request
    // renders again.
    const std::uint64_t generation = routes.status_generation ? routes.status_generation() : 0;
    if (!text_ || now - made_ >= routes.status_max_age || generation != generation_) {
      auto text = std::make_shared<Text>();
      text->plain = std::make_shared<const std::string>(routes.status());
      text_ = std::move(text);
      made_ = now;
      generation_ = generation;
      // Rendering a large document builds a tree several times its size, freed at once:
      // handed back, or each server thread's arena keeps its peak for good.
      malloc_trim(0);
    }
    return text_;
  }

  // The document in gzip, made once per render when a client first asks for it.
  static std::shared_ptr<const std::string> Gzipped(const Text& text) {
    std::call_once(text.zipped_once, [&] { text.zipped = Gzip(*text.plain); });
    return text.zipped;
  }

  // The page of the document, made once per render when a client first asks for it. Under
  // the lock the document renders under: the two never render at once (each holds a tree
  // several times its text for a moment: a 64-GPU host's document is ~1 MB).
  std::shared_ptr<const std::string> Page(const Text& text, const ExporterRoutes& routes) {
    std::call_once(text.page_once, [&] {
      std::lock_guard lock(mutex_);
      text.page =
          std::make_shared<const std::string>(RenderStatusPage(*text.plain, routes.telemetry_path));
      malloc_trim(0);
    });
    return text.page;
  }
  std::shared_ptr<const std::string> PageGzipped(const Text& text, const ExporterRoutes& routes) {
    const auto page = Page(text, routes);
    std::call_once(text.page_zipped_once, [&] { text.page_zipped = Gzip(*page); });
    return text.page_zipped;
  }

 private:
  // `plain` as one gzip member; none when zlib fails (then served plain).
  static std::shared_ptr<const std::string> Gzip(const std::string& plain) {
    std::string out(compressBound(static_cast<uLong>(plain.size())) + 64, '\0');
    z_stream stream{};
    if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
      return nullptr;
    }
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
    stream.avail_in = static_cast<uInt>(plain.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = static_cast<uInt>(out.size());
    const int rc = deflate(&stream, Z_FINISH);
    out.resize(out.size() - stream.avail_out);
    deflateEnd(&stream);
    if (rc != Z_STREAM_END) return nullptr;
    return std::make_shared<const std::string>(std::move(out));
  }

  std::mutex mutex_;
  std::shared_ptr<const Text> text_;
  std::chrono::steady_clock::time_point made_;
  std::uint64_t generation_ = 0;
};

HttpResponse StatusResponse(const ExporterRoutes& routes, RenderedStatus& rendered,
                            const HttpRequest& request) {
  const auto text = rendered.Get(routes);
  HttpResponse response = Text(200, std::string());
  response.content_type = "application/json";
  response.shared_body = text->plain;
  if (web::AcceptsGzip(request.accept_encoding)) {
    if (auto zipped = RenderedStatus::Gzipped(*text)) {
      response.shared_body = std::move(zipped);
      response.headers.emplace_back("Content-Encoding", "gzip");
    }
  }
  response.headers.emplace_back("Vary", "Accept-Encoding");
  // A verdict is of its moment: no cache between a health check and the daemon keeps it.
  response.headers.emplace_back("Cache-Control", "no-store");
  return response;
}

// The status page: a view of the document of the same rendering, served like it.
HttpResponse PageResponse(const ExporterRoutes& routes, RenderedStatus& rendered,
                          const HttpRequest& request) {
  const auto text = rendered.Get(routes);
  HttpResponse response = Text(200, std::string());
  response.content_type = "text/html; charset=utf-8";
  response.shared_body = rendered.Page(*text, routes);
  if (web::AcceptsGzip(request.accept_encoding)) {
    if (auto zipped = rendered.PageGzipped(*text, routes)) {
      response.shared_body = std::move(zipped);
      response.headers.emplace_back("Content-Encoding", "gzip");
    }
  }
  response.headers.emplace_back("Vary", "Accept-Encoding");
  response.headers.emplace_back("Cache-Control", "no-store");
  // Nothing from elsewhere: no script, style or image but its own inline ones.
  response.headers.emplace_back("Content-Security-Policy",
                                "default-src 'none'; style-src 'unsafe-inline'; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  return response;
}

HttpResponse MetricsResponse(const ExporterRoutes& routes, RenderedRegistry& registry,
                             const HttpRequest& request) {
  const auto cached = routes.cached_collectables.empty()
                          ? std::make_shared<const RenderedText>(std::string())
                          : registry.Text(routes);
  const std::string tail = RenderExposition(routes.collectables);
  HttpResponse response;
  if (web::AcceptsGzip(request.accept_encoding)) {
    response = Text(200, cached->Gzip(tail));
    response.headers.emplace_back("Content-Encoding", "gzip");
  } else {
    // The registry's text as rendered once, by reference, and this scrape's own lines after
    // it: no copy of a 64-GPU host's 2 MB per scrape in flight.
    response = Text(200, tail);
    response.shared_body = cached->shared_text();
  }
  // Caches between scraper and server must keep the two codings apart.
  response.headers.emplace_back("Vary", "Accept-Encoding");
  response.content_type = std::string(kExpositionContentType);
  return response;
}

}  // namespace

HttpServer::Handler MakeExporterHandler(ExporterRoutes routes) {
  web::CheckTelemetryPath(routes.telemetry_path);
  auto shared = std::make_shared<const ExporterRoutes>(std::move(routes));
  auto rendered = std::make_shared<RenderedRegistry>();
  auto status = std::make_shared<RenderedStatus>();
  return [shared, rendered, status](const HttpRequest& request) -> HttpResponse {
    const ExporterRoutes& r = *shared;
    // Exact matches only: "/metrics/", "/../metrics" and the like are not the metrics.
    if (request.path == r.telemetry_path) return MetricsResponse(r, *rendered, request);
    if (request.path == kHealthPath) {
      const HealthState health = r.health ? r.health() : HealthState{};
      if (health.healthy) return Text(200, "ok\n");
      HttpResponse response = Text(503, "unhealthy: " + health.reason + "\n");
      response.headers.emplace_back("Cache-Control", "no-store");
      return response;
    }
    if (request.path == kStatusPath && r.status) return StatusResponse(r, *status, request);
    if (request.path == kLandingPath && r.status) return PageResponse(r, *status, request);
    if (request.path == kLandingPath) {
      HttpResponse response = Text(200, LandingPage(r));
      response.content_type = "text/html; charset=utf-8";
      return response;
    }
    return Text(404, "Not Found\n");
  };
}

}  // namespace xferd::exporter
