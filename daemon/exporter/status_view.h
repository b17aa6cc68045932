// The status document as a person reads it: what the status page (status_page.h) and
// `xferd status` show, read from the document's text (/api/v1/status, the one source: the
// views hold nothing the document does not), and the columns of the table of series both
// print. A view is never judged here: the verdict words are the document's, and `xferd
// status` takes its exit code from `xferd health`'s reading (cmd/health_report.h).
//
// Use:
//   std::string problem;
//   const auto view = ReadStatusView(document_text, problem);   // nullopt: not a document
//   for (const SeriesColumn& c : SeriesColumns()) ... c.header ... c.cell(series)
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xferd::exporter {

// One judged reading of a series: how long before the document it was taken, and its rate.
struct RecentReading {
  double age_s = 0;
  double bytes_per_s = 0;
};

struct SeriesView {
  std::string mode, direction, size;
  std::string status;                   // of its last judged probe: "ok", "error", ...
  std::optional<double> reading;        // the last judged reading, bytes/s (both ways for bidir)
  std::optional<double> band_lower;     // the mode's band, per direction; none: not held to it
  std::optional<double> baseline;       // its own; none until learned
  std::optional<double> peer_baseline;  // its peers' while its own learns, when under it
  int baseline_cycles = 0;
  bool below_band = false, below_baseline = false, contended = false;
  bool degraded = false, stale = false, headline = false;
  std::optional<double> age_s;
  // The schedule's outlook for it (none before the first cycle).
  bool scheduled = false;
  std::string run_class;  // "headline", "overdue", "watched", "rotating"
  bool held_back = false;
  std::optional<double> next_run_s;
  // Its last probe, when that was not ok (`probes[]`): "error", "timeout", "skipped_busy", ...
  std::string last_result, last_message;
  std::vector<RecentReading> recent;  // oldest first

  // Both ways at once: its reading and baseline are the sum; the band holds each direction.
  bool BothWays() const { return direction == "bidir"; }
  // A rate of this series as the band sees it: per direction.
  std::optional<double> PerDirection(std::optional<double> bytes_per_s) const;
  std::string Name() const;  // "pinned h2d 64MiB"
  // What its last reading says, in a word or three: "ok", "below band", "DEGRADED", "stale",
  // "contended", "learning", or its last probe's result ("error: ...").
  std::string State() const;
  // Its last reading is below what it is held to (the band, or its baseline).
  bool Low() const { return below_band || below_baseline; }
};

struct CauseView {
  std::string cause, detail, advice;
  bool fault = true;  // false: a note ("not a fault")
  bool leads = false;
};

struct CounterView {
  std::string device, counter, source, aer_class, reason;
  bool readable = false;
  std::optional<double> value;
};

struct LinkView {
  std::string host_link;  // "pcie", "c2c", "integrated"
  bool read = false;
  bool pcie = false;                  // a PCIe link is shown (below)
  std::string address, current, max;  // "Gen4 x16"
  std::string narrowest, narrowest_address;
  std::optional<double> narrowest_bytes_per_s;
  bool downtrained = false;
  std::optional<int> numa_node;
  std::string iommu;
  bool errors_read = false;
  std::string errors_reason;
  std::vector<CounterView> counters;
  // The link watch between probes: "" when not watching (watch_reason says why), else what
  // it counted in its window ("3 changes, 42 s reduced in the last 600 s").
  bool watching = false;
  bool flapping = false;
  std::string watch_reason, watch_counts, watch_last_seen;

  // What the readable counters add up to, and how many were readable.
  double ErrorsCounted() const;
  int CountersReadable() const;
};

struct GpuView {
  int index = -1;
  std::string uuid, name, pci_bus_id;
  bool simulated = false;
  std::string verdict;         // the document's word: "ok", "degraded", "pending", "stale", ...
  std::string verdict_reason;  // why, where the document says (a verdict that cannot be judged)
  std::string code, action;    // its fault code and recommended action; "" when ok
  std::string evidence;        // the newest evidence record's file name; "" when none
  std::optional<double> band_lower, band_upper;
  std::string band_source;
  int stale_series = 0;
  // The series the verdict is shown by (a degraded GPU's worst) and the cause it names.
  bool has_headline = false;
  std::string headline_series;  // "pinned h2d 64MiB"
  std::string headline_cause, headline_below, headline_of;
  std::optional<double> headline_reading, headline_reference;
  std::vector<SeriesView> series;
  std::vector<CauseView> causes;
  LinkView link;
  bool busy = false;
  std::optional<bool> traffic_readable;
  std::optional<double> foreign_h2d, foreign_d2h;
  // The GPU's shape, where it is not a plain GPU: confidential computing on ("cc on, GPUs
  // ready"), MIG enabled with its instances; "" otherwise.
  std::string shape;
  bool scheduled = false;
  double allowance_s = 0, allowance_capacity_s = 0, duty_cycle = 0;
  int held_back = 0;

  // The cause that leads (the document's `leads`), else the headline's; "" when none.
  std::string LeadingCause() const;
};

struct IncidentView {
  std::string time, uuid, from, to;
  int gpu = -1;
  std::vector<std::string> series;                          // "pinned h2d"
  std::vector<std::pair<std::string, std::string>> causes;  // cause, detail
};

struct StatusView {
  int version = 0;
  std::string xferd_version, time, verdict, summary;
  bool healthy = true;
  std::string reason;
  double cycles = 0, uptime_s = 0, stale_after_s = 0, interval_s = 0;
  std::optional<double> last_cycle_age_s;
  int consecutive_bad = 0;
  bool has_reload = false;
  bool reload_successful = true;
  std::string reload_time, reload_error;
  int reloads = 0;
  std::vector<GpuView> gpus;
  std::vector<IncidentView> incidents;
};

// What a GPU's verdict rests on, in one line of text: its worst series' figures and the
// cause that leads ("pinned h2d 64MiB: 5.10 GB/s < 19.85 GB/s band; cause
// link_downtrained"), "within band", or why it has no verdict it can be judged by (the
// document's verdict_reason, for a word this xferd may not know).
std::string VerdictLine(const GpuView& gpu);

// The view of a status document's text. Never throws: a field the document lacks, or holds
// in another type, stays empty. nullopt, with `problem` set, only when the text is no JSON
// object.
std::optional<StatusView> ReadStatusView(std::string_view document, std::string& problem);

// One column of the table of series, the same on the page and in `xferd status`: its
// header, its cell, and whether the cell is a figure (aligned right).
struct SeriesColumn {
  const char* header;
  std::string (*cell)(const SeriesView&);
  bool figure;
};
std::span<const SeriesColumn> SeriesColumns();

// The words both views use: "23.41" (GB/s, two decimals; "-" for none), "12 s", "4 min",
// "3 h 5 min", "2 d"; "in 48 s".
std::string FormatGbps(std::optional<double> bytes_per_s);
std::string FormatAge(std::optional<double> seconds);

}  // namespace xferd::exporter
