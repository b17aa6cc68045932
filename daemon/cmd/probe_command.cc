// `xferd probe`: every planned probe once on every selected GPU, as a table or JSON. The
// GPUs, the probes and the band come from core (plan.h, band.h), and each probe is run and
// judged by core's ProbeRunner (probe_runner.h), as for `xferd run`; what is its own is
// choosing to run each probe once and printing the results.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cmd/backend.h"
#include "cmd/band_output.h"
#include "cmd/commands.h"
#include "cmd/probe_concurrent.h"
#include "config/config.h"
#include "core/band.h"
#include "core/busy_detector.h"
#include "core/contention.h"
#include "core/fault_codes.h"
#include "core/health_tracker.h"
#include "core/link_errors.h"
#include "core/plan.h"
#include "core/probe_runner.h"
#include "platform/exit_codes.h"
#include "xferd/probes/stats.h"
#include "xferd/probes/topology.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::core;
namespace {

using probes::Direction;
using probes::ProbeSample;
using probes::ProbeSpec;
using probes::ProbeStatus;
using probes::TransferMode;

struct Row {
  ProbeSample sample;
  std::optional<double> percent_of_link;
  std::string verdict;
  bool bad = false;
};

struct DeviceReport {
  probes::DeviceInfo info;
  probes::LinkPath path;
  core::ExpectedBand band;
  std::vector<Row> rows;
  std::vector<Diagnosis> diagnoses;   // likely causes of what the rows show; usually none
  LinkErrorReading link_errors;       // the path's error counters after the probes
  LinkErrorGrowth link_errors_grown;  // and what they grew by while the probes ran
  double foreign_traffic_threshold_bytes_per_s = 0;  // ForeignTrafficLimit on its path
};

// The link's error counters around the probes of one GPU: read before and after them, and
// judged as the daemon judges a cycle's.
struct LinkErrorWatch {
  probes::LinkErrorReader& reader;
  LinkErrorTracker tracker;
};

Row Judge(ProbeSample sample, const probes::LinkPath& path, const core::ExpectedBand& band) {
  Row row;
  if (sample.status == ProbeStatus::kOk) {
    if (const double rate = HostLinkRate(path); rate > 0) {
      row.percent_of_link =
          100.0 * PerDirection(sample.spec.direction, sample.MedianBandwidth()) / rate;
    }
  }
  const SampleVerdict verdict = JudgeSample(sample, band);
  row.verdict = verdict.text;
  row.bad = verdict.bad;
  row.sample = std::move(sample);
  return row;
}

DeviceReport ProbeDevice(ProbeRunner& runner, probes::TransferBackend& backend,
                         const probes::DeviceInfo& info, const std::vector<ProbeSpec>& plan,
                         const Config& config, BusyDetector& load, LinkErrorWatch& errors) {
  DeviceReport report;
  report.info = info;
  const auto now = [] { return std::chrono::steady_clock::now(); };
  errors.tracker.Observe(info, errors.reader.Read(info, backend.ReadLinkPath(info.index)), now());
  const probes::Capabilities caps = backend.GetCapabilities(info.index);
  bool link_read = false;
  std::vector<ProbeSample> samples;
  for (const ProbeSpec& spec : plan) {
    if (std::string why = caps.Reason(spec.mode, spec.direction); !why.empty()) {
      ProbeSample skipped;
      skipped.spec = spec;
      skipped.status = ProbeStatus::kUnsupported;
      skipped.message = std::move(why);
      samples.push_back(std::move(skipped));
      continue;
    }
    // The path is read during the first link-bound probe, while the link carries traffic;
    // the link's traffic around each probe is judged for contention, as the daemon does.
    std::optional<Measured> m =
        runner.Run(info, spec, &load, config,
                   !link_read && probes::IsLinkBound(spec.mode, spec.direction), {});
    if (m->link) {
      report.path = std::move(*m->link);
      link_read = true;
    }
    samples.push_back(std::move(m->sample));
  }
  if (!link_read) report.path = backend.ReadLinkPath(info.index);
  report.band = ResolveBand(config, info, report.path);
  // The foreign traffic that makes a probe on this path contended (besides the counters'
  // noise on the probe's own bytes).
  report.foreign_traffic_threshold_bytes_per_s =
      ForeignTrafficLimit(ContentionThresholdsOf(config, HostLinkRate(report.path)), 0);
  report.link_errors = errors.tracker.Observe(info, errors.reader.Read(info, report.path), now());
  report.link_errors_grown = errors.tracker.Growth(info.uuid);
  // Judged as the daemon judges one cycle (no history, so no baseline cause).
  CycleObservation observation{info, report.path, samples};
  observation.link_errors = report.link_errors_grown;
  report.diagnoses = DiagnoseOnce(config, observation);
  for (ProbeSample& sample : samples) {
    report.rows.push_back(Judge(std::move(sample), report.path, report.band));
  }
  return report;
}

std::string Latency(double seconds) {
  char text[32];
  if (seconds < 1e-3) {
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  } else if (seconds < 1.0) {
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  }
  return text;
}

std::string DescribeLink(const probes::LinkPath& path) {
  if (path.c2c) {
    // Grace Hopper: sysfs shows a PCIe function, but host copies go over NVLink-C2C.
    return "NVLink-C2C, " + Gbps(probes::kC2cBytesPerSecond) +
           " GB/s per direction (not the PCIe link sysfs shows)";
  }
  if (!path.pcie) return "none (" + path.note + ")";
  if (path.links.empty()) return "unknown (" + path.note + ")";
  const probes::PcieLink& own = path.links.front();
  std::string text = probes::FormatLink(own.current_gen, own.current_width);
  if (own.Downtrained()) {
    text += " DOWNTRAINED from " + probes::FormatLink(own.LinkMaxGen(), own.LinkMaxWidth());
  } else if (own.CappedByOtherEnd()) {
    text += " (the GPU can do " + probes::FormatLink(own.max_gen, own.max_width) + ")";
  }
  if (const probes::PcieLink* narrowest = path.Narrowest()) {
    text += " (narrowest: " + probes::FormatLink(narrowest->current_gen, narrowest->current_width) +
            " at " + narrowest->bdf + ", " + Gbps(narrowest->CurrentBytesPerSecond()) +
            " GB/s per direction)";
  }
  return text;
}

void PrintTable(const std::vector<DeviceReport>& reports) {
  for (const DeviceReport& r : reports) {
    std::printf("GPU %d: %s  %s%s%s\n", r.info.index, r.info.name.c_str(),
                r.info.pci_bus_id.empty() ? "(no PCI bus id)" : r.info.pci_bus_id.c_str(),
                r.info.integrated ? "  integrated" : "", r.info.simulated ? "  SIMULATED" : "");
    std::printf("  uuid %s, driver %s\n", r.info.uuid.c_str(), r.info.driver_version.c_str());
    std::printf("  link: %s\n", DescribeLink(r.path).c_str());
    if (!r.path.links.empty() && r.path.links.front().Downtrained()) {
      // Below what both ends can do: the card, riser or slot trained it down.
      const probes::PcieLink& own = r.path.links.front();
      std::printf(
          "  WARNING: the GPU's link runs at %s, below the %s both its ends can do: check "
          "the slot, riser and seating (the band follows what the link can do, so its copies "
          "read below it)\n",
          probes::FormatLink(own.current_gen, own.current_width).c_str(),
          probes::FormatLink(own.LinkMaxGen(), own.LinkMaxWidth()).c_str());
    }
    std::printf("  numa node: %s, iommu: %s\n",
                r.path.numa_node >= 0 ? std::to_string(r.path.numa_node).c_str() : "unknown",
                r.path.iommu_type.empty() ? "off" : r.path.iommu_type.c_str());
    std::printf("  shape: %s\n", ShapeText(r.info).c_str());
    if (std::string why = probes::UnjudgeableReason(r.info.cc, r.info.mig); !why.empty()) {
      std::printf("  verdict unknown: %s\n", why.c_str());
    }
    std::printf("  expected band: %s\n", BandText(r.band).c_str());
    std::printf("  link errors: %s\n", DescribeLinkErrors(r.link_errors).c_str());
    if (!r.path.note.empty() && r.path.pcie) std::printf("  note: %s\n", r.path.note.c_str());
    std::printf("\n  %-16s %-5s %-7s %8s %10s %10s %10s %7s  %s\n", "mode", "dir", "size", "GB/s",
                "p50", "p99", "p99.9", "% link", "verdict");
    for (const Row& row : r.rows) {
      const ProbeSample& s = row.sample;
      std::string gbps = "-", p50 = "-", p99 = "-", p999 = "-", pct = "-";
      if (s.status == ProbeStatus::kOk) {
        gbps = Gbps(s.MedianBandwidth());
        p50 = Latency(probes::Quantile(s.durations_s, 0.5));
        p99 = Latency(probes::Quantile(s.durations_s, 0.99));
        p999 = Latency(probes::Quantile(s.durations_s, 0.999));
      }
      if (row.percent_of_link) {
        char text[16];
        std::snprintf(text, sizeof text, "%.0f%%", *row.percent_of_link);
        pct = text;
      }
      std::printf("  %-16s %-5s %-7s %8s %10s %10s %10s %7s  %s\n",
                  std::string(probes::ToString(s.spec.mode)).c_str(),
                  std::string(probes::ToString(s.spec.direction)).c_str(),
                  probes::FormatSize(s.spec.size_bytes).c_str(), gbps.c_str(), p50.c_str(),
                  p99.c_str(), p999.c_str(), pct.c_str(), row.verdict.c_str());
    }
    if (!r.diagnoses.empty()) {
      std::printf("\n  likely causes:\n");
      for (const Diagnosis& d : r.diagnoses) {
        std::printf("    %s %s: %s\n      %s\n", FaultToken(FaultOf(d.cause)).c_str(),
                    std::string(ToString(d.cause)).c_str(), d.detail.c_str(), d.advice.c_str());
      }
    }
    std::printf("\n");
  }
}

nlohmann::json LinkJson(const probes::PcieLink& link) {
  return {{"bdf", link.bdf},
          {"current_gen", link.current_gen},
          {"current_width", link.current_width},
          {"max_gen", link.max_gen},
          {"max_width", link.max_width},
          {"other_end_bdf", link.other_end_bdf},
          {"other_end_max_gen", link.other_end_max_gen},
          {"other_end_max_width", link.other_end_max_width},
          {"link_max_gen", link.LinkMaxGen()},
          {"link_max_width", link.LinkMaxWidth()},
          {"current_bytes_per_s", link.CurrentBytesPerSecond()},
          {"max_bytes_per_s", link.MaxBytesPerSecond()},
          {"downtrained", link.Downtrained()},
          {"capped_by_other_end", link.CappedByOtherEnd()}};
}

// Every link-error source of the GPU's path: what was read after the probes (null: not
// readable, with the reason) and what grew while they ran.
nlohmann::json LinkErrorsJson(const DeviceReport& r) {
  const auto count = [](const std::optional<std::uint64_t>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  const auto counts = [&](const probes::AerCounts& c) {
    nlohmann::json out;
    for (probes::AerClass k : probes::kAllAerClasses) {
      out[std::string(probes::ToString(k))] = count(c[static_cast<std::size_t>(k)]);
    }
    return out;
  };
  nlohmann::json aer = nlohmann::json::array();
  for (const LinkErrorDevice& d : r.link_errors.aer) {
    nlohmann::json grew, kinds = nlohmann::json::array();
    for (probes::AerClass k : probes::kAllAerClasses) {
      grew[std::string(probes::ToString(k))] = d.grown[static_cast<std::size_t>(k)];
    }
    for (const probes::AerKind& kind : d.read.kinds) {
      if (kind.count == 0) continue;  // the kinds that happened, not the kernel's whole list
      kinds.push_back({{"class", probes::ToString(kind.aer_class)},
                       {"name", kind.name},
                       {"count", kind.count}});
    }
    aer.push_back(
        {{"device", d.read.bdf},
         {"root_port", d.read.root_port},
         {"readable", d.readable},
         {"problem", d.problem},
         {"counts", counts(d.read.device)},
         {"rootport_counts", d.read.root_port ? counts(d.read.rootport) : nlohmann::json()},
         {"kinds", kinds},
         {"grew", grew}});
  }
  const LinkErrorGrowth& g = r.link_errors_grown;
  return {{"replays",
           {{"readable", r.link_errors.replays_readable},
            {"value", count(r.link_errors.replays)},
            {"problem", r.link_errors.replays_problem},
            {"grew", r.link_errors.replays_grown}}},
          {"aer", aer},
          {"window_s", g.window_s},
          {"significant", g.Significant()}};
}

// What the link carried around the probe (the raw NVML figures) and what was made of it.
nlohmann::json ContentionJson(const ProbeSample& s) {
  const auto [own_h2d, own_d2h] = s.OwnLinkBytes();
  nlohmann::json traffic;
  if (s.traffic) {
    const probes::LinkTraffic& t = *s.traffic;
    traffic = {{"source", t.source},
               {"window_s", t.window_s},
               {"rx_bytes", t.rx_bytes},
               {"tx_bytes", t.tx_bytes},
               {"samples", t.samples},
               {"after_s", t.after_s},
               {"after_rx_bytes", t.after_rx_bytes},
               {"after_tx_bytes", t.after_tx_bytes},
               {"after_utilization_percent", t.after_utilization_percent
                                                 ? nlohmann::json(*t.after_utilization_percent)
                                                 : nlohmann::json()}};
  }
  return {{"state", probes::ToString(s.contention.state)},
          {"contended", s.Contended()},
          {"foreign_h2d_bytes_per_s", s.contention.foreign_h2d_bytes_per_s},
          {"foreign_d2h_bytes_per_s", s.contention.foreign_d2h_bytes_per_s},
          {"reason", s.contention.reason},
          {"own_h2d_bytes", own_h2d},
          {"own_d2h_bytes", own_d2h},
          {"compute_only_s", s.compute_only_s},
          {"link_traffic", traffic}};
}

void PrintJson(const std::string& backend, const std::vector<DeviceReport>& reports) {
  nlohmann::json devices = nlohmann::json::array();
  nlohmann::json results = nlohmann::json::array();
  for (const DeviceReport& r : reports) {
    nlohmann::json links = nlohmann::json::array();
    for (const auto& link : r.path.links) links.push_back(LinkJson(link));
    const probes::PcieLink* narrowest = r.path.Narrowest();
    nlohmann::json diagnoses = nlohmann::json::array();
    for (const Diagnosis& d : r.diagnoses) {
      const FaultCode& fault = FaultOf(d.cause);
      diagnoses.push_back({{"cause", ToString(d.cause)},
                           {"code", fault.Code()},
                           {"action", ToString(fault.action)},
                           {"detail", d.detail},
                           {"advice", d.advice}});
    }
    devices.push_back(
        {{"index", r.info.index},
         {"uuid", r.info.uuid},
         {"name", r.info.name},
         {"pci_bus_id", r.info.pci_bus_id},
         {"driver_version", r.info.driver_version},
         {"compute_capability",
          std::to_string(r.info.cc_major) + "." + std::to_string(r.info.cc_minor)},
         {"memory_bytes", r.info.memory_bytes},
         {"integrated", r.info.integrated},
         {"simulated", r.info.simulated},
         {"link_path",
          {{"pcie", r.path.pcie},
           {"links", links},
           {"narrowest", narrowest != nullptr ? LinkJson(*narrowest) : nlohmann::json()},
           {"numa_node", r.path.numa_node},
           {"iommu_type", r.path.iommu_type},
           {"note", r.path.note}}},
         {"shape", ShapeJson(r.info)},
         {"unjudgeable", probes::UnjudgeableReason(r.info.cc, r.info.mig)},
         {"expected_band", BandJson(r.band)},
         {"foreign_traffic_threshold_bytes_per_s", r.foreign_traffic_threshold_bytes_per_s},
         {"link_errors", LinkErrorsJson(r)},
         {"diagnoses", diagnoses}});
    for (const Row& row : r.rows) {
      const ProbeSample& s = row.sample;
      const bool ok = s.status == ProbeStatus::kOk;
      results.push_back(
          {{"gpu", r.info.index},
           {"uuid", r.info.uuid},
           {"mode", probes::ToString(s.spec.mode)},
           {"direction", probes::ToString(s.spec.direction)},
           {"size_bytes", s.spec.size_bytes},
           {"status", probes::ToString(s.status)},
           {"message", s.message},
           {"median_bytes_per_s", s.MedianBandwidth()},
           {"p50_s", ok ? probes::Quantile(s.durations_s, 0.5) : 0.0},
           {"p99_s", ok ? probes::Quantile(s.durations_s, 0.99) : 0.0},
           {"p999_s", ok ? probes::Quantile(s.durations_s, 0.999) : 0.0},
           {"samples", s.durations_s.size()},
           // Each timed transfer in the order it ran: a trend over them shows a warm-up.
           {"durations_s", s.durations_s},
           {"mig_instance", s.instance
                                ? nlohmann::json{{"gpu_instance_id", s.instance->gpu_instance_id},
                                                 {"profile", s.instance->profile}}
                                : nlohmann::json()},
           {"bytes_per_transfer", s.bytes_per_transfer},
           {"device_time_s", s.device_time_s},
           {"host_numa_node", s.host_numa_node},
           {"overlap_ratio", s.overlap_ratio ? nlohmann::json(*s.overlap_ratio) : nlohmann::json()},
           {"percent_of_link",
            row.percent_of_link ? nlohmann::json(*row.percent_of_link) : nlohmann::json()},
           {"contention", ContentionJson(s)},
           {"band", ModeHoldJson(r.band, s.spec.mode, s.spec.direction, s.spec.size_bytes)},
           {"verdict", row.verdict}});
    }
  }
  const bool simulated = std::any_of(reports.begin(), reports.end(),
                                     [](const DeviceReport& r) { return r.info.simulated; });
  nlohmann::json doc{
      {"backend", backend}, {"simulated", simulated}, {"devices", devices}, {"results", results}};
  std::printf("%s\n", doc.dump(2).c_str());
}

constexpr const char* kNoDeviceHint =
    "no NVIDIA driver/GPU found; run `xferd probe --simulate` to try the simulated device";

}  // namespace

int RunProbeCommand(const ProbeCommandOptions& options) {
  const Config config = ConfigWithFlags(options.flags);
  if (PlanProbes(config).empty()) throw UsageError("no probe selected (check --mode)");

  const Backend made = MakeBackend(config, "probe", options.flags.sysfs_root.value_or("/sys"));
  probes::TransferBackend& backend = *made.backend;
  const std::vector<probes::DeviceInfo> all = backend.Devices();
  if (all.empty()) throw probes::NoDeviceError(kNoDeviceHint);
  std::vector<probes::DeviceInfo> selected;
  if (options.gpus.empty()) {
    selected = SelectConfigured(all, config);
  } else {
    try {
      selected = SelectDevices(all, options.gpus);
    } catch (const UnknownGpuError& e) {
      throw UsageError("no GPU \"" + e.gpu() +
                       "\" for --gpu; give an index or a UUID of one of: " + e.known());
    }
  }

  if (options.concurrent) return RunConcurrentProbes(backend, selected, config, options.json);

  // No pre-cycle busy check here (a one-shot run probes when told to); the link is still
  // read around each probe, so a contended result says so instead of reading low.
  Config windows_only = config;
  windows_only.busy_detection = false;
  const std::unique_ptr<BusyDetector> load = MakeBusyDetector(windows_only, made.sim);
  const std::unique_ptr<probes::LinkErrorReader> reader =
      MakeLinkErrorReader(config, made.sim, options.flags.sysfs_root.value_or("/sys"));
  LinkErrorWatch errors{*reader, {}};
  SteadyClock clock;
  ProbeRunner runner(backend, clock, HangWatch::kCancel);
  std::vector<DeviceReport> reports;
  for (const auto& info : selected) {
    // The daemon's plan for this GPU: sizes follow its link (core::PlannedSize).
    const std::vector<ProbeSpec> plan = PlanProbes(config, Deadlines::kStretchedToSize,
                                                   HostLinkRate(backend.ReadLinkPath(info.index)));
    reports.push_back(ProbeDevice(runner, backend, info, plan, config, *load, errors));
  }
  if (options.json) {
    PrintJson(backend.Name(), reports);
  } else {
    PrintTable(reports);
  }
  std::fflush(stdout);

  int bad = 0;
  for (const DeviceReport& r : reports) {
    bad += static_cast<int>(
        std::count_if(r.rows.begin(), r.rows.end(), [](const Row& row) { return row.bad; }));
  }
  if (bad > 0 && !options.json) {
    std::fprintf(stderr, "xferd probe: %d result(s) below the expected band or failed\n", bad);
  }
  return bad > 0 ? kExitFailure : kExitOk;
}

}  // namespace xferd::cmd
