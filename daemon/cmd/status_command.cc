// `xferd status`: the daemon's status document in a terminal: the line and exit status of
// `xferd health` (cmd/health_report.h, its one reading of the verdict), then per GPU its
// verdict, what it rests on, its band and link, the table of series (the columns the status
// page shows, exporter/status_view.h) and its causes, and the incident log. Asked the way
// `xferd health` asks (cmd/daemon_client.h). `--json` writes the document as served.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cmd/commands.h"
#include "cmd/daemon_client.h"
#include "cmd/health_report.h"
#include "exporter/status_view.h"
#include "platform/printable.h"

namespace xferd::cmd {
namespace {

using exporter::CauseView;
using exporter::GpuView;
using exporter::SeriesColumn;
using exporter::SeriesView;
using exporter::StatusView;

// The columns `text` takes in a terminal: the views' text is printable (control bytes
// escaped), one column a character, UTF-8 continuation bytes none.
std::size_t Columns(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

std::string Pad(const std::string& text, std::size_t width, bool right) {
  const std::size_t w = Columns(text);
  const std::string fill(w < width ? width - w : 0, ' ');
  return right ? fill + text : text + fill;
}

// The table of series, as the page's (exporter::SeriesColumns), in columns.
std::string SeriesTable(const GpuView& g) {
  const auto columns = exporter::SeriesColumns();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::size_t> widths;
  for (const SeriesColumn& c : columns) widths.push_back(Columns(c.header));
  for (const SeriesView& s : g.series) {
    std::vector<std::string> row;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      row.push_back(columns[i].cell(s));
      widths[i] = std::max(widths[i], Columns(row.back()));
    }
    rows.push_back(std::move(row));
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "  ";
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const bool last = i + 1 == cells.size();
      out += last && !columns[i].figure ? cells[i] : Pad(cells[i], widths[i], columns[i].figure);
      if (!last) out += "  ";
    }
    return out + "\n";
  };
  std::vector<std::string> header;
  for (const SeriesColumn& c : columns) header.push_back(c.header);
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string Link(const GpuView& g) {
  const exporter::LinkView& l = g.link;
  std::string text;
  if (l.pcie) {
    text = "link trained " + l.current + ", capable of " + l.max;
    if (!l.narrowest.empty() && l.narrowest_address != l.address) {
      text += "; narrowest hop " + l.narrowest + " at " + l.narrowest_address;
    }
    if (l.downtrained) text += " (downtrained)";
  } else {
    text = l.read ? "link " + (l.host_link.empty() ? std::string("not PCIe") : l.host_link)
                  : "link not read yet";
  }
  if (l.errors_read) {
    text +=
        "; " + std::to_string(static_cast<long long>(l.ErrorsCounted())) + " link errors counted";
  }
  return text;
}

std::string GpuBlock(const GpuView& g) {
  std::string verdict = g.verdict.empty() ? "unknown" : g.verdict;
  std::transform(verdict.begin(), verdict.end(), verdict.begin(), ::toupper);
  std::string out = "gpu" + std::to_string(g.index) + "  " + verdict + "  " + g.name + "  " +
                    g.pci_bus_id + (g.simulated ? "  simulated device" : "") + "\n";
  out += "  " + exporter::VerdictLine(g) + "\n";
  out += "  band " +
         (g.band_lower ? exporter::FormatGbps(g.band_lower) + "-" +
                             exporter::FormatGbps(g.band_upper) + " GB/s per direction"
                       : std::string("none (each series against its baseline)")) +
         "; " + Link(g) + "\n";
  if (g.busy) out += "  busy: skipped last cycle\n";
  if (g.held_back > 0) {
    out += "  " + std::to_string(g.held_back) + " series held back by the device-time allowance\n";
  }
  out += SeriesTable(g);
  for (const SeriesView& s : g.series) {
    if (!s.last_message.empty()) out += "  " + s.Name() + ": " + s.last_message + "\n";
  }
  for (const CauseView& c : g.causes) {
    out += "  " + std::string(c.fault ? (c.leads ? "cause (leads) " : "cause ") : "note ") +
           c.cause + ": " + c.detail + "\n      " + c.advice + "\n";
  }
  return out;
}

std::string Daemon(const StatusView& v) {
  std::string out = "xferd " + v.xferd_version + ", as of " + v.time + ": ";
  out += v.healthy ? "" : "UNHEALTHY: " + v.reason + "; ";
  out += std::to_string(static_cast<long long>(v.cycles)) + " cycles, the last ended " +
         (v.last_cycle_age_s ? exporter::FormatAge(v.last_cycle_age_s) + " ago"
                             : std::string("- (the first is running)"));
  if (v.has_reload) {
    out += v.reloads == 0        ? "; configuration as loaded at the start"
           : v.reload_successful ? "; configuration reloaded " + v.reload_time
                                 : "; LAST RELOAD REFUSED " + v.reload_time + ": " +
                                       v.reload_error + " (the running configuration is kept)";
  }
  return out + "\n";
}

std::string Incidents(const StatusView& v) {
  if (v.incidents.empty()) return "incidents: none\n";
  std::string out = "incidents, newest first:\n";
  for (const exporter::IncidentView& i : v.incidents) {
    std::string series, causes;
    for (const std::string& s : i.series) series += (series.empty() ? "" : ", ") + s;
    for (const auto& [cause, detail] : i.causes) causes += (causes.empty() ? "" : ", ") + cause;
    out += "  " + i.time + "  gpu" + std::to_string(i.gpu) + "  " + i.from + " -> " + i.to +
           (series.empty() ? "" : "  " + series) + (causes.empty() ? "" : "  (" + causes + ")") +
           "\n";
  }
  return out;
}

}  // namespace

int StatusCommand(const StatusCommandOptions& options) {
  // With --json stdout holds the document alone: a line that says why there is none goes to
  // stderr.
  FILE* line_out = options.json ? stderr : stdout;
  const int unknown = HealthExitCode(HealthOutcome::kUnknown, false);
  const auto say = [&](const HealthReport& report) {
    std::fprintf(line_out, "%s\n", report.line.c_str());
    std::fflush(line_out);
    return HealthExitCode(report.state, false);
  };
  std::optional<DaemonClient> client;
  try {
    client.emplace(options.daemon);
  } catch (const platform::Error& e) {
    return say(
        UnknownReport(core::NoVerdict::kDaemonUnreachable, platform::Printable(e.what(), 1000)));
  }
  ArmWatchdog(
      client->timeout(),
      UnknownReport(core::NoVerdict::kDaemonUnreachable, "no answer from xferd within the timeout")
          .line,
      fileno(line_out), unknown);
  const StatusAnswer answer = client->FetchStatus();
  if (!answer.document) return say(answer.problem);
  const HealthReport report = JudgeStatus(*answer.document, {});
  if (options.json) {
    std::fwrite(answer.document->data(), 1, answer.document->size(), stdout);
    std::fflush(stdout);
    return HealthExitCode(report.state, false);
  }
  std::string out = report.line + "\n";
  std::string problem;
  const std::optional<StatusView> view = StatusDocumentProblem(*answer.document).empty()
                                             ? exporter::ReadStatusView(*answer.document, problem)
                                             : std::nullopt;
  if (view) {
    out += Daemon(*view);
    for (const GpuView& g : view->gpus) out += "\n" + GpuBlock(g);
    out += "\n" + Incidents(*view);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return HealthExitCode(report.state, false);
}

}  // namespace xferd::cmd
