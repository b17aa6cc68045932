// Evidence kept when a GPU turns DEGRADED (core/evidence.h): what a record holds, its bounds
// (count, size, lspci's time and text), and the file rules: a full disk drops the record and
// the keeper goes on, a crash leaves nothing half written (leftovers removed at start), and
// what else lies in the directory (links, FIFOs, huge files, other names) is never followed,
// read unbounded, counted or removed.
#include "core/evidence.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fault_codes.h"
#include "platform/files.h"
#include "testing/fakes.h"

namespace xferd::core {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::system_clock;

const system_clock::time_point kEvidenceT0 =
    system_clock::time_point(std::chrono::seconds(1'796'000'000));

probes::DeviceInfo EvidenceGpu(int index, bool simulated = true) {
  probes::DeviceInfo d;
  d.index = index;
  d.uuid = "GPU-" + std::to_string(index);
  d.name = "Test GPU";
  d.pci_bus_id = "0000:0" + std::to_string(index) + ":00.0";
  d.driver_version = "580.1";
  d.simulated = simulated;
  return d;
}

// A GPU whose own link trained down to x4, under a switch port.
probes::LinkPath TrainedDownPath(int index) {
  probes::LinkPath path;
  probes::PcieLink own;
  own.bdf = "0000:0" + std::to_string(index) + ":00.0";
  own.current_gen = 4, own.current_width = 4, own.max_gen = 4, own.max_width = 16;
  own.other_end_bdf = "0000:00:01.0";
  own.other_end_max_gen = 4, own.other_end_max_width = 16;
  probes::PcieLink up;
  up.bdf = "0000:00:01.0";
  up.current_gen = 4, up.current_width = 16, up.max_gen = 4, up.max_width = 16;
  path.links = {own, up};
  path.numa_node = 1;
  path.iommu_type = "DMA-FQ";
  return path;
}

probes::ProbeSample PinnedH2d(double bytes_per_s) {
  probes::ProbeSample s;
  s.spec.mode = probes::TransferMode::kPinned;
  s.spec.direction = probes::Direction::kH2D;
  s.spec.size_bytes = 64 << 20;
  s.status = probes::ProbeStatus::kOk;
  s.bytes_per_transfer = 64 << 20;
  s.durations_s = {(64 << 20) / bytes_per_s};
  s.host_numa_node = 0;
  return s;
}

LinkErrorReading CountersRead(std::uint64_t correctable, std::uint64_t replays) {
  LinkErrorReading r;
  LinkErrorDevice d;
  d.read.bdf = "0000:01:00.0";
  d.read.device = {correctable, 0, 0};
  d.readable = true;
  r.aer = {d};
  r.replays = replays;
  r.replays_readable = true;
  return r;
}

struct SeenCycle {
  CycleObservation obs;
  DeviceHealth health;
};

// One cycle of GPU `index` at kEvidenceT0 + `second`: pinned h2d at `gbps`, bad when below 19.85.
SeenCycle CycleAt(int index, int second, double gbps, int bad_streak, bool degraded,
                  bool simulated = true) {
  SeenCycle c;
  c.obs.device = EvidenceGpu(index, simulated);
  c.obs.link_path = TrainedDownPath(index);
  c.obs.samples = {PinnedH2d(gbps * 1e9)};
  c.obs.at_wall = kEvidenceT0 + std::chrono::seconds(second);
  c.obs.link_error_reading = CountersRead(100 + 50 * second, 7 * second);
  c.health.gpu = index;
  c.health.uuid = c.obs.device.uuid;
  c.health.band = {19.85e9, 26.15e9, "link Gen4 x16 at 0000:01:00.0, trained Gen4 x4"};
  SeriesHealth s;
  s.mode = probes::TransferMode::kPinned;
  s.direction = probes::Direction::kH2D;
  s.size_bytes = 64 << 20;
  s.median_bytes_per_s = gbps * 1e9;
  s.baseline_bytes_per_s = 25e9;
  s.below_band = gbps < 19.85;
  s.bad_streak = bad_streak;
  s.degraded = degraded;
  c.health.series = {s};
  c.health.verdicts = {{s.mode, s.direction, degraded, false, degraded}};
  if (gbps < 19.85) {
    c.health.diagnoses = {
        {DiagnosisCause::kLinkDowntrained, "0000:01:00.0 Gen4 x4, max Gen4 x16", "reseat"},
        {DiagnosisCause::kBelowBand, "pinned h2d 6.0 GB/s < 19.8 GB/s band",
         "see the other causes"}};
  }
  return c;
}

Incident IncidentOf(const SeenCycle& c) {
  IncidentLog log;
  std::optional<Incident> logged;
  log.Observe(c.health, false, 3, c.obs.at_wall, &logged);
  EXPECT_TRUE(logged.has_value());
  return *logged;
}

struct Outcomes {
  std::mutex mutex;
  std::vector<EvidenceWritten> all;
  std::function<void(const EvidenceWritten&)> Callback() {
    return [this](const EvidenceWritten& w) {
      std::lock_guard lock(mutex);
      all.push_back(w);
    };
  }
  std::vector<EvidenceWritten> Get() {
    std::lock_guard lock(mutex);
    return all;
  }
};

// Three cycles: one good, two bad; the second bad one turns it DEGRADED.
EvidenceWritten DegradeOnce(EvidenceKeeper& keeper, Outcomes& done, int index = 0, int at = 0,
                            bool simulated = true) {
  keeper.Observe(CycleAt(index, at, 25, 0, false, simulated).obs,
                 CycleAt(index, at, 25, 0, false, simulated).health, nullptr);
  const SeenCycle bad1 = CycleAt(index, at + 10, 6, 1, false, simulated);
  keeper.Observe(bad1.obs, bad1.health, nullptr);
  const SeenCycle bad2 = CycleAt(index, at + 20, 6, 2, true, simulated);
  const Incident incident = IncidentOf(bad2);
  const std::size_t before = done.Get().size();
  keeper.Observe(bad2.obs, bad2.health, &incident);
  EXPECT_TRUE(keeper.WaitIdle(30s));
  const auto all = done.Get();
  EXPECT_EQ(all.size(), before + 1);
  return all.empty() ? EvidenceWritten{} : all.back();
}

json RecordAt(const fs::path& dir, const std::string& name) {
  return json::parse(EvidenceStore(dir).Read(name));
}

// Options that keep records in `dir`/evidence.
EvidenceOptions InTempDir(const fakes::TempDir& dir) {
  EvidenceOptions options;
  options.dir = dir.path() / "evidence";
  return options;
}

// A keeper of `options`, started, and what it reported of each record.
struct StartedKeeper {
  explicit StartedKeeper(const EvidenceOptions& options) : keeper(options, done.Callback()) {
    removed_at_start = keeper.Start();
  }
  EvidenceWritten DegradeOnce(int index = 0, int at = 0, bool simulated = true) {
    return core::DegradeOnce(keeper, done, index, at, simulated);
  }
  Outcomes done;
  EvidenceKeeper keeper;
  std::size_t removed_at_start = 0;
};

TEST(EvidenceStore, NamesARecordByItsIncidentsTimeAndGpu) {
  const std::string name = EvidenceStore::RecordName(kEvidenceT0 + 123ms, 7);
  EXPECT_EQ(name, "20261130T005320123Z-gpu7.json");
  EXPECT_TRUE(EvidenceStore::IsRecordName(name));
  EXPECT_EQ(EvidenceStore::GpuOf(name), 7);
  EXPECT_EQ(EvidenceStore::GpuOf(EvidenceStore::RecordName(kEvidenceT0, 1234567)), 1234567);
  for (const char* odd :
       {"20261230T014320123Z-gpu7.json.tmp", ".20261230T014320123Z-gpu7.json",
        "20261230T014320123Z-gpu.json", "20261230X014320123Z-gpu7.json",
        "20261230T014320123Z-gpu7.jsonx", "../20261230T014320123Z-gpu7.json", "state.json", ""}) {
    EXPECT_FALSE(EvidenceStore::IsRecordName(odd)) << odd;
  }
}

TEST(EvidenceKeeper, KeepsWhatFlippedTheVerdictTheHopsTheCountersAndTheFacts) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  options.host_root = dir.path() / "host";
  fs::create_directories(options.host_root / "proc");
  dir.Write("host/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt quiet\n");
  StartedKeeper evidence(options);
  const EvidenceWritten w = evidence.DegradeOnce();
  ASSERT_TRUE(w.ok) << w.problem;
  EXPECT_EQ(w.code, "XFERD-101");
  EXPECT_EQ(w.cause, "link_downtrained");
  EXPECT_EQ(w.name, EvidenceStore::RecordName(kEvidenceT0 + 20s, 0));
  const json r = RecordAt(options.dir, w.name);
  EXPECT_EQ(r["evidence_version"], 1);
  EXPECT_EQ(r["gpu"]["uuid"], "GPU-0");
  EXPECT_EQ(r["gpu"]["driver_version"], "580.1");
  EXPECT_EQ(r["verdict"]["code"], "XFERD-101");
  EXPECT_EQ(r["verdict"]["action"], "reboot");
  EXPECT_EQ(r["incident"]["to"], "degraded");
  EXPECT_EQ(r["causes"][0]["code"], "XFERD-101");
  // The readings of the series: the good one, then the two bad ones of the streak, with
  // their times.
  const json& readings = r["streak"][0]["readings"];
  ASSERT_EQ(readings.size(), 3u) << r.dump(1);
  EXPECT_EQ(readings[0]["in_streak"], false);
  EXPECT_EQ(readings[0]["bad"], false);
  EXPECT_EQ(readings[1]["in_streak"], true);
  EXPECT_EQ(readings[2]["in_streak"], true);
  EXPECT_EQ(readings[2]["time"], FormatUtcTime(kEvidenceT0 + 20s));
  EXPECT_NEAR(readings[2]["bandwidth_bytes_per_second"].get<double>(), 6e9, 1e6);
  // Each hop: state and capability.
  const json& hops = r["link"]["hops"];
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_EQ(hops[0]["current"]["width"], 4);
  EXPECT_EQ(hops[0]["link_max"]["width"], 16);
  EXPECT_EQ(hops[0]["downtrained"], true);
  EXPECT_EQ(hops[1]["downtrained"], false);
  EXPECT_EQ(r["link"]["iommu_type"], "DMA-FQ");
  EXPECT_EQ(r["placement"]["gpu_numa_node"], 1);
  EXPECT_EQ(r["placement"]["host_buffer_numa_node"], 0);
  EXPECT_EQ(r["host"]["iommu_cmdline"], json::array({"intel_iommu=on", "iommu=pt"}));
  // The counters before the streak (its first bad reading at +10 s: the reading at +0 s)
  // and during it.
  EXPECT_EQ(r["link_errors"]["before"]["time"], FormatUtcTime(kEvidenceT0));
  EXPECT_EQ(r["link_errors"]["before"]["reading"]["devices"][0]["aer"]["correctable"], 100);
  EXPECT_EQ(r["link_errors"]["during"]["reading"]["devices"][0]["aer"]["correctable"], 1100);
  EXPECT_EQ(r["link_errors"]["during"]["reading"]["replays"], 140);
  // A simulated device's bus ids are not this host's: lspci is not run on them.
  EXPECT_EQ(r["lspci"]["run"], false);
  EXPECT_NE(r["lspci"]["reason"].get<std::string>().find("simulated"), std::string::npos);
  EXPECT_LE(fs::file_size(w.path), kEvidenceRecordBytes);
  EXPECT_EQ(evidence.keeper.GetStats().written, 1u);
}

TEST(EvidenceKeeper, RunsLspciOnEachDeviceOfThePathWithNoShellAndBounded) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  // echo stands in for lspci: it prints the arguments it was given, as given.
  options.lspci = "/bin/echo";
  StartedKeeper evidence(options);
  const EvidenceWritten w = evidence.DegradeOnce(1, 0, /*simulated=*/false);
  ASSERT_TRUE(w.ok) << w.problem;
  const json r = RecordAt(options.dir, w.name);
  ASSERT_EQ(r["lspci"]["run"], true) << r["lspci"].dump();
  const json& devices = r["lspci"]["devices"];
  ASSERT_EQ(devices.size(), 2u) << devices.dump();
  EXPECT_EQ(devices[0]["bdf"], "0000:01:00.0");
  EXPECT_EQ(devices[0]["output"], "-vvv -s 0000:01:00.0\n");
  EXPECT_EQ(devices[1]["output"], "-vvv -s 0000:00:01.0\n");
  EXPECT_EQ(devices[0]["exit_code"], 0);

  // A program that talks without end is cut at the per-device cap.
  EvidenceOptions flood = options;
  flood.dir = dir.path() / "flood";
  const fs::path talker = dir.Write("talker", "#!/bin/sh\nwhile :; do echo \"$*\"; done\n");
  ASSERT_EQ(::chmod(talker.c_str(), 0755), 0);
  flood.lspci = talker;
  flood.lspci_bytes = 1000;
  const EvidenceWritten f = StartedKeeper(flood).DegradeOnce(1, 0, false);
  ASSERT_TRUE(f.ok) << f.problem;
  const json fr = RecordAt(flood.dir, f.name);
  EXPECT_EQ(fr["lspci"]["devices"][0]["truncated"], true);
  EXPECT_LE(fr["lspci"]["devices"][0]["output"].get<std::string>().size(), 1000u);

  // lspci not installed: said, not failed.
  EvidenceOptions none = options;
  none.dir = dir.path() / "none";
  none.lspci.reset();
  const EvidenceWritten n = StartedKeeper(none).DegradeOnce(1, 0, false);
  ASSERT_TRUE(n.ok) << n.problem;
  const json nr = RecordAt(none.dir, n.name);
  EXPECT_EQ(nr["lspci"]["run"], false);
  EXPECT_NE(nr["lspci"]["reason"].get<std::string>().find("not installed"), std::string::npos);
}

TEST(EvidenceKeeper, AHungLspciCostsTheRecordItsTimeLimitOnly) {
  fakes::TempDir dir("evidence");
  const fs::path hang = dir.Write("lspci", "#!/bin/sh\nexec sleep 60\n");
  ASSERT_EQ(::chmod(hang.c_str(), 0755), 0);
  EvidenceOptions options = InTempDir(dir);
  options.lspci = hang;
  options.lspci_timeout = 300ms;
  StartedKeeper evidence(options);
  const EvidenceWritten w = evidence.DegradeOnce(1, 0, false);
  ASSERT_TRUE(w.ok) << w.problem;
  const json r = RecordAt(options.dir, w.name);
  // The first device spends the record's time; the rest are not run.
  EXPECT_NE(r["lspci"]["devices"][0]["error"].get<std::string>().find("killed"), std::string::npos)
      << r["lspci"].dump();
  EXPECT_NE(r["lspci"]["devices"][1]["error"].get<std::string>().find("time"), std::string::npos);
}

TEST(EvidenceKeeper, AFullDiskDropsTheRecordWithItsReasonAndTheKeeperGoesOn) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  bool full = true;
  options.write = [&](const fs::path& path, std::string_view content) {
    if (full) {
      throw platform::FileError("cannot write", "evidence record", path,
                                "write: No space left on device; the previous file is kept",
                                "free space", ENOSPC);
    }
    platform::WriteFileAtomically(path, content, {});
  };
  StartedKeeper evidence(options);
  const EvidenceWritten dropped = evidence.DegradeOnce(0, 0);
  EXPECT_FALSE(dropped.ok);
  EXPECT_NE(dropped.problem.find("No space left on device"), std::string::npos) << dropped.problem;
  EXPECT_EQ(evidence.keeper.GetStats().dropped, 1u);
  EXPECT_EQ(evidence.keeper.GetStats().last_problem, dropped.problem);
  EXPECT_TRUE(EvidenceStore(options.dir).List().empty());
  full = false;
  const EvidenceWritten written = evidence.DegradeOnce(0, 100);
  EXPECT_TRUE(written.ok) << written.problem;
  EXPECT_EQ(evidence.keeper.GetStats().written, 1u);
}

