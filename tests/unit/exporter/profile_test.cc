// The metrics profiles (exporter/profile.h) and the family table (exporter/families.h):
// what the fleet profile keeps of each family, against what the full profile exports of the
// same cycles; the dcgm-exporter labels of xferd_gpu_info.
#include "exporter/profile.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "exporter/families.h"
#include "exporter/metrics.h"
#include "unit/exporter/recorded_host.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::exporter {
namespace {

using probes::TransferMode;
using Profile = core::Settings::MetricsProfile;

// Sample lines (not comments) of the exposition that start with `prefix`.
std::vector<std::string> Lines(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#' && line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

double Value(const std::string& line) {
  return std::stod(line.substr(line.rfind(' ') + 1));
}

// The exposed value of the one series starting with `series` (a name and its labels as
// the exposition writes them, sorted); NaN when there is none.
double ProfileValueOf(const std::string& text, const std::string& series) {
  const auto lines = Lines(text, series + " ");
  return lines.size() == 1 ? Value(lines[0]) : std::nan("");
}

using recording::Render;

// A host of simulated GPUs whose cycles are recorded as the service records them, with the
// registry's two views: full (the registry itself) and what Metrics::Exposition() serves.
class Host {
 public:
  explicit Host(probes::SimOptions options, core::Settings settings = {})
      : recorded_(Fast(std::move(options)), std::move(settings), metrics_) {}

  void Cycle() { recorded_.Cycle(); }

  void Switch(Profile profile) {
    core::Settings settings = recorded_.settings();
    settings.metrics_profile = profile;
    recorded_.Reload(settings);
  }

  std::string Full() const { return Render(registry_); }
  std::string Served() const { return Render(*metrics_.Exposition()); }
  Metrics& metrics() { return metrics_; }

 private:
  static probes::SimOptions Fast(probes::SimOptions o) {
    o.time_scale = 0;
    return o;
  }

  prometheus::Registry registry_;
  Metrics metrics_{registry_, "node-a"};
  recording::RecordedHost recorded_;
};

probes::SimFault Fault(probes::SimFault::Kind kind, int device) {
  probes::SimFault fault;
  fault.kind = kind;
  fault.device = device;
  return fault;
}

// Two simulated GPUs with `faults`.
probes::SimOptions TwoGpus(std::vector<probes::SimFault> faults) {
  probes::SimOptions options;
  options.devices = 2;
  options.faults = std::move(faults);
  return options;
}

core::Settings FleetSettings() {
  core::Settings settings;
  settings.metrics_profile = Profile::kFleet;
  settings.consecutive_bad = 1;
  return settings;
}

TEST(FamilyTable, NamesEveryFamilyOnceAndNothingIsRegisteredOutsideIt) {
  std::set<std::string_view> names;
  for (const FamilySpec& spec : FamilyTable()) {
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
    EXPECT_EQ(spec.name.rfind("xferd_", 0), 0u) << spec.name;
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    EXPECT_EQ(FindFamily(spec.name), &spec);
    if (spec.fleet.kind == FleetRule::Kind::kFold) EXPECT_FALSE(spec.fleet.label.empty());
  }
  // Every family the exporter writes (a host of cycles and groups) is a row of the table.
  Host host(recording::SimHost());
  host.Cycle();
  host.metrics().SetBuildInfo();
  std::istringstream text(host.Full());
  std::size_t families = 0;
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    EXPECT_NE(FindFamily(name), nullptr) << name << " is not in the family table";
    ++families;
  }
  EXPECT_GT(families, 20u);
}

TEST(FleetProfile, KeepsTheHeadlinePairsAndDropsTheSingleHostDetail) {
  // GPUs behind a switch below a root port: every family.
  Host host(recording::SimHost(), FleetSettings());
  for (int i = 0; i < 2; ++i) host.Cycle();
  const std::string full = host.Full(), fleet = host.Served();
  // The headline pairs: their bandwidth, baseline (none yet, as in full), verdict.
  EXPECT_EQ(Lines(fleet, "xferd_bandwidth_bytes_per_second{").size(), 2u * 8) << fleet;
  EXPECT_EQ(Lines(fleet, "xferd_bandwidth_degraded{").size(), 2u * 8) << fleet;
  for (const std::string& line : Lines(fleet, "xferd_bandwidth_bytes_per_second{")) {
    EXPECT_NE(line.find("mode=\"pinned\""), std::string::npos) << line;
    EXPECT_EQ(line.find("direction=\"bidir\""), std::string::npos) << line;
    // The same value as in the full profile.
    EXPECT_EQ(Lines(full, line).size(), 1u) << line;
  }
  // The GPU's band; no histograms, no mode's other gauges, no single-host detail.
  EXPECT_EQ(Lines(fleet, "xferd_expected_bandwidth_bytes_per_second{").size(), 2u * 8) << fleet;
  for (const char* gone : {"xferd_transfer_duration_seconds", "xferd_overlap_ratio",
                           "xferd_foreign_traffic_bytes_per_second", "xferd_gpu_load_readable",
                           "xferd_pcie_aer_rootport_errors_total", "mode=\"pageable\""}) {
    EXPECT_TRUE(Lines(fleet, gone).empty() && fleet.find(gone) == std::string::npos) << gone;
    EXPECT_NE(full.find(gone), std::string::npos) << gone;
  }
  // Everything a fleet reads per GPU is there.
  for (const char* kept :
       {"xferd_diagnosis{", "xferd_pcie_link_generation{", "xferd_pcie_link_width{",
        "xferd_device_info{", "xferd_gpu_info{", "xferd_host_link_info{",
        "xferd_probe_device_seconds_total{", "xferd_pcie_replays_total{", "xferd_cycles_total{"}) {
    EXPECT_EQ(Lines(fleet, kept).size(), Lines(full, kept).size()) << kept;
  }
}

TEST(FleetProfile, ADegradedPairShowsItsGaugesVerdictAndOwnBandUntilItRecovers) {
  // Pinned bandwidth x0.3: every link-bound pair of GPU 1 falls below its band.
  probes::SimFault degrade = Fault(probes::SimFault::Kind::kDegrade, 1);
  degrade.factor = 0.3;
  Host host(TwoGpus({degrade}), FleetSettings());
  host.Cycle();
  const std::string fleet = host.Served();
  // GPU 0 is healthy: its headline pairs only.
  EXPECT_EQ(Lines(fleet, "xferd_bandwidth_degraded{direction=\"h2d\",gpu=\"0\"").size(), 1u);
  EXPECT_EQ(ProfileValueOf(fleet,
                           "xferd_bandwidth_degraded{direction=\"h2d\",gpu=\"0\",mode=\"pinned\"}"),
            0);
  // GPU 1: the degraded pairs, each with its bandwidth and verdict 1.
  const auto verdicts = Lines(fleet, "xferd_bandwidth_degraded{");
  std::size_t gpu1 = 0;
  for (const std::string& v : verdicts) {
    if (v.find("gpu=\"1\"") == std::string::npos) continue;
    ++gpu1;
    const bool headline =
        v.find("mode=\"pinned\"") != std::string::npos && v.find("bidir") == std::string::npos;
    if (!headline) EXPECT_EQ(Value(v), 1) << v;
  }
  EXPECT_GT(gpu1, 2u) << fleet;
  EXPECT_EQ(ProfileValueOf(fleet,
                           "xferd_bandwidth_bytes_per_second{direction=\"h2d\",gpu=\"1\","
                           "mode=\"pinned_async\",size=\"64MiB\"}"),
            ProfileValueOf(host.Full(),
                           "xferd_bandwidth_bytes_per_second{direction=\"h2d\",gpu=\"1\","
                           "mode=\"pinned_async\",size=\"64MiB\"}"));
  // managed_prefetch h2d is held to its own share of the band: its own band comes with it.
  EXPECT_EQ(Lines(fleet,
                  "xferd_expected_bandwidth_bytes_per_second{bound=\"lower\",direction=\"h2d\","
                  "gpu=\"1\",mode=\"managed_prefetch\"}")
                .size(),
            1u)
      << fleet;
  EXPECT_TRUE(Lines(fleet,
                    "xferd_expected_bandwidth_bytes_per_second{bound=\"lower\","
                    "direction=\"h2d\",gpu=\"0\",mode=\"managed_prefetch\"}")
                  .empty());
}

TEST(FleetProfile, RunCountersAreSummedOverModesAndLinkErrorsOverThePath) {
  probes::SimFault failing = Fault(probes::SimFault::Kind::kErrorEvery, 0);
  failing.every = 3;
  probes::SimFault errors = Fault(probes::SimFault::Kind::kLinkErrors, 0);
  errors.rate = 1000;
  errors.hop = 1;
  Host host(TwoGpus({failing, errors}), FleetSettings());
  for (int i = 0; i < 3; ++i) host.Cycle();
  host.metrics().RecordSkipped(0, TransferMode::kManaged, ProbeResult::kUnsupported);
  const std::string full = host.Full(), fleet = host.Served();
  std::map<std::string, double> summed;  // result -> sum over modes, GPU 0
  for (const std::string& line : Lines(full, "xferd_probe_runs_total{gpu=\"0\"")) {
    const auto at = line.find("result=\"") + 8;
    summed[line.substr(at, line.find('"', at) - at)] += Value(line);
  }
  ASSERT_EQ(summed.size(), 6u);  // ok, error, timeout, skipped_busy, contended, unsupported
  for (const auto& [result, sum] : summed) {
    EXPECT_EQ(ProfileValueOf(fleet, "xferd_probe_runs_total{gpu=\"0\",result=\"" + result + "\"}"),
              sum)
        << result;
  }
  EXPECT_GT(summed["error"], 0);
  // The newest success of any mode.
  double newest = 0;
  for (const std::string& line :
       Lines(full, "xferd_probe_last_success_timestamp_seconds{gpu=\"0\""))
    newest = std::max(newest, Value(line));
  EXPECT_EQ(ProfileValueOf(fleet, "xferd_probe_last_success_timestamp_seconds{gpu=\"0\"}"), newest);
  // AER: one series per class, the sum over the devices of the path; readable per source,
  // 1 only when every device is.
  EXPECT_GT(ProfileValueOf(fleet, "xferd_pcie_aer_errors_total{class=\"correctable\",gpu=\"0\"}"),
            0)
      << full;
  for (const char* cls : {"correctable", "nonfatal", "fatal"}) {
    double sum = 0;
    for (const std::string& line :
         Lines(full, std::string("xferd_pcie_aer_errors_total{class=\"") + cls + "\"")) {
      if (line.find("gpu=\"0\"") != std::string::npos) sum += Value(line);
    }
    EXPECT_EQ(ProfileValueOf(fleet, std::string("xferd_pcie_aer_errors_total{class=\"") + cls +
                                        "\",gpu=\"0\"}"),
              sum)
        << cls << "\n"
        << fleet;
  }
  EXPECT_EQ(ProfileValueOf(fleet, "xferd_pcie_error_source_readable{gpu=\"0\",source=\"aer\"}"), 1);
  EXPECT_EQ(
      ProfileValueOf(fleet, "xferd_pcie_error_source_readable{gpu=\"0\",source=\"nvml_replay\"}"),
      1);
  // A folded family says so in its help.
  EXPECT_NE(fleet.find("# HELP xferd_probe_runs_total Probes by result (bidirectional pinned "
                       "probes count under mode=\"pinned\"). Fleet profile: the sum over mode."),
            std::string::npos)
      << fleet;
}

TEST(FleetProfile, AReloadSwitchesTheProfileAndTheServedTextWithIt) {
  Host host({});
  host.Cycle();
  const std::uint64_t before = host.metrics().Generation();
  EXPECT_EQ(host.Served(), host.Full());
  host.Switch(Profile::kFleet);
  EXPECT_GT(host.metrics().Generation(), before);  // the cached text is rendered again
  EXPECT_TRUE(Lines(host.Served(), "xferd_transfer_duration_seconds").empty());
  host.Switch(Profile::kFull);
  EXPECT_EQ(host.Served(), host.Full());
  EXPECT_FALSE(Lines(host.Served(), "xferd_transfer_duration_seconds").empty());
}

TEST(FleetProfile, TheHeadlineFollowsThePlan) {
  core::Settings pageable;
  pageable.modes = {TransferMode::kPageable, TransferMode::kManaged};
  EXPECT_EQ(HeadlinePairs(pageable),
            (std::set<PairLabels>{{"pageable", "h2d"}, {"pageable", "d2h"}}));
  EXPECT_EQ(HeadlinePairs(core::Settings{}),
            (std::set<PairLabels>{{"pinned", "h2d"}, {"pinned", "d2h"}}));
}

TEST(GpuInfo, CarriesDcgmExporterLabelsAndValueFormats) {
  EXPECT_EQ(DcgmBusId("0000:3b:00.0"), "00000000:3B:00.0");
  EXPECT_EQ(DcgmBusId("0001:c1:00.0"), "00000001:C1:00.0");
  EXPECT_EQ(DcgmBusId(""), "");
  prometheus::Registry registry;
  Metrics metrics(registry, "node-a");
  probes::DeviceInfo gpu;
  gpu.index = 2;
  gpu.uuid = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52";
  gpu.name = "NVIDIA H200";
  gpu.pci_bus_id = "0000:ab:00.0";
  gpu.minor = 5;
  metrics.SetDevice(gpu);
  const auto info = Lines(Render(registry), "xferd_gpu_info{");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0],
            "xferd_gpu_info{Hostname=\"node-a\",UUID=\"GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52\","
            "device=\"nvidia5\",gpu=\"2\",hostname=\"node-a\",modelName=\"NVIDIA H200\","
            "pci_bus_id=\"00000000:AB:00.0\"} 1");
}

}  // namespace
}  // namespace xferd::exporter
