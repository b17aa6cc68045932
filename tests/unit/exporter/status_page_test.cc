// The status page and the view both it and `xferd status` read the document through
// (status_view.h), without a daemon: what a person reads of a healthy and a degraded GPU,
// the plot of each GPU, outside text escaped, verdict words this xferd does not know shown
// with their reason, and a page that loads nothing from anywhere else. The page in a real
// browser: tests/integration/test_status_page.py.
#include "exporter/status_page.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "exporter/status.h"
#include "exporter/status_view.h"
#include "testing/samples.h"

namespace xferd::exporter {
namespace {

using nlohmann::json;
using probes::Direction;
using probes::TransferMode;
using ::testing::HasSubstr;
using ::testing::Not;

// A GPU of two headline series and a bidir one, `readings` cycles of them; its pinned h2d at
// `h2d_gbps` from the last cycle on.
class PageTest : public ::testing::Test {
 protected:
  PageTest() : board_(log_) {}

  static probes::DeviceInfo Gpu(int index, std::string name = "Test GPU") {
    probes::DeviceInfo d;
    d.index = index;
    d.uuid = "GPU-" + std::to_string(index);
    d.name = std::move(name);
    d.pci_bus_id = "0000:0" + std::to_string(index) + ":00.0";
    d.simulated = true;
    return d;
  }

  static core::SeriesHealth Series(TransferMode mode, Direction direction, double gbps) {
    core::SeriesHealth s;
    s.mode = mode;
    s.direction = direction;
    s.size_bytes = 64ull << 20;
    s.median_bytes_per_s = gbps * 1e9;
    s.baseline_bytes_per_s = 25e9;
    s.baseline_cycles = 7;
    s.headline = mode == TransferMode::kPinned && direction != Direction::kBidirectional;
    return s;
  }

  // Cycles of one GPU: healthy, then (when `low_from` < cycles) pinned h2d at 5.1 GB/s.
  void Cycles(int gpu, int cycles, int low_from, std::vector<core::Diagnosis> causes = {}) {
    board_.SetDevice(Gpu(gpu, names_[gpu]));
    for (int i = 0; i < cycles; ++i) {
      core::DeviceHealth h;
      h.gpu = gpu;
      h.uuid = Gpu(gpu).uuid;
      h.band = {19.85e9, 26.15e9, "link Gen4 x16 at 0000:00:01.0"};
      const bool low = i >= low_from;
      h.series = {Series(TransferMode::kPinned, Direction::kH2D, low ? 5.1 : 25.2),
                  Series(TransferMode::kPinned, Direction::kD2H, 25.4),
                  Series(TransferMode::kPinned, Direction::kBidirectional, 45.0)};
      h.series[0].below_band = h.series[0].degraded = low;
      for (core::SeriesHealth& s : h.series)
        s.measured_at = now_ - std::chrono::seconds(60 * (cycles - i));
      h.verdicts = {{TransferMode::kPinned, Direction::kH2D, low, false},
                    {TransferMode::kPinned, Direction::kD2H, false, false}};
      if (low) h.diagnoses = causes;
      board_.RecordHealth(h, low ? core::DeviceVerdict::kDegraded : core::DeviceVerdict::kOk,
                          false);
    }
  }

  std::string Document() const {
    DaemonStatus daemon;
    daemon.cycles = 10;
    daemon.now = now_;
    daemon.stale_after_s = 210;
    daemon.summary = "DEGRADED gpu0 pinned h2d <b>";
    return board_.Render(daemon, std::chrono::system_clock::now());
  }

  // The <svg> elements of a page.
  static std::vector<std::string> Svgs(const std::string& page) {
    std::vector<std::string> svgs;
    for (std::size_t at = page.find("<svg"); at != std::string::npos;
         at = page.find("<svg", at + 1)) {
      svgs.push_back(page.substr(at, page.find("</svg>", at) - at));
    }
    return svgs;
  }

  static int Count(const std::string& text, const std::string& what) {
    int n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  }