TEST(EvidenceKeeper, KeepsTheNewestRecordsOnly) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  options.keep = 3;
  StartedKeeper evidence(options);
  std::vector<std::string> names;
  for (int i = 0; i < 5; ++i) names.push_back(evidence.DegradeOnce(i % 2, 100 * i).name);
  const auto kept = EvidenceStore(options.dir).List();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].name, names[4]);
  EXPECT_EQ(kept[2].name, names[2]);
  EXPECT_EQ(evidence.done.Get().back().pruned, std::vector<std::string>{names[1]});
}

TEST(EvidenceKeeper, ARecordOverItsSizeBoundLosesLspcisTextFirstThenIsDropped) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  const fs::path talker = dir.Write("talker", "#!/bin/sh\nwhile :; do echo \"$*\"; done\n");
  ASSERT_EQ(::chmod(talker.c_str(), 0755), 0);
  options.lspci = talker;
  options.max_bytes = 12 * 1024;  // the record without lspci's text fits, with it not
  StartedKeeper evidence(options);
  const EvidenceWritten w = evidence.DegradeOnce(1, 0, false);
  ASSERT_TRUE(w.ok) << w.problem;
  EXPECT_LE(fs::file_size(w.path), 12u * 1024);
  EXPECT_EQ(RecordAt(options.dir, w.name)["lspci"]["devices"][0]["output"],
            "(cut: record size bound)");

  EvidenceOptions tiny = options;
  tiny.dir = dir.path() / "tiny";
  tiny.max_bytes = 500;
  const EvidenceWritten d = StartedKeeper(tiny).DegradeOnce(1, 0, false);
  EXPECT_FALSE(d.ok);
  EXPECT_NE(d.problem.find("over its 500-byte bound"), std::string::npos) << d.problem;
}

