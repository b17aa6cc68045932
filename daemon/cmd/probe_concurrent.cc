#include "cmd/probe_concurrent.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cmd/band_output.h"
#include "core/band.h"
#include "core/fault_codes.h"
#include "core/host_groups.h"
#include "core/probe_runner.h"

namespace xferd::cmd {
namespace {

using probes::Direction;
using probes::ProbeSample;
using probes::ProbeStatus;

struct RunReport {
  core::GroupRun run;
  core::AggregateVerdict verdict;  // of the aggregate against the group's band
};

struct GroupReport {
  core::HostGroup group;
  core::ExpectedBand band;
  std::vector<RunReport> runs;
};

double SoloSum(const core::GroupRun& run) {
  double sum = 0;
  for (double s : run.solo_bytes_per_s) sum += s;
  return sum;
}

void PrintTable(const std::vector<probes::DeviceInfo>& devices,
                const std::vector<probes::LinkPath>& paths, const std::vector<GroupReport>& groups,
                const std::map<int, std::vector<core::Diagnosis>>& causes,
                const probes::ProbeSpec& spec) {
  std::printf(
      "concurrent probes: pinned %s, %d timed transfers each; every GPU of a group at "
      "once, after each alone\n\n",
      probes::FormatSize(spec.size_bytes).c_str(), spec.iterations);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const probes::DeviceInfo& d = devices[i];
    const probes::PcieLink* narrowest = paths[i].Narrowest();
    std::printf("GPU %d: %s  %s%s  numa node %s, link %s, narrowest %s\n", d.index, d.name.c_str(),
                d.pci_bus_id.empty() ? "(no PCI bus id)" : d.pci_bus_id.c_str(),
                d.simulated ? "  SIMULATED" : "",
                paths[i].numa_node >= 0 ? std::to_string(paths[i].numa_node).c_str() : "unknown",
                std::string(probes::ToString(probes::HostLinkOf(d))).c_str(),
                paths[i].c2c ? "NVLink-C2C"
                : narrowest != nullptr
                    ? (probes::FormatLink(narrowest->current_gen, narrowest->current_width) +
                       " at " + narrowest->bdf)
                          .c_str()
                    : "unknown");
  }
  for (const GroupReport& g : groups) {
    std::printf("\ngroup %s: GPUs %s, shared link %s\n", g.group.name.c_str(),
                g.group.GpuList().c_str(),
                g.group.shared_link.empty() ? "none" : g.group.shared_link.c_str());
    std::printf("  expected aggregate: %s\n", BandText(g.band).c_str());
    std::printf("  %-5s %-5s %11s %14s %7s  %s\n", "dir", "gpu", "alone GB/s", "together GB/s",
                "ratio", "verdict");
    for (const RunReport& r : g.runs) {
      const core::GroupRun& run = r.run;
      const std::string dir(probes::ToString(run.spec.direction));
      for (std::size_t i = 0; i < run.samples.size(); ++i) {
        const ProbeSample& s = run.samples[i];
        const double solo = run.solo_bytes_per_s[i];
        if (s.status != ProbeStatus::kOk) {
          std::printf("  %-5s %-5d %11s %14s %7s  %s: %s\n", dir.c_str(), run.group.gpus[i],
                      solo > 0 ? Gbps(solo).c_str() : "-", "-", "-",
                      std::string(probes::ToString(s.status)).c_str(), s.message.c_str());
          continue;
        }
        std::printf("  %-5s %-5d %11s %14s %7s\n", dir.c_str(), run.group.gpus[i],
                    solo > 0 ? Gbps(solo).c_str() : "-", Gbps(s.MedianBandwidth()).c_str(),
                    solo > 0 ? fmt::format("{:.2f}", s.MedianBandwidth() / solo).c_str() : "-");
      }
      const double aggregate = run.Aggregate(), solo_sum = SoloSum(run);
      std::printf(
          "  %-5s %-5s %11s %14s %7s  %s\n", dir.c_str(), "sum", Gbps(solo_sum).c_str(),
          aggregate > 0 ? Gbps(aggregate).c_str() : "-",
          aggregate > 0 && solo_sum > 0 ? fmt::format("{:.2f}", aggregate / solo_sum).c_str() : "-",
          r.verdict.text.c_str());
    }
  }
  if (!causes.empty()) {
    std::printf("\nlikely causes:\n");
    for (const auto& [gpu, list] : causes) {
      for (const core::Diagnosis& d : list) {
        std::printf(
            "  GPU %d %s %s: %s\n    %s\n", gpu, core::FaultToken(core::FaultOf(d.cause)).c_str(),
            std::string(core::ToString(d.cause)).c_str(), d.detail.c_str(), d.advice.c_str());
      }
    }
  }
  std::printf("\n");
}

nlohmann::json DeviceJson(const probes::DeviceInfo& d, const probes::LinkPath& path) {
  const probes::PcieLink* narrowest = path.Narrowest();
  nlohmann::json bdfs = nlohmann::json::array();
  for (const probes::PcieLink& l : path.links) bdfs.push_back(l.bdf);
  return {
      {"index", d.index},
      {"uuid", d.uuid},
      {"name", d.name},
      {"pci_bus_id", d.pci_bus_id},
      {"simulated", d.simulated},
      {"numa_node", path.numa_node},
      {"host_link", probes::ToString(probes::HostLinkOf(d))},
      {"narrowest_link",
       narrowest != nullptr ? nlohmann::json{{"bdf", narrowest->bdf},
                                             {"link", probes::FormatLink(narrowest->current_gen,
                                                                         narrowest->current_width)},
                                             {"bytes_per_s", narrowest->CurrentBytesPerSecond()}}
                            : nlohmann::json()},
      {"link_path_bdfs", bdfs}};
}

nlohmann::json Json(const std::string& backend, const std::vector<probes::DeviceInfo>& devices,
                    const std::vector<probes::LinkPath>& paths,
                    const std::vector<GroupReport>& groups,
                    const std::map<int, std::vector<core::Diagnosis>>& causes,
                    const probes::ProbeSpec& spec) {
  nlohmann::json out_devices = nlohmann::json::array();
  bool simulated = false;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    simulated = simulated || devices[i].simulated;
    out_devices.push_back(DeviceJson(devices[i], paths[i]));
  }
  nlohmann::json out_groups = nlohmann::json::array();
  for (const GroupReport& g : groups) {
    nlohmann::json runs = nlohmann::json::array();
    for (const RunReport& r : g.runs) {
      nlohmann::json per_gpu = nlohmann::json::array();
      for (std::size_t i = 0; i < r.run.samples.size(); ++i) {
        const ProbeSample& s = r.run.samples[i];
        const bool ok = s.status == ProbeStatus::kOk;
        const double solo = r.run.solo_bytes_per_s[i];
        per_gpu.push_back({{"gpu", r.run.group.gpus[i]},
                           {"status", probes::ToString(s.status)},
                           {"message", s.message},
                           {"solo_bytes_per_s", solo},
                           {"concurrent_bytes_per_s", ok ? s.MedianBandwidth() : 0.0},
                           {"ratio", ok && solo > 0 ? nlohmann::json(s.MedianBandwidth() / solo)
                                                    : nlohmann::json()},
                           {"host_numa_node", s.host_numa_node},
                           {"device_time_s", s.device_time_s}});
      }
      runs.push_back({{"direction", probes::ToString(r.run.spec.direction)},
                      {"per_gpu", per_gpu},
                      {"aggregate_bytes_per_s", r.run.Aggregate()},
                      {"solo_sum_bytes_per_s", SoloSum(r.run)},
                      {"verdict", r.verdict.text}});
    }
    out_groups.push_back({{"name", g.group.name},
                          {"gpus", g.group.gpus},
                          {"shared_link", g.group.shared_link},
                          {"capacity_bytes_per_s", g.group.capacity_bytes_per_s},
                          {"expected_band", BandJson(g.band)},
                          {"runs", runs}});
  }
  nlohmann::json diagnoses = nlohmann::json::array();
  for (const auto& [gpu, list] : causes) {
    for (const core::Diagnosis& d : list) {
      const core::FaultCode& fault = core::FaultOf(d.cause);
      diagnoses.push_back({{"gpu", gpu},
                           {"cause", core::ToString(d.cause)},
                           {"code", fault.Code()},
                           {"action", core::ToString(fault.action)},
                           {"detail", d.detail},
                           {"advice", d.advice}});
    }
  }
  return {{"backend", backend},
          {"simulated", simulated},
          {"mode", "pinned"},
          {"size_bytes", spec.size_bytes},
          {"iterations", spec.iterations},
          {"devices", out_devices},
          {"groups", out_groups},
          {"diagnoses", diagnoses}};
}

}  // namespace

