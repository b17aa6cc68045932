#include "exporter/status_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "exporter/status_view.h"
#include "web/paths.h"

namespace xferd::exporter {
namespace {

// The page's look, inline: no asset from anywhere else. Readable on a phone and printed.
constexpr std::string_view kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:#1f2328;background:#fff;margin:0 auto;padding:12px 20px 40px;max-width:1180px}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:0 0 2px}
h3{font-size:14px;margin:14px 0 4px;color:#444}
a{color:#0550ae}p{margin:4px 0}.dim{color:#656d76}.small{font-size:12px}
header{border-bottom:1px solid #d0d7de;padding-bottom:8px;margin-bottom:12px}
.summary{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:13px;
 background:#f6f8fa;padding:4px 8px;border-radius:4px;overflow-wrap:anywhere}
.v{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
 color:#fff;background:#57606a;vertical-align:middle;text-transform:uppercase}
.v-ok{background:#1a7f37}.v-degraded{background:#cf222e}.v-pending{background:#0969da}
.v-stale{background:#9a6700}
table{border-collapse:collapse;margin:4px 0 8px;font-size:13px}
th,td{border-bottom:1px solid #d8dee4;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.series td:nth-child(2){white-space:nowrap}
tr.bad td{background:#ffebe9}tr.low td{background:#fff8c5}tr.stale td{color:#656d76}
section.gpu{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:14px 0}
section.gpu.degraded{border-color:#cf222e;border-width:2px}
.why{font-weight:600}.why.bad{color:#a40e26}
.cols{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start}
figure{margin:4px 0}figcaption{font-size:12px;color:#656d76}
svg text{font:10px system-ui,"DejaVu Sans",sans-serif;fill:#57606a}
.note{color:#656d76}.kind{font-size:11px;text-transform:uppercase;font-weight:600}
details{margin:4px 0}summary{cursor:pointer}
footer{margin-top:18px;color:#656d76;font-size:12px}
)";

// Each plotted series' colour and point shape, in order.
constexpr std::string_view kColours[] = {"#0969da", "#bc4c00", "#1a7f37", "#8250df"};

std::string Esc(std::string_view text) {
  return EscapeHtml(text);
}

std::string VerdictBadge(std::string_view verdict) {
  const std::string word = verdict.empty() ? "unknown" : std::string(verdict);
  const bool known = word == "ok" || word == "degraded" || word == "pending" || word == "stale";
  return fmt::format("<span class=\"v{}\">{}</span>", known ? " v-" + word : "", Esc(word));
}

std::string RowClass(const SeriesView& s) {
  if (s.degraded) return "bad";
  if (s.Low() || (!s.status.empty() && s.status != "ok")) return "low";
  if (s.stale) return "stale";
  return "";
}

struct Plotted {
  const SeriesView* series;
  std::string_view colour;
};

// An inline SVG of recent readings (per direction) against a band: the band's range shaded,
// its lower bound a line, each series' points in its colour (a point under the lower bound
// ringed red), the newest at the right edge.
std::string Plot(const GpuView& g, const std::vector<Plotted>& shown, std::optional<double> lower,
                 std::optional<double> upper, const std::string& label) {
  constexpr double kWidth = 400, kHeight = 174, kLeft = 38, kRight = 10, kTop = 22, kBottom = 20;
  double oldest = 0, highest = 0;
  std::size_t points = 0;
  for (const Plotted& p : shown) {
    for (const RecentReading& r : p.series->recent) {
      oldest = std::max(oldest, r.age_s);
      highest = std::max(highest, *p.series->PerDirection(r.bytes_per_s));
      ++points;
    }
  }
  if (upper) highest = std::max(highest, *upper);
  if (lower) highest = std::max(highest, *lower);
  if (highest <= 0) highest = 1e9;
  // Round gridlines: a step of 1, 2, 2.5 or 5 times a power of ten, four or five of them.
  const double raw = highest * 1.08 / 4;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude * 10;
  for (const double m : {1.0, 2.0, 2.5, 5.0}) {
    if (magnitude * m >= raw) {
      step = magnitude * m;
      break;
    }
  }
  const double top = std::ceil(highest * 1.08 / step) * step;
  if (oldest <= 0) oldest = 60;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const auto x = [&](double age) { return kLeft + plot_w * (1 - age / oldest); };
  const auto y = [&](double rate) { return kTop + plot_h * (1 - rate / top); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" data-gpu=\"{}\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" role=\"img\" aria-label=\"{}\">"
      "<title>{}</title>",
      g.index, kWidth, kHeight, kWidth, kHeight, Esc(label), Esc(label));
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fff\" "
      "stroke=\"#d0d7de\"/>",
      kLeft, kTop, plot_w, plot_h);
  if (lower) {
    const double band_top = upper ? y(*upper) : kTop;
    svg += fmt::format(
        "<rect class=\"band\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "fill=\"#dafbe1\"/>",
        kLeft, band_top, plot_w, std::max(0.0, y(*lower) - band_top));
    svg += fmt::format(
        "<line class=\"band-lower\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" "
        "stroke=\"#1a7f37\" stroke-dasharray=\"4 3\"/>",
        kLeft, kLeft + plot_w, y(*lower), y(*lower));
  }
  // Gridlines and the y axis in GB/s.
  for (double rate = 0; rate <= top * 1.0001; rate += step) {
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eaeef2\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>",
        kLeft, kLeft + plot_w, y(rate), y(rate), kLeft - 4, y(rate) + 3, rate / 1e9);
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"start\">-{}</text>"
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">now</text>"
      "<text x=\"4\" y=\"10\">GB/s</text>",
      kLeft, kHeight - 6, Esc(FormatAge(oldest)), kLeft + plot_w, kHeight - 6);
  for (const Plotted& p : shown) {
    const SeriesView& s = *p.series;
    if (s.baseline && s.band_lower != lower) {
      const double b = *s.PerDirection(s.baseline);
      svg += fmt::format(
          "<line class=\"baseline\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" "
          "stroke=\"{}\" stroke-dasharray=\"1 3\"/>",
          kLeft, kLeft + plot_w, y(b), y(b), p.colour);
    }
    std::string line;
    for (const RecentReading& r : s.recent) {
      line += fmt::format("{}{:.1f},{:.1f}", line.empty() ? "" : " ", x(r.age_s),
                          y(*s.PerDirection(r.bytes_per_s)));
    }
    if (s.recent.size() > 1) {
      svg += fmt::format(
          "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-opacity=\"0.45\"/>", line,
          p.colour);
    }
    for (const RecentReading& r : s.recent) {
      const double rate = *s.PerDirection(r.bytes_per_s);
      const bool low = lower && rate < *lower;
      svg += fmt::format(
          "<circle class=\"point{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.6\" fill=\"{}\"{}/>",
          low ? " low" : "", x(r.age_s), y(rate), p.colour,
          low ? " stroke=\"#cf222e\" stroke-width=\"1.6\"" : "");
    }
  }
  if (points == 0) {
    svg +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">no readings yet</text>",
                    kLeft + plot_w / 2, kTop + plot_h / 2);
  }
  svg += "</svg>";
  // The legend: which colour is which series, and what the shaded range is.
  std::string legend;
  for (const Plotted& p : shown) {
    legend += fmt::format("<span style=\"color:{}\">&#9679;</span> {}{} &nbsp;", p.colour,
                          Esc(p.series->Name()), p.series->BothWays() ? " (per direction)" : "");
  }
  if (lower) {
    legend +=
        upper ? fmt::format("<span style=\"color:#1a7f37\">&#9632;</span> band {}&ndash;{} GB/s",
                            FormatGbps(lower), FormatGbps(upper))
              : fmt::format("<span style=\"color:#1a7f37\">- -</span> band &ge; {} GB/s",
                            FormatGbps(lower));
  }
  return "<figure>" + svg + "<figcaption>" + legend + "</figcaption></figure>\n";
}

// The series plotted for a GPU: its headline series (measured every cycle), else those held
// to the band, else the first two; and a second plot for the series its verdict is shown by
// when that is another.
std::string Plots(const GpuView& g) {
  std::vector<const SeriesView*> main;
  for (const SeriesView& s : g.series) {
    if (s.headline) main.push_back(&s);
  }
  if (main.empty()) {
    for (const SeriesView& s : g.series) {
      if (s.band_lower) main.push_back(&s);
    }
  }
  if (main.empty()) {
    for (const SeriesView& s : g.series) {
      if (main.size() < 2) main.push_back(&s);
    }
  }
  if (main.size() > std::size(kColours)) main.resize(std::size(kColours));
  std::vector<Plotted> shown;
  for (std::size_t i = 0; i < main.size(); ++i) shown.push_back({main[i], kColours[i]});
  std::optional<double> lower = g.band_lower, upper = g.band_upper;
  if (!shown.empty() && shown.front().series->band_lower) lower = shown.front().series->band_lower;
  if (!lower) upper.reset();
  std::string out =
      Plot(g, shown, lower, upper, fmt::format("gpu{}: recent readings against the band", g.index));
  if (g.has_headline) {
    const auto worst = std::find_if(g.series.begin(), g.series.end(), [&](const SeriesView& s) {
      return s.Name() == g.headline_series;
    });
    if (worst != g.series.end() &&
        std::none_of(main.begin(), main.end(), [&](const SeriesView* s) { return s == &*worst; })) {
      // Its mode's band: the GPU's where it is held to it whole (its upper bound too).
      const bool whole = worst->band_lower && worst->band_lower == g.band_lower;
      out +=
          Plot(g, {{&*worst, kColours[0]}}, worst->band_lower, whole ? g.band_upper : std::nullopt,
               fmt::format("gpu{} {}: recent readings", g.index, worst->Name()));
    }
  }
  return out;
}

std::string LinkFacts(const GpuView& g) {
  std::string rows;
  const auto row = [&](std::string_view name, const std::string& value) {
    rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>", name, value);
  };
  row("band", g.band_lower ? fmt::format("{}&ndash;{} GB/s per direction<br><span "
                                         "class=\"dim small\">{}</span>",
                                         FormatGbps(g.band_lower), FormatGbps(g.band_upper),
                                         Esc(g.band_source))
                           : "none: each series against its own baseline");
  const LinkView& l = g.link;
  if (l.pcie) {
    const bool below = l.current != l.max;
    row("link", fmt::format("{}trained {}, capable of {}{} <span class=\"dim small\">{}</span>",
                            below ? "<strong>" : "", Esc(l.current), Esc(l.max),
                            below ? "</strong>" : "", Esc(l.address)));
    if (!l.narrowest.empty()) {
      row("narrowest hop",
          fmt::format("{} ({} GB/s) <span class=\"dim small\">{}</span>{}", Esc(l.narrowest),
                      FormatGbps(l.narrowest_bytes_per_s), Esc(l.narrowest_address),
                      l.downtrained ? " <strong>downtrained</strong>" : ""));
    }
  } else {
    row("link", l.read ? Esc(l.host_link.empty() ? "not PCIe" : l.host_link + " (no PCIe link)")
                       : "not read yet (after the first probe)");
  }
  row("NUMA, IOMMU",
      fmt::format("node {}, {}", l.numa_node ? std::to_string(*l.numa_node) : "unknown",
                  l.iommu.empty() ? "unknown" : Esc(l.iommu)));
  // The error counters in one line; every counter in the table below.
  if (!l.errors_read) {
    row("link errors", "not read: " + Esc(l.errors_reason));
  } else {
    row("link errors", fmt::format("{:.0f} counted by {} of {} readable counters",
                                   l.ErrorsCounted(), l.CountersReadable(), l.counters.size()));
  }
  if (l.watching) {
    row("link watch",
        fmt::format(
            "{}{}{}{}", l.flapping ? "<strong>flapping</strong>: " : "", Esc(l.watch_counts),
            l.watch_last_seen.empty() ? "" : "<br><span class=\"dim small\">",
            l.watch_last_seen.empty() ? "" : "last change: " + Esc(l.watch_last_seen) + "</span>"));
  } else if (!l.watch_reason.empty()) {
    row("link watch", "<span class=\"dim\">" + Esc(l.watch_reason) + "</span>");
  }
  if (!g.shape.empty()) row("shape", Esc(g.shape));
  std::string contention = g.busy ? "<strong>busy: skipped last cycle</strong>" : "not busy";
  if (g.traffic_readable) {
    contention += *g.traffic_readable
                      ? fmt::format("; foreign traffic {} / {} GB/s h2d / d2h",
                                    FormatGbps(g.foreign_h2d), FormatGbps(g.foreign_d2h))
                      : "; link traffic not readable";
  }
  row("contention", contention);
  if (g.scheduled) {
    row("allowance",
        fmt::format("{:.2f} of {:.2f} s of device time (duty {:.3g} %){}", g.allowance_s,
                    g.allowance_capacity_s, g.duty_cycle * 100,
                    g.held_back > 0
                        ? fmt::format("; <strong>{} series held back</strong>", g.held_back)
                        : ""));
  }
  return "<table class=\"facts\">" + rows + "</table>\n";
}

std::string SeriesTable(const GpuView& g) {
  std::string out = "<table class=\"series\"><thead><tr>";
  for (const SeriesColumn& c : SeriesColumns()) {
    out += fmt::format("<th{}>{}</th>", c.figure ? " class=\"n\"" : "", Esc(c.header));
  }
  out += "</tr></thead><tbody>";
  for (const SeriesView& s : g.series) {
    const std::string cls = RowClass(s);
    out += cls.empty() ? "<tr>" : "<tr class=\"" + cls + "\">";
    for (const SeriesColumn& c : SeriesColumns()) {
      std::string cell = Esc(c.cell(s));
      if (&c == &SeriesColumns().front() && !s.last_message.empty()) {
        cell += "<br><span class=\"dim small\">" + Esc(s.last_message) + "</span>";
      }
      out += fmt::format("<td{}>{}</td>", c.figure ? " class=\"n\"" : "", cell);
    }
    out += "</tr>";
  }
  out += "</tbody></table>\n";
  if (std::any_of(g.series.begin(), g.series.end(),
                  [](const SeriesView& s) { return s.BothWays(); })) {
    out +=
        "<p class=\"dim small\">bidir: both directions at once; its figures are per direction "
        "(half the sum).</p>\n";
  }
  return out;
}

std::string CausesTable(const GpuView& g) {
  if (g.causes.empty()) return "";
  std::string out =
      "<h3>Causes</h3><table class=\"causes\"><thead><tr><th>cause</th><th>kind</th>"
      "<th>what was seen</th><th>what to do</th></tr></thead><tbody>";
  for (const CauseView& c : g.causes) {
    out += fmt::format(
        "<tr{}><td><strong>{}</strong></td><td class=\"kind\">{}</td><td>{}</td><td>{}</td></tr>",
        c.fault ? "" : " class=\"note\"", Esc(c.cause),
        c.fault ? (c.leads ? "fault, leads" : "fault") : "note, not a fault", Esc(c.detail),
        Esc(c.advice));
  }
  return out + "</tbody></table>\n";
}

std::string CountersTable(const GpuView& g) {
  const LinkView& l = g.link;
  if (!l.errors_read || l.counters.empty()) return "";
  std::string out = fmt::format(
      "<details class=\"counters\"><summary>Link error counters ({})</summary><table><thead><tr>"
      "<th>device</th><th>counter</th><th>class</th><th class=\"n\">count</th><th>note</th>"
      "</tr></thead><tbody>",
      l.counters.size());
  for (const CounterView& c : l.counters) {
    out += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
        c.value && *c.value > 0 ? " class=\"low\"" : "", Esc(c.device), Esc(c.counter),
        Esc(c.aer_class.empty() ? c.source : c.aer_class),
        c.readable && c.value ? fmt::format("{:.0f}", *c.value) : "-",
        c.readable ? "" : Esc(c.reason));
  }
  return out + "</tbody></table></details>\n";
}

std::string GpuSection(const GpuView& g) {
  std::string out = fmt::format(
      "<section class=\"gpu {}\" id=\"gpu{}\" data-verdict=\"{}\">\n<h2>gpu{} &middot; {} "
      "{}</h2>\n",
      Esc(g.verdict), g.index, Esc(g.verdict), g.index, Esc(g.name), VerdictBadge(g.verdict));
  out += fmt::format("<p class=\"dim small\">{} &middot; {}{}</p>\n", Esc(g.uuid),
                     Esc(g.pci_bus_id), g.simulated ? " &middot; simulated device" : "");
  out += fmt::format(
      "<p class=\"why{}\">{}{}</p>\n", g.verdict == "degraded" ? " bad" : "",
      g.code.empty() ? std::string() : fmt::format("<code class=\"code\">{}</code> ", Esc(g.code)),
      Esc(VerdictLine(g)));
  if (!g.code.empty() && g.action != "none" && !g.action.empty()) {
    out += fmt::format(
        "<p class=\"small\">recommended action: <strong>{}</strong>{}</p>\n", Esc(g.action),
        g.evidence.empty() ? std::string()
                           : fmt::format(" &middot; evidence kept: {} (<code>xferd evidence "
                                         "{}</code> on the host prints it)",
                                         Esc(g.evidence), g.index));
  }
  out += "<div class=\"cols\">\n" + Plots(g) + LinkFacts(g) + "</div>\n";
  out += SeriesTable(g) + CausesTable(g) + CountersTable(g);
  return out + "</section>\n";
}

std::string Overview(const StatusView& v) {
  std::string out =
      "<table class=\"overview\"><thead><tr><th>GPU</th><th>verdict</th><th>why</th>"
      "<th class=\"n\">series</th><th class=\"n\">stale</th></tr></thead><tbody>";
  for (const GpuView& g : v.gpus) {
    out += fmt::format(
        "<tr{}><td><a href=\"#gpu{}\">gpu{}</a> <span class=\"dim\">{}</span></td><td>{}</td>"
        "<td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        g.verdict == "degraded" ? " class=\"bad\"" : "", g.index, g.index, Esc(g.name),
        VerdictBadge(g.verdict), Esc(VerdictLine(g)), g.series.size(), g.stale_series);
  }
  return out + "</tbody></table>\n";
}

std::string DaemonTable(const StatusView& v) {
  std::string rows;
  const auto row = [&](std::string_view name, const std::string& value) {
    rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>", name, value);
  };
  row("health", v.healthy ? "ok" : "<strong>unhealthy</strong>: " + Esc(v.reason));
  row("cycles", fmt::format("{:.0f}; the last ended {} (stale after {})", v.cycles,
                            v.last_cycle_age_s ? FormatAge(v.last_cycle_age_s) + " ago"
                                               : std::string("not yet: the first is running"),
                            FormatAge(v.stale_after_s)));
  row("cadence", fmt::format("every {}; {} bad readings in a row flip a verdict",
                             FormatAge(v.interval_s), v.consecutive_bad));
  row("uptime", FormatAge(v.uptime_s));
  if (v.has_reload) {
    std::string load;
    if (v.reloads == 0) {
      load = "as loaded at the start, " + Esc(v.reload_time);
    } else if (v.reload_successful) {
      load = fmt::format("last reload applied, {} ({} since the start)", Esc(v.reload_time),
                         v.reloads);
    } else {
      load = fmt::format(
          "<strong>last reload refused</strong>, {}: the running configuration is kept<br>"
          "<span class=\"small\">{}</span>",
          Esc(v.reload_time), Esc(v.reload_error));
    }
    row("configuration", load);
  }
  return "<table class=\"daemon\">" + rows + "</table>\n";
}

std::string Incidents(const StatusView& v) {
  std::string out = "<h2 id=\"incidents\">Incident log</h2>\n";
  if (v.incidents.empty()) {
    return out +
           "<p class=\"dim\">No verdict has changed (a GPU's first verdict, when ok, is "
           "no incident).</p>\n";
  }
  out +=
      "<table class=\"incidents\"><thead><tr><th>time (UTC)</th><th>GPU</th><th>change</th>"
      "<th>series</th><th>causes</th></tr></thead><tbody>";
  for (const IncidentView& i : v.incidents) {
    std::string series, causes;
    for (const std::string& s : i.series) series += (series.empty() ? "" : ", ") + Esc(s);
    for (const auto& [cause, detail] : i.causes) {
      causes += (causes.empty() ? "" : "<br>") +
                fmt::format("<strong>{}</strong> {}", Esc(cause), Esc(detail));
    }
    out += fmt::format(
        "<tr{}><td class=\"n\">{}</td><td>gpu{}</td><td>{} &rarr; {}</td><td>{}</td><td>{}</td>"
        "</tr>",
        i.to == "degraded" ? " class=\"bad\"" : "", Esc(i.time), i.gpu, Esc(i.from), Esc(i.to),
        series, causes);
  }
  return out + "</tbody></table>\n";
}

std::string Links(std::string_view telemetry_path) {
  return fmt::format(
      "<a href=\"{}\">Metrics</a> &middot; <a href=\"{}\">Health check</a> &middot; "
      "<a href=\"{}\">Status (JSON)</a>",
      Esc(telemetry_path), web::kHealthPath, web::kStatusPath);
}

}  // namespace

std::string EscapeHtml(std::string_view text) {
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

std::string RenderStatusPage(std::string_view document, std::string_view telemetry_path) {
  std::string problem;
  const std::optional<StatusView> view = ReadStatusView(document, problem);
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  if (!view) {
    return page +
           "<title>xferd</title></head>\n<body>\n<h1>xferd</h1>\n<p>The status is not "
           "readable: " +
           Esc(problem) + "</p>\n<p>" + Links(telemetry_path) + "</p>\n</body>\n</html>\n";
  }
  const StatusView& v = *view;
  page += fmt::format("<title>xferd: {}</title><style>{}</style></head>\n<body>\n",
                      Esc(v.verdict.empty() ? "status" : v.verdict), kStyle);
  page += fmt::format(
      "<header><h1>xferd {}</h1>\n<p class=\"summary\">{}</p>\n<p class=\"dim\">version {} "
      "&middot; as of {} &middot; {}</p></header>\n",
      VerdictBadge(v.verdict), Esc(v.summary), Esc(v.xferd_version), Esc(v.time),
      Links(telemetry_path));
  page += Overview(v);
  page += DaemonTable(v);
  for (const GpuView& g : v.gpus) page += GpuSection(g);
  page += Incidents(v);
  page += "<footer>A view of the status document (" + std::string(web::kStatusPath) +
          ") as it was rendered; reload the page for a newer one. Ages are counted on the daemon's "
          "clock. Figures in GB/s (10<sup>9</sup> bytes per second).</footer>\n</body>\n</html>\n";
  return page;
}

}  // namespace xferd::exporter