// The probe thread never waits for the writer: past kEvidenceQueue waiting records, a new
// one is dropped and said so.
TEST(EvidenceKeeper, AWriterBehindDropsRecordsRatherThanHoldingTheProbeLoop) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  options.write = [&](const fs::path& path, std::string_view content) {
    if (first) {
      first = false;
      entered.set_value();
      released.wait();
    }
    platform::WriteFileAtomically(path, content, {});
  };
  StartedKeeper evidence(options);
  const auto degrade_now = [&](int gpu) {
    const SeenCycle c = CycleAt(gpu, 10 * gpu, 6, 3, true);
    const Incident incident = IncidentOf(c);
    evidence.keeper.Observe(c.obs, c.health, &incident);
  };
  degrade_now(0);
  entered.get_future().wait();  // the writer holds the first
  for (int gpu = 1; gpu <= static_cast<int>(kEvidenceQueue) + 1; ++gpu) degrade_now(gpu);
  // kEvidenceQueue wait; the last is dropped at once.
  auto all = evidence.done.Get();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].ok);
  EXPECT_EQ(all[0].gpu, static_cast<int>(kEvidenceQueue) + 1);
  EXPECT_NE(all[0].problem.find("the writer is behind"), std::string::npos);
  release.set_value();
  ASSERT_TRUE(evidence.keeper.WaitIdle(30s));
  EXPECT_EQ(evidence.keeper.GetStats().written, kEvidenceQueue + 1);
  EXPECT_EQ(evidence.keeper.GetStats().dropped, 1u);
}