  core::IncidentLog log_;
  StatusBoard board_;
  core::SteadyTime now_ = core::SteadyTime{} + std::chrono::hours(3);
  std::map<int, std::string> names_ = {{0, "Test GPU"}, {1, "Test GPU"}};
};

TEST_F(PageTest, ShowsEachGpusVerdictCauseAndAPlotOfItsReadingsAgainstTheBand) {
  Cycles(0, 12, 10,
         {{core::DiagnosisCause::kLinkDowntrained, "0000:01:00.0 Gen4 x4, max Gen4 x16",
           "reseat the GPU"},
          {core::DiagnosisCause::kCapabilityMismatch, "capped by the slot", "not a fault"}});
  Cycles(1, 12, 99);
  board_.RecordEvidence(0, {"gpu0-20261203T120000Z.json", "/var/lib/xferd/evidence/x.json",
                            std::chrono::system_clock::now(), 4096});
  const std::string page = RenderStatusPage(Document(), "/metrics");

  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  // The degraded GPU's fault code, its recommended action and the evidence kept of it.
  EXPECT_THAT(page, HasSubstr("<code class=\"code\">XFERD-101</code> pinned h2d"));
  EXPECT_THAT(page, HasSubstr("recommended action: <strong>reboot</strong>"));
  EXPECT_THAT(page, HasSubstr("evidence kept: gpu0-20261203T120000Z.json (<code>xferd evidence "
                              "0</code>"));
  EXPECT_THAT(page, HasSubstr("data-verdict=\"degraded\""));
  EXPECT_THAT(page, HasSubstr("data-verdict=\"ok\""));
  EXPECT_THAT(page, HasSubstr("pinned h2d 64MiB: 5.10 GB/s &lt; 19.85 GB/s band; cause "
                              "link_downtrained"));
  EXPECT_THAT(page, HasSubstr("reseat the GPU"));
  EXPECT_THAT(page, HasSubstr("note, not a fault"));  // capability_mismatch, marked a note
  EXPECT_THAT(page, HasSubstr("fault, leads"));
  // The links to the other views.
  for (const char* link : {"href=\"/metrics\"", "href=\"/healthz\"", "href=\"/api/v1/status\""}) {
    EXPECT_THAT(page, HasSubstr(link));
  }
  // One plot per GPU, each with the band and one point per reading of its two headline
  // series; the degraded GPU's low readings ringed.
  const std::vector<std::string> svgs = Svgs(page);
  ASSERT_EQ(svgs.size(), 2u);
  for (int gpu = 0; gpu < 2; ++gpu) {
    const std::string& svg = svgs[gpu];
    EXPECT_THAT(svg, HasSubstr("data-gpu=\"" + std::to_string(gpu) + "\""));
    EXPECT_EQ(Count(svg, "class=\"band\""), 1);
    EXPECT_EQ(Count(svg, "class=\"band-lower\""), 1);
    EXPECT_EQ(Count(svg, "<circle"), 24) << "12 readings of pinned h2d and of d2h";
    EXPECT_EQ(Count(svg, "class=\"point low\""), gpu == 0 ? 2 : 0);
  }
  // The table of series: each row, its figures per direction for bidir (45.0 both ways).
  EXPECT_THAT(page, HasSubstr("<td>pinned bidir 64MiB</td>"));
  EXPECT_THAT(page, HasSubstr(">22.50<"));
  EXPECT_THAT(page, HasSubstr("DEGRADED, below band"));
  EXPECT_EQ(Count(page, "<table class=\"series\">"), 2);
}

TEST_F(PageTest, EscapesEveryOutsideString) {
  names_[0] = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
  Cycles(0, 3, 1,
         {{core::DiagnosisCause::kLinkDowntrained, "<b>detail</b> & 'quoted'",
           "run <code>lspci</code>"}});
  const std::string page = RenderStatusPage(Document(), "/m\"><script>x</script>");
  EXPECT_THAT(page, Not(HasSubstr("<script")));
  EXPECT_THAT(page, Not(HasSubstr("<img")));
  EXPECT_THAT(page, Not(HasSubstr("<b>")));
  EXPECT_THAT(page, Not(HasSubstr("<code>")));
  EXPECT_THAT(page, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img"));
  EXPECT_THAT(page, HasSubstr("&lt;b&gt;detail&lt;/b&gt; &amp; &#39;quoted&#39;"));
}

// The page loads nothing: no script, no element that fetches (img, link, iframe, object),
// no URL of another host; styles inline.
TEST_F(PageTest, LoadsNothingFromAnywhere) {
  Cycles(0, 5, 3, {{core::DiagnosisCause::kLinkDowntrained, "d", "a"}});
  const std::string page = RenderStatusPage(Document(), "/metrics");
  for (const char* tag :
       {"<script", "<img", "<link", "<iframe", "<object", "<embed", "@import", "url(", " src="}) {
    EXPECT_THAT(page, Not(HasSubstr(tag))) << tag;
  }
  // The only absolute URL is the SVG namespace, which names, never fetches.
  const std::regex url("(https?:)?//[a-z0-9.-]+");
  std::string rest = page;
  for (std::smatch m; std::regex_search(rest, m, url); rest = m.suffix()) {
    EXPECT_EQ(m.str(), "http://www.w3.org") << "an address in the page: " << m.str();
  }
}

// A verdict word this xferd does not know (a newer daemon's) is shown as it is, with the
// document's reason; a document without readings gets a plot that says so; one that is not
// a document gets a page that says that.
TEST_F(PageTest, AnUnknownVerdictIsShownWithItsReason) {
  const json doc = {{"version", 1},
                    {"verdict", "unknown"},
                    {"summary", "unknown: gpu0"},
                    {"daemon", {{"healthy", true}, {"cycles", 3}, {"last_cycle_age_seconds", 2}}},
                    {"gpus",
                     {{{"gpu", 0},
                       {"name", "MIG GPU"},
                       {"verdict", "unknown"},
                       {"verdict_reason", "MIG enabled with no GPU instance to probe through"},
                       {"series", json::array()},
                       {"causes", json::array()}}}},
                    {"incidents", json::array()}};
  const std::string page = RenderStatusPage(doc.dump(), "/metrics");
  EXPECT_THAT(page, HasSubstr("<span class=\"v\">unknown</span>"));
  EXPECT_THAT(page, HasSubstr("MIG enabled with no GPU instance to probe through"));
  EXPECT_THAT(page, HasSubstr("no readings yet"));

  const std::string broken = RenderStatusPage("{\"version\": ", "/metrics");
  EXPECT_THAT(broken, HasSubstr("not a status document"));
  EXPECT_THAT(broken, HasSubstr("href=\"/api/v1/status\""));
}

// What the link watch counted between probes and the GPU's shape (confidential computing,
// MIG) are on the page beside the link; a plain, unwatched GPU says why it is not watched.
TEST_F(PageTest, ShowsTheLinkWatchAndTheGpusShape) {
  probes::DeviceInfo gpu = Gpu(0);
  gpu.cc.state = probes::CcState::kOn;
  gpu.cc.gpus_ready = true;
  gpu.mig.mode = probes::MigMode::kEnabled;
  probes::MigInstance a, b;
  a.gpu_instance_id = 1, a.profile = "3g.71gb";
  b.gpu_instance_id = 2, b.profile = "1g.18gb";
  gpu.mig.instances = {a, b};
  board_.SetDevice(gpu);
  board_.SetDevice(Gpu(1));
  board_.RecordLinkWatch(0, samples::FlappingLinkWatch());
  const std::string page = RenderStatusPage(Document(), "/metrics");
  EXPECT_THAT(page, HasSubstr("<strong>flapping</strong>: 6 changes, 12 s reduced in the last "
                              "600 s"));
  EXPECT_THAT(page, HasSubstr("Gen4 x8 -&gt; Gen4 x16"));
  EXPECT_THAT(page, HasSubstr("confidential computing on (GPUs ready); MIG enabled: 2 instances "
                              "(3g.71gb, 1g.18gb)"));
  // gpu1: not watched, and why; a plain GPU has no shape row.
  const std::string gpu1 = page.substr(page.find("id=\"gpu1\""));
  EXPECT_THAT(gpu1, HasSubstr("not watched: the link watch is off"));
  EXPECT_THAT(gpu1, Not(HasSubstr("<th>shape</th>")));
}

// The view: what both the page and `xferd status` show, from the document alone.
TEST_F(PageTest, TheViewJoinsEachSeriesWithItsScheduleAndLastProbe) {
  Cycles(0, 4, 2, {{core::DiagnosisCause::kLinkDowntrained, "d", "a"}});
  probes::ProbeSpec h2d;
  h2d.mode = TransferMode::kPinned;
  h2d.size_bytes = 64ull << 20;
  probes::ProbeSpec d2h = h2d;
  d2h.direction = Direction::kD2H;
  board_.RecordSchedule(
      0, {1,
          2,
          0.5,
          0.01,
          1,
          {{h2d, core::ProbeClass::kHeadline, false, now_ + std::chrono::seconds(45)},
           {d2h, core::ProbeClass::kRotating, true, std::nullopt}}});
  board_.RecordSkipped(0, d2h, ProbeResult::kTimeout);
  std::string problem;
  const auto view = ReadStatusView(Document(), problem);
  ASSERT_TRUE(view) << problem;
  ASSERT_EQ(view->gpus.size(), 1u);
  const GpuView& g = view->gpus[0];
  EXPECT_EQ(g.verdict, "degraded");
  EXPECT_EQ(g.LeadingCause(), "link_downtrained");
  ASSERT_EQ(g.series.size(), 3u);
  const SeriesView& pinned = g.series[0];
  EXPECT_EQ(pinned.Name(), "pinned h2d 64MiB");
  EXPECT_EQ(pinned.run_class, "headline");
  EXPECT_EQ(*pinned.next_run_s, 45);
  EXPECT_EQ(pinned.recent.size(), 4u);
  EXPECT_EQ(pinned.recent.back().age_s, 60);
  const SeriesView& back = g.series[1];
  EXPECT_TRUE(back.held_back);
  EXPECT_EQ(back.last_result, "timeout");
  EXPECT_EQ(back.State(), "timeout");
  const SeriesView& both = g.series[2];
  EXPECT_TRUE(both.BothWays());

  // The columns, as both views print them.
  std::map<std::string, std::string> cells;
  for (const SeriesColumn& c : SeriesColumns()) cells[c.header] = c.cell(pinned);
  EXPECT_EQ(cells["series"], "pinned h2d 64MiB");
  EXPECT_EQ(cells["reading GB/s"], "5.10");
  EXPECT_EQ(cells["band min GB/s"], "19.85");
  EXPECT_EQ(cells["baseline GB/s"], "25.00");
  EXPECT_EQ(cells["age"], "60 s");
  EXPECT_EQ(cells["next run"], "in 45 s");
  EXPECT_EQ(cells["state"], "DEGRADED, below band");
  for (const SeriesColumn& c : SeriesColumns()) cells[c.header] = c.cell(back);
  EXPECT_EQ(cells["next run"], "held back");
  for (const SeriesColumn& c : SeriesColumns()) cells[c.header] = c.cell(both);
  EXPECT_EQ(cells["reading GB/s"], "22.50") << "per direction";
  EXPECT_EQ(cells["band min GB/s"], "19.85");
}

// A document of the wrong types in every field is read as far as it goes, never thrown on.
TEST_F(PageTest, TheViewReadsWhatItCanOfAnOddDocument) {
  const json doc = json::parse(R"({
    "version": "1",
    "daemon": {"healthy": "yes", "cycles": -1},
    "gpus": [1, {"gpu": "zero",
                 "series": [{"mode": 3, "recent": {"age_seconds": [1, "a", 4, 5, 6],
                                                    "bytes_per_second": [2, 3, 4, -6]}}],
                 "causes": "none",
                 "link": {"pcie": {"current": {"generation": "4"}}}}],
    "incidents": [{"series": [{"mode": "pinned"}]}]
  })");
  std::string problem;
  const auto view = ReadStatusView(doc.dump(), problem);
  ASSERT_TRUE(view) << problem;
  ASSERT_EQ(view->gpus.size(), 1u);
  EXPECT_EQ(view->gpus[0].index, -1);
  ASSERT_EQ(view->gpus[0].series.size(), 1u);
  EXPECT_EQ(view->gpus[0].series[0].recent.size(), 2u) << "[1, 2] and [4, 4]";
  EXPECT_TRUE(view->gpus[0].link.pcie);
  EXPECT_FALSE(RenderStatusPage(doc.dump(), "/metrics").empty());
  EXPECT_FALSE(ReadStatusView("[1, 2]", problem));
  EXPECT_FALSE(ReadStatusView("", problem));
}

TEST(StatusViewWords, AgesAndRates) {
  EXPECT_EQ(FormatAge(0.4), "0.4 s");
  EXPECT_EQ(FormatAge(0), "0 s");
  EXPECT_EQ(FormatAge(2.5), "2.5 s");
  EXPECT_EQ(FormatAge(0.0083), "0 s");
  EXPECT_EQ(FormatAge(0.99), "1 s");
  EXPECT_EQ(FormatAge(59), "59 s");
  EXPECT_EQ(FormatAge(600), "10 min");
  EXPECT_EQ(FormatAge(3600 + 5 * 60), "1 h 5 min");
  EXPECT_EQ(FormatAge(7200), "2 h");
  EXPECT_EQ(FormatAge(3 * 86400), "3 d");
  EXPECT_EQ(FormatAge(std::nullopt), "-");
  EXPECT_EQ(FormatGbps(19.849e9), "19.85");
  EXPECT_EQ(FormatGbps(std::nullopt), "-");
}

}  // namespace
}  // namespace xferd::exporter
