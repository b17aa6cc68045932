// The status board without a daemon: what each Record* puts in the document, the link
// errors' place before and after a reader hands them over, each series' recent readings and
// the configuration's last load, every field named in docs/http.md, and a document rendered
// while the probe thread records (run under TSan by the sanitizer pass).
#include "exporter/status.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "testing/samples.h"

namespace xferd::exporter {
namespace {

using nlohmann::json;
using probes::Direction;
using probes::TransferMode;
using samples::HealthOf;

probes::DeviceInfo Gpu(int index) {
  probes::DeviceInfo d;
  d.index = index;
  d.uuid = "GPU-" + std::to_string(index);
  d.name = "Test \x1b[31mGPU";  // outside text: printed escaped
  d.pci_bus_id = "0000:0" + std::to_string(index) + ":00.0";
  d.simulated = true;
  return d;
}

probes::LinkPath Path() {
  probes::LinkPath p;
  p.links.push_back({"0000:01:00.0", 4, 4, 4, 16});
  p.links.push_back({"0000:00:01.0", 4, 16, 4, 16});
  probes::PairLinkEnds(p);
  p.numa_node = 0;
  p.iommu_type = "identity";
  return p;
}

probes::ProbeSample Sample(TransferMode mode, Direction direction, double gbps, bool ok = true) {
  probes::ProbeSample s;
  s.spec.mode = mode;
  s.spec.direction = direction;
  s.spec.size_bytes = 64ull << 20;
  s.bytes_per_transfer = s.spec.size_bytes;
  s.status = ok ? probes::ProbeStatus::kOk : probes::ProbeStatus::kError;
  if (ok) {
    s.durations_s = {static_cast<double>(s.bytes_per_transfer) / (gbps * 1e9)};
    s.traffic = probes::LinkTraffic{};
    s.contention.state = probes::ContentionState::kClear;
    s.contention.foreign_h2d_bytes_per_s = 1.5e8;
  } else {
    s.message = "device lost";
  }
  return s;
}

core::DeviceHealth Degraded() {
  core::DeviceHealth h;
  h.gpu = 0;
  h.uuid = "GPU-0";
  h.band = {19.85e9, 26.15e9, "link Gen4 x16 at 0000:00:01.0"};
  core::SeriesHealth s;
  s.mode = TransferMode::kPinned;
  s.direction = Direction::kH2D;
  s.size_bytes = 64ull << 20;
  s.median_bytes_per_s = 5.1e9;
  s.baseline_bytes_per_s = 25e9;
  s.baseline_cycles = 7;
  s.below_band = s.below_baseline = true;
  s.bad_streak = 3;
  s.degraded = true;
  h.series.push_back(s);
  h.verdicts.push_back({TransferMode::kPinned, Direction::kH2D, true, true});
  h.diagnoses.push_back({core::DiagnosisCause::kLinkDowntrained,
                         "0000:01:00.0 Gen4 x4, max Gen4 x16", "reseat the GPU"});
  return h;
}

json Render(const StatusBoard& board, DaemonStatus daemon = {}) {
  daemon.cycles = daemon.cycles == 0 ? 3 : daemon.cycles;
  return json::parse(board.Render(daemon, std::chrono::system_clock::now()));
}

TEST(StatusBoard, AGpuWithoutACycleIsPending) {
  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  const json doc = Render(board);
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["verdict"], "pending");
  ASSERT_EQ(doc["gpus"].size(), 1u);
  const json& g = doc["gpus"][0];
  EXPECT_EQ(g["verdict"], "pending");
  EXPECT_EQ(g["name"], "Test \\x1b[31mGPU");
  EXPECT_TRUE(g["band"].is_null());
  EXPECT_TRUE(g["headline"].is_null());
  EXPECT_EQ(g["link"]["read"], false);
  EXPECT_TRUE(g["link"]["pcie"].is_null());
  EXPECT_EQ(g["link"]["errors"]["read"], false);
  EXPECT_TRUE(g["contention"]["traffic_readable"].is_null());
  EXPECT_TRUE(g["probes"].empty());
  EXPECT_TRUE(doc["incidents"].empty());
}

// The node's verdict is the one its GPUs' give (core::NodeVerdict), whenever the document
// is made: during the first cycle too, when one GPU is judged and the next is not yet (a
// node "pending" over GPUs "ok" and "degraded" was a document xferd health refused).
TEST(StatusBoard, TheNodeVerdictIsAlwaysTheOneItsGpusGive) {
  core::IncidentLog log;
  StatusBoard board(log);
  for (int i = 0; i < 2; ++i) board.SetDevice(Gpu(i));
  const core::DeviceHealth first = HealthOf(0);
  board.RecordHealth(first, log.Observe(first, false, 1, std::chrono::system_clock::now()), false);
  DaemonStatus first_cycle;
  first_cycle.cycles = 0;
  json doc = json::parse(board.Render(first_cycle, std::chrono::system_clock::now()));
  EXPECT_EQ(doc["gpus"][0]["verdict"], "ok");
  EXPECT_EQ(doc["gpus"][1]["verdict"], "pending");
  EXPECT_EQ(doc["verdict"], "pending");
  // The second judged ok before the cycle is counted: ok, as its GPUs are.
  const core::DeviceHealth second = HealthOf(1);
  board.RecordHealth(second, log.Observe(second, false, 1, std::chrono::system_clock::now()),
                     false);
  doc = json::parse(board.Render(first_cycle, std::chrono::system_clock::now()));
  EXPECT_EQ(doc["verdict"], "ok");
  const core::DeviceHealth degraded = Degraded();
  board.RecordHealth(degraded, log.Observe(degraded, false, 1, std::chrono::system_clock::now()),
                     false);
  doc = json::parse(board.Render(first_cycle, std::chrono::system_clock::now()));
  EXPECT_EQ(doc["verdict"], "degraded");
  core::IncidentLog empty_log;
  StatusBoard none(empty_log);
  doc = json::parse(none.Render(first_cycle, std::chrono::system_clock::now()));
  EXPECT_EQ(doc["verdict"], "pending");
}

TEST(StatusBoard, SaysWhatWasRecorded) {
  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  board.RecordLinkPath(0, Path());
  board.RecordSample(Gpu(0), Sample(TransferMode::kPinned, Direction::kH2D, 5.1));
  board.RecordSample(Gpu(0), Sample(TransferMode::kPageable, Direction::kH2D, 0, false));
  probes::ProbeSpec busy;
  busy.mode = TransferMode::kZeroCopy;
  busy.size_bytes = 64ull << 20;
  board.RecordSkipped(0, busy, ProbeResult::kSkippedBusy);
  const core::DeviceHealth health = Degraded();
  const auto verdict = log.Observe(health, false, 1, std::chrono::system_clock::now());
  board.RecordHealth(health, verdict, false);
  const json doc = Render(board);
  EXPECT_EQ(doc["verdict"], "degraded");
  const json& g = doc["gpus"][0];
  EXPECT_EQ(g["verdict"], "degraded");
  EXPECT_EQ(g["band"]["lower_bytes_per_second"], 19.85e9);
  ASSERT_EQ(g["series"].size(), 1u);
  const json& s = g["series"][0];
  EXPECT_EQ(s["size"], "64MiB");
  EXPECT_EQ(s["held_to_band"], true);
  EXPECT_EQ(s["band_lower_bytes_per_second"], 19.85e9);
  EXPECT_EQ(s["below_band"], true);
  EXPECT_EQ(g["headline"]["below"], "band");
  EXPECT_EQ(g["headline"]["reading_bytes_per_second"], 5.1e9);
  EXPECT_EQ(g["causes"][0]["cause"], "link_downtrained");
  EXPECT_EQ(g["causes"][0]["advice"], "reseat the GPU");
  EXPECT_EQ(g["link"]["pcie"]["current"]["width"], 4);
  EXPECT_EQ(g["link"]["pcie"]["max"]["width"], 16);
  EXPECT_EQ(g["link"]["pcie"]["downtrained"], true);
  EXPECT_EQ(g["link"]["iommu"], "identity");
  EXPECT_EQ(g["contention"]["traffic_readable"], true);
  EXPECT_EQ(g["contention"]["foreign_h2d_bytes_per_second"], 1.5e8);
  EXPECT_EQ(g["contention"]["last_probe"]["mode"], "pageable");
  ASSERT_EQ(g["probes"].size(), 3u);
  for (const json& p : g["probes"]) {
    if (p["mode"] == "pinned") {
      EXPECT_EQ(p["result"], "ok");
      EXPECT_FALSE(p["last_success"].is_null());
    } else if (p["mode"] == "pageable") {
      EXPECT_EQ(p["result"], "error");
      EXPECT_EQ(p["message"], "device lost");
      EXPECT_TRUE(p["last_success"].is_null());
    } else {
      EXPECT_EQ(p["result"], "skipped_busy");
    }
  }
  ASSERT_EQ(doc["incidents"].size(), 1u);
  EXPECT_EQ(doc["incidents"][0]["to"], "degraded");
  // The fault codes (core/fault_codes.h): the GPU's, the headline's and each cause's.
  EXPECT_EQ(g["code"], "XFERD-101");
  EXPECT_EQ(g["action"], "reboot");
  EXPECT_EQ(g["headline"]["code"], "XFERD-101");
  EXPECT_EQ(g["headline"]["action"], "reboot");
  EXPECT_EQ(g["causes"][0]["code"], "XFERD-101");
  EXPECT_EQ(doc["incidents"][0]["causes"][0]["code"], "XFERD-101");
  EXPECT_EQ(doc["incidents"][0]["causes"][0]["action"], "reboot");
  // No evidence record yet; once the writer hands one over, the GPU links it.
  EXPECT_TRUE(g["evidence"].is_null());
  EXPECT_TRUE(doc["incidents"][0]["evidence"].is_null());
  board.RecordEvidence(
      0, {"20261201T100000123Z-gpu0.json", "/var/lib/xferd/evidence/20261201T100000123Z-gpu0.json",
          std::chrono::system_clock::now(), 7079});
  const json after = Render(board);
  EXPECT_EQ(after["gpus"][0]["evidence"]["record"], "20261201T100000123Z-gpu0.json");
  EXPECT_EQ(after["gpus"][0]["evidence"]["bytes"], 7079);
}

// A GPU with no verdict to act on carries its state's code; an ok one none.
TEST(StatusBoard, AGpuWithNoVerdictCarriesItsStatesCodeAndAnOkOneNone) {
  core::IncidentLog log;
  StatusBoard board(log);
  for (int i = 0; i < 2; ++i) board.SetDevice(Gpu(i));
  const core::DeviceHealth ok = HealthOf(1);
  board.RecordHealth(ok, core::DeviceVerdict::kOk, false);
  const json doc = Render(board);
  EXPECT_EQ(doc["gpus"][0]["code"], "XFERD-900");
  EXPECT_EQ(doc["gpus"][0]["action"], "none");
  EXPECT_TRUE(doc["gpus"][1]["code"].is_null());
  EXPECT_TRUE(doc["gpus"][1]["action"].is_null());
  core::DeviceHealth stale = ok;
  board.RecordHealth(stale, core::DeviceVerdict::kStale, false);
  EXPECT_EQ(Render(board)["gpus"][1]["code"], "XFERD-901");
}

// Each reading's age on the daemon's clock, what is stale, the leading cause and the
// causes ranked with their kind, the schedule (allowance, what was held back, when each
// series runs next) and the bounds the ages are held to.
TEST(StatusBoard, SaysHowOldEachReadingIsAndWhenEachSeriesRunsNext) {
  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  const core::SteadyTime now = core::SteadyTime{} + std::chrono::hours(2);
  core::DeviceHealth health = Degraded();
  health.series[0].measured_at = now - std::chrono::seconds(40);
  health.series[0].measured_wall = std::chrono::system_clock::now();
  health.series[0].headline = true;
  core::SeriesHealth old = health.series[0];
  old.mode = TransferMode::kPageable;
  old.degraded = old.below_band = old.below_baseline = false;
  old.stale = true;
  old.headline = false;
  old.measured_at = now - std::chrono::minutes(31);
  health.series.push_back(old);
  health.diagnoses.insert(health.diagnoses.begin(),
                          {core::DiagnosisCause::kCapabilityMismatch, "capped", "not a fault"});
  core::RankCauses(health.diagnoses);
  board.RecordHealth(health, log.Observe(health, false, 1, std::chrono::system_clock::now()),
                     false);
  GpuSchedule schedule{0.9, 2.5, 1.0, 0.0025, 1, {}};
  probes::ProbeSpec pinned, managed;
  managed.mode = TransferMode::kManaged;
  schedule.series.push_back(
      {pinned, core::ProbeClass::kHeadline, false, now + std::chrono::seconds(60)});
  schedule.series.push_back({managed, core::ProbeClass::kRotating, true, std::nullopt});
  board.RecordSchedule(0, schedule);
  DaemonStatus daemon;
  daemon.now = now;
  daemon.freshness = {210, 1800, 150};
  const json doc = Render(board, daemon);
  const json& g = doc["gpus"][0];
  EXPECT_EQ(g["series"][0]["age_seconds"], 40);
  EXPECT_EQ(g["series"][0]["stale"], false);
  EXPECT_EQ(g["series"][1]["age_seconds"], 31 * 60);
  EXPECT_EQ(g["series"][1]["stale"], true);
  EXPECT_EQ(g["stale_series"], 1);
  EXPECT_EQ(g["headline"]["cause"], "link_downtrained");
  EXPECT_EQ(g["causes"][0]["cause"], "link_downtrained");
  EXPECT_EQ(g["causes"][0]["leads"], true);
  EXPECT_EQ(g["causes"][0]["fault"], true);
  EXPECT_EQ(g["causes"].back()["cause"], "capability_mismatch");
  EXPECT_EQ(g["causes"].back()["fault"], false);
  EXPECT_EQ(g["schedule"]["allowance_seconds"], 0.9);
  EXPECT_EQ(g["schedule"]["held_back"], 1);
  EXPECT_EQ(g["schedule"]["series"][0]["class"], "headline");
  EXPECT_EQ(g["schedule"]["series"][0]["next_run_in_seconds"], 60);
  EXPECT_EQ(g["schedule"]["series"][1]["held_back"], true);
  EXPECT_TRUE(g["schedule"]["series"][1]["next_run_in_seconds"].is_null());
  EXPECT_EQ(doc["daemon"]["freshness"]["degraded_seconds"], 150);
}

TEST(StatusBoard, LinkErrorsAppearOnceAReaderHandsThemOver) {
  core::IncidentLog log;
  StatusBoard board(log);
  const probes::DeviceInfo gpu = Gpu(0);
  board.SetDevice(gpu);
  EXPECT_EQ(Render(board)["gpus"][0]["link"]["errors"]["read"], false);

  // The GPU's own AER files, read; a root port above it whose files are missing (a VM, AER
  // off); NVML's replay counter not there.
  core::LinkErrorReading reading;
  core::LinkErrorDevice own;
  own.read.bdf = gpu.pci_bus_id;
  own.read.device = {12, 0, 0};
  own.readable = true;
  core::LinkErrorDevice port;
  port.read.bdf = "0000:00:01.0";
  port.read.root_port = true;
  port.problem = "no AER counters in sysfs";
  reading.aer = {own, port};
  reading.replays_problem = "NVML not loaded";
  board.RecordLinkErrors(gpu, reading);

  const json errors = Render(board)["gpus"][0]["link"]["errors"];
  EXPECT_EQ(errors["read"], true);
  ASSERT_EQ(errors["counters"].size(), 3u + 6u + 1u);  // the GPU's 3, the root port's 3 + 3
  const json& cor = errors["counters"][0];
  EXPECT_EQ(cor["device"], gpu.pci_bus_id);
  EXPECT_EQ(cor["counter"], "aer_dev_correctable");
  EXPECT_EQ(cor["class"], "correctable");
  EXPECT_EQ(cor["readable"], true);
  EXPECT_EQ(cor["value"], 12);
  const json& missing = errors["counters"][3];
  EXPECT_EQ(missing["device"], "0000:00:01.0");
  EXPECT_EQ(missing["readable"], false);
  EXPECT_TRUE(missing["value"].is_null()) << "not readable is no value, never 0";
  EXPECT_EQ(missing["reason"], "no AER counters in sysfs");
  const json& replays = errors["counters"].back();
  EXPECT_EQ(replays["counter"], "nvml_pcie_replay");
  EXPECT_EQ(replays["source"], "nvml_replay");
  EXPECT_TRUE(replays["value"].is_null());
  EXPECT_EQ(replays["reason"], "NVML not loaded");
}

TEST(StatusBoard, TheLinkWatchSaysWhatItCountedOnceItWatches) {
  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  EXPECT_EQ(Render(board)["gpus"][0]["link"]["watch"]["watching"], false);
  const core::LinkWatchState w = samples::FlappingLinkWatch();
  board.RecordLinkWatch(0, w);
  const json watch = Render(board)["gpus"][0]["link"]["watch"];
  EXPECT_EQ(watch["watching"], true);
  EXPECT_EQ(watch["source"], "sysfs");
  EXPECT_EQ(watch["transitions_total"], 17);
  EXPECT_EQ(watch["reduced_seconds_total"], 42.5);
  EXPECT_EQ(watch["window_seconds"], 600);
  EXPECT_EQ(watch["window_transitions"], 6);
  EXPECT_EQ(watch["window_reduced_seconds"], 12);
  EXPECT_EQ(watch["flapping"], true);
  EXPECT_EQ(watch["last_seen"], w.last_seen);
}

// Each series keeps its last kRecentReadings judged readings, oldest first, with their ages
// on the daemon's clock: a reading is added once (a verdict judged again between cycles
// hands the same one over), the oldest goes past the bound, and the ring of a series the
// health no longer names goes with it.
TEST(StatusBoard, KeepsTheRecentReadingsOfEachSeriesBounded) {
  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  const core::SteadyTime start = core::SteadyTime{} + std::chrono::hours(1);
  core::DeviceHealth health = Degraded();
  core::SeriesHealth other = health.series[0];
  other.mode = TransferMode::kZeroCopy;
  health.series.push_back(other);
  const std::size_t readings = kRecentReadings + 8;
  for (std::size_t i = 0; i < readings; ++i) {
    for (core::SeriesHealth& s : health.series) {
      s.measured_at = start + std::chrono::seconds(60 * i);
      s.median_bytes_per_s = 1e9 * static_cast<double>(i + 1);
    }
    board.RecordHealth(health, core::DeviceVerdict::kDegraded, false);
    board.RecordHealth(health, core::DeviceVerdict::kDegraded, false);  // the same readings
  }
  DaemonStatus daemon;
  daemon.now = start + std::chrono::seconds(60 * (readings - 1) + 5);
  json doc = Render(board, daemon);
  const json& ages = doc["gpus"][0]["series"][0]["recent"]["age_seconds"];
  const json& rates = doc["gpus"][0]["series"][0]["recent"]["bytes_per_second"];
  ASSERT_EQ(ages.size(), kRecentReadings);
  ASSERT_EQ(rates.size(), kRecentReadings);
  // The oldest kept is reading 9 (the first 8 dropped), the newest the last, 5 s ago.
  EXPECT_EQ(rates[0], 9e9);
  EXPECT_EQ(ages[0], 60.0 * (kRecentReadings - 1) + 5);
  EXPECT_EQ(rates.back(), 1e9 * static_cast<double>(readings));
  EXPECT_EQ(ages.back(), 5);
  EXPECT_EQ(doc["gpus"][0]["series"][1]["recent"]["age_seconds"].size(), kRecentReadings);

  // The zero_copy series is planned no more: its readings go.
  health.series.pop_back();
  health.series[0].measured_at = *daemon.now;
  board.RecordHealth(health, core::DeviceVerdict::kDegraded, false);
  doc = Render(board, daemon);
  ASSERT_EQ(doc["gpus"][0]["series"].size(), 1u);
  EXPECT_EQ(doc["gpus"][0]["series"][0]["recent"]["age_seconds"].back(), 0);
  health.series.push_back(other);
  health.series.back().measured_at.reset();
  board.RecordHealth(health, core::DeviceVerdict::kDegraded, false);
  EXPECT_TRUE(Render(board, daemon)["gpus"][0]["series"][1]["recent"]["age_seconds"].empty());
}

// The configuration's last load: the start's, then each reload's result, a refused one
// with its error (escaped: it quotes the file).
TEST(StatusBoard, SaysTheLastReloadsResult) {
  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  const auto start = std::chrono::system_clock::time_point{} + std::chrono::hours(24 * 365 * 57);
  board.RecordConfigLoad(false, true, start, "");
  json reload = Render(board)["daemon"]["reload"];
  EXPECT_EQ(reload["successful"], true);
  EXPECT_EQ(reload["reloads"], 0);
  EXPECT_EQ(reload["error"], "");
  EXPECT_EQ(reload["time"], core::FormatUtcTime(start));

  const auto later = start + std::chrono::minutes(5);
  board.RecordConfigLoad(true, false, later, "/etc/xferd/x.toml:3: interval = \"0s\"\x1b");
  reload = Render(board)["daemon"]["reload"];
  EXPECT_EQ(reload["successful"], false);
  EXPECT_EQ(reload["reloads"], 1);
  EXPECT_EQ(reload["error"], "/etc/xferd/x.toml:3: interval = \"0s\"\\x1b");
  EXPECT_EQ(reload["time"], core::FormatUtcTime(later));

  board.RecordConfigLoad(true, true, later + std::chrono::minutes(1), "ignored");
  reload = Render(board)["daemon"]["reload"];
  EXPECT_EQ(reload["successful"], true);
  EXPECT_EQ(reload["reloads"], 2);
  EXPECT_EQ(reload["error"], "");
}

// Every field the document has (its tables, StatusFieldNames) is named in docs/http.md's
// tables of the document ("The document (version 1)" and what follows it), so a field added to a
// table and not to the docs fails here; and the names are what a rendered document holds.
TEST(StatusBoard, EveryFieldIsNamedInTheDocs) {
  std::ifstream in(std::filesystem::path(XFERD_TEST_DATA_DIR) / ".." / ".." / "docs" / "http.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string docs = text.str();
  const std::size_t from = docs.find("### The document (version 1)");
  const std::size_t to = docs.find("\n## ", from + 1);
  ASSERT_NE(from, std::string::npos);
  const std::string section = docs.substr(from, to - from);

  core::IncidentLog log;
  StatusBoard board(log);
  board.SetDevice(Gpu(0));
  board.RecordLinkPath(0, Path());
  board.RecordSample(Gpu(0), Sample(TransferMode::kPinned, Direction::kH2D, 5.1));
  board.RecordHealth(Degraded(), core::DeviceVerdict::kDegraded, false);
  board.RecordSchedule(0, {1, 2, 0.5, 0.01, 0, {{probes::ProbeSpec{}, {}, false, std::nullopt}}});
  board.RecordLinkErrors(Gpu(0), core::LinkErrorReading{});
  board.RecordEvidence(0, {"gpu0-20261203T120000Z.json", "/var/lib/xferd/evidence/x.json",
                           std::chrono::system_clock::now(), 4096});
  const json doc = Render(board);

  const std::vector<std::string> names = StatusFieldNames();
  ASSERT_GE(names.size(), 80u);
  for (const std::string& path : names) {
    // "gpus[].link.errors": its last part in backquotes, alone, after its parent's or
    // before its own fields' (`errors`, `errors[]`, `link.errors`, `errors.read`), as the
    // tables name nested fields.
    std::vector<std::string> parts;
    std::stringstream split(path);
    for (std::string part; std::getline(split, part, '.');) {
      if (part.size() > 2 && part.substr(part.size() - 2) == "[]") part.resize(part.size() - 2);
      parts.push_back(part);
    }
    const std::string& leaf = parts.back();
    const std::string dotted = parts.size() > 1 ? parts[parts.size() - 2] + "." + leaf : leaf;
    EXPECT_TRUE(section.find("`" + leaf + "`") != std::string::npos ||
                section.find("`" + leaf + "[]`") != std::string::npos ||
                section.find("`" + dotted + "`") != std::string::npos ||
                section.find("`" + leaf + ".") != std::string::npos)
        << path << " is not named in docs/http.md's tables of the document";
    // And the document has it where the path says.
    const json* at = &doc;
    std::string rest = path;
    while (!rest.empty()) {
      const std::size_t dot = rest.find('.');
      std::string part = rest.substr(0, dot);
      rest = dot == std::string::npos ? "" : rest.substr(dot + 1);
      const bool list = part.size() > 2 && part.substr(part.size() - 2) == "[]";
      if (list) part.resize(part.size() - 2);
      ASSERT_TRUE(at->is_object() && at->contains(part)) << path << ": no " << part;
      at = &(*at)[part];
      if (list && !rest.empty()) {
        ASSERT_TRUE(at->is_array() && !at->empty()) << path << ": " << part << " is empty";
        at = &(*at)[0];
      }
    }
  }
}

TEST(StatusBoard, RendersWhileTheProbeThreadRecords) {
  core::IncidentLog log;
  StatusBoard board(log);
  for (int i = 0; i < 2; ++i) board.SetDevice(Gpu(i));
  std::atomic<bool> stop{false};
  std::thread prober([&] {
    for (int n = 0; !stop; ++n) {
      for (int i = 0; i < 2; ++i) {
        board.RecordLinkPath(i, Path());
        board.RecordSample(Gpu(i), Sample(TransferMode::kPinned, Direction::kH2D, 5 + n % 3));
        core::DeviceHealth h = Degraded();
        h.gpu = i;
        h.uuid = Gpu(i).uuid;
        h.verdicts[0].degraded = n % 2 == 0;
        board.RecordHealth(h, log.Observe(h, false, 1, std::chrono::system_clock::now()), false);
      }
    }
  });
  for (int r = 0; r < 200; ++r) {
    const json doc = Render(board);
    ASSERT_EQ(doc["gpus"].size(), 2u);
  }
  stop = true;
  prober.join();
  EXPECT_LE(Render(board)["incidents"].size(), core::kIncidentLogCapacity);
}

}  // namespace
}  // namespace xferd::exporter