TEST(EvidenceStore, NeverFollowsReadsUnboundedNorCountsWhatIsNotItsOwn) {
  fakes::TempDir dir("evidence");
  EvidenceOptions options = InTempDir(dir);
  options.keep = 2;
  StartedKeeper evidence(options);
  const EvidenceWritten w = evidence.DegradeOnce(0, 0);
  ASSERT_TRUE(w.ok);
  // Hostile neighbours, named as records: a link to a secret, a FIFO, a directory, a huge
  // file; and files of other names.
  const fs::path secret = dir.Write("secret", "{\"gpu\": {\"uuid\": \"stolen\"}}");
  const std::string link = EvidenceStore::RecordName(kEvidenceT0 + 1h, 0);
  fs::create_symlink(secret, options.dir / link);
  const std::string fifo = EvidenceStore::RecordName(kEvidenceT0 + 2h, 0);
  ASSERT_EQ(::mkfifo((options.dir / fifo).c_str(), 0600), 0);
  const std::string folder = EvidenceStore::RecordName(kEvidenceT0 + 3h, 0);
  fs::create_directory(options.dir / folder);
  const std::string huge = EvidenceStore::RecordName(kEvidenceT0 + 4h, 0);
  {
    std::ofstream out(options.dir / huge);
    out.seekp(64 << 20);
    out << "x";
  }
  dir.Write("evidence/notes.txt", "operator's notes");
  const EvidenceStore store(options.dir);
  // Listed: the record and the huge regular file, never the link, FIFO or directory.
  const auto list = store.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, huge);
  EXPECT_EQ(list[1].name, w.name);
  // Read: the link refused (not followed), the FIFO refused at once, the huge file from its
  // size.
  const auto cause = [&](const std::string& name) {
    try {
      store.Read(name);
    } catch (const platform::FileError& e) {
      return e.cause();
    }
    return std::string("read");
  };
  EXPECT_EQ(cause(link), "it is a symbolic link, which xferd does not follow here");
  EXPECT_EQ(cause(fifo), "it is a FIFO, not a regular file");
  EXPECT_NE(cause(huge).find("larger than"), std::string::npos) << cause(huge);
  EXPECT_EQ(cause(w.name), "read");
  // Pruning removes records only (the huge one counts: it is named as one, a regular file
  // in xferd's directory); the link, the FIFO, the directory and the notes stay.
  evidence.DegradeOnce(0, 10);
  EXPECT_TRUE(fs::exists(options.dir / "notes.txt"));
  EXPECT_TRUE(fs::is_symlink(options.dir / link));
  EXPECT_TRUE(fs::exists(secret));
  EXPECT_TRUE(fs::is_fifo(options.dir / fifo));
  EXPECT_TRUE(fs::is_directory(options.dir / folder));
  EXPECT_EQ(store.List().size(), 2u);
}