int RunConcurrentProbes(probes::TransferBackend& backend,
                        const std::vector<probes::DeviceInfo>& selected,
                        const config::Config& config, bool json) {
  const std::vector<probes::ProbeSpec> plan =
      core::PlanConcurrent(config, core::Deadlines::kStretchedToSize);
  core::SteadyClock clock;
  core::ProbeRunner runner(backend, clock, core::HangWatch::kCancel);
  // Each GPU alone first: the figure each concurrent one is held against, and its path,
  // read while its link carries traffic.
  std::vector<probes::LinkPath> paths(selected.size());
  std::map<std::pair<int, Direction>, ProbeSample> solo;
  int bad = 0;
  for (std::size_t i = 0; i < selected.size(); ++i) {
    bool link_read = false;
    for (const probes::ProbeSpec& spec : plan) {
      std::optional<core::Measured> m = runner.Run(
          selected[i], spec, nullptr, config, !link_read && spec.direction == Direction::kH2D, {});
      if (m->link) {
        paths[i] = std::move(*m->link);
        link_read = true;
      }
      if (m->sample.status != ProbeStatus::kOk) ++bad;
      solo[{selected[i].index, spec.direction}] = std::move(m->sample);
    }
    if (!link_read) paths[i] = backend.ReadLinkPath(selected[i].index);
  }
  std::vector<GroupReport> groups;
  std::map<int, std::vector<core::Diagnosis>> causes;
  for (const core::HostGroup& group : core::FindGroups(selected, paths, 1)) {
    GroupReport g{group, core::GroupBand(group, config), {}};
    for (const probes::ProbeSpec& spec : plan) {
      std::vector<double> alone;
      for (int gpu : group.gpus) {
        const ProbeSample& s = solo[{gpu, spec.direction}];
        alone.push_back(s.status == ProbeStatus::kOk ? s.MedianBandwidth() : 0.0);
      }
      core::GroupRun run = runner.RunGroup(group, selected, alone, spec, {})->run;
      for (const auto& [gpu, d] : core::DiagnoseSharedUplink(run)) {
        auto& list = causes[gpu];
        const core::DiagnosisCause cause = d.cause;  // clang: no structured binding in a lambda
        const bool known = std::any_of(list.begin(), list.end(), [cause](const core::Diagnosis& x) {
          return x.cause == cause;
        });
        if (!known) list.push_back(d);
      }
      const core::AggregateVerdict verdict = core::JudgeAggregate(run, g.band);
      if (verdict.bad) ++bad;
      g.runs.push_back({std::move(run), verdict});
    }
    groups.push_back(std::move(g));
  }
  if (json) {
    std::printf(
        "%s\n",
        Json(backend.Name(), selected, paths, groups, causes, plan.front()).dump(2).c_str());
  } else {
    PrintTable(selected, paths, groups, causes, plan.front());
  }
  std::fflush(stdout);
  if (bad > 0 && !json) {
    std::fprintf(stderr,
                 "xferd probe: %d concurrent result(s) failed or an aggregate is below its "
                 "expected band\n",
                 bad);
  }
  return bad > 0 ? 1 : 0;
}

}  // namespace xferd::cmd