TEST(EvidenceStore, AnEvidenceDirectoryThatIsALinkIsNeverWrittenThrough) {
  fakes::TempDir dir("evidence");
  fs::create_directories(dir.path() / "elsewhere");
  fs::create_directory_symlink(dir.path() / "elsewhere", dir.path() / "evidence");
  EvidenceOptions options = InTempDir(dir);
  StartedKeeper evidence(options);
  const EvidenceWritten w = evidence.DegradeOnce();
  EXPECT_FALSE(w.ok);
  EXPECT_NE(w.problem.find("symbolic link"), std::string::npos) << w.problem;
  EXPECT_TRUE(fs::is_empty(dir.path() / "elsewhere"));
}

// A crash while writing leaves the temporary file of the write (never a half record under a
// record's name); the next start removes it, and only what is provably an abandoned write's.
TEST(EvidenceStore, WhatACrashLeftIsRemovedAtStartAndOnlyThat) {
  fakes::TempDir dir("evidence");
  const fs::path evidence = dir.path() / "evidence";
  fs::create_directories(evidence);
  const std::string record = EvidenceStore::RecordName(kEvidenceT0, 0);
  const fs::path abandoned = dir.Write("evidence/." + record + ".tmp.a1B2c3", "{\"half");
  const fs::path held = dir.Write("evidence/." + record + ".tmp.zzzzzz", "{\"writing");
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // a live writer's
  const fs::path other = dir.Write("evidence/.notes.txt.tmp.a1B2c3", "not ours");
  EXPECT_EQ(StartedKeeper(InTempDir(dir)).removed_at_start, 1u);
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(fs::exists(held));
  EXPECT_TRUE(fs::exists(other));
  ::close(fd);
}

}  // namespace
}  // namespace xferd::core
