#include "exporter/families.h"

#include <cstdio>
#include <cstdlib>

namespace xferd::exporter {
namespace {

using Fold = FleetRule::Fold;
using enum FamilyType;

constexpr std::array<FamilySpec, kFamilyCount> kTable = {{
    {FamilyId::kTransferDuration, "xferd_transfer_duration_seconds", kHistogram, kFleetNone,
     "Duration of each timed transfer of a probe."},
    {FamilyId::kBandwidth, "xferd_bandwidth_bytes_per_second", kGauge, kFleetPairs,
     "Median bandwidth of the last probe (bytes moved / median duration)."},
    {FamilyId::kBaseline, "xferd_bandwidth_baseline_bytes_per_second", kGauge, kFleetPairs,
     "Learned baseline: robust median of recent healthy cycle medians, persisted in the state "
     "directory."},
    {FamilyId::kExpected, "xferd_expected_bandwidth_bytes_per_second", kGauge, kFleetPairs,
     "Expected band per direction for link-bound modes, from config or the narrowest PCIe "
     "link on the path."},
    {FamilyId::kBandExempt, "xferd_band_exempt", kGauge, kFleetPairs,
     "1 for a link-bound probe the band does not hold: smaller than the size its mode is held "
     "at (4 MiB; managed_prefetch h2d 64 MiB), bounded by its per-copy cost on the link, or "
     "without a healthy figure over NVLink-C2C: judged against its baseline only, and left out "
     "of the band rules."},
    {FamilyId::kDegraded, "xferd_bandwidth_degraded", kGauge, kFleetPairs,
     "1 when the daemon judges the mode and direction degraded (below band or baseline for "
     "consecutive_bad cycles)."},
    {FamilyId::kDiagnosis, "xferd_diagnosis", kGauge, kFleetAll,
     "1 when the cause holds after the last cycle: the likely explanation of a low reading."},
    {FamilyId::kOverlap, "xferd_overlap_ratio", kGauge, kFleetNone,
     "Copy/compute overlap of pinned_async: 1 = copies fully hidden, 0 = serialized."},
    {FamilyId::kLinkGeneration, "xferd_pcie_link_generation", kGauge, kFleetAll,
     "PCIe generation: the GPU's own link (current; max = the most it can train to, the lower "
     "of its two ends' maxima) and the narrowest link on its path (narrowest), read while "
     "probing."},
    {FamilyId::kLinkWidth, "xferd_pcie_link_width", kGauge, kFleetAll,
     "PCIe lanes: the GPU's own link (current; max = the most it can train to, the lower of "
     "its two ends' maxima) and the narrowest link on its path (narrowest), read while "
     "probing."},
    {FamilyId::kProbeRuns, "xferd_probe_runs_total", kCounter, FleetFold(Fold::kSum, "mode"),
     "Probes by result (bidirectional pinned probes count under mode=\"pinned\")."},
    {FamilyId::kLastSuccess, "xferd_probe_last_success_timestamp_seconds", kGauge,
     FleetFold(Fold::kMax, "mode"), "Unix time of the last successful probe of the mode."},
    {FamilyId::kDeviceSeconds, "xferd_probe_device_seconds_total", kCounter, kFleetAll,
     "Device time spent probing; its rate() is the duty cycle."},
    {FamilyId::kForeignTraffic, "xferd_foreign_traffic_bytes_per_second", kGauge, kFleetNone,
     "Another process's PCIe traffic seen in the last probe's window: the link's byte counters "
     "minus the probe's own bytes (direction h2d, d2h)."},
    {FamilyId::kGpuLoadReadable, "xferd_gpu_load_readable", kGauge, kFleetNone,
     "1 when NVML reads the GPU's link around each probe; 0: contended probes cannot be told "
     "apart (busy check only)."},
    {FamilyId::kDeviceInfo, "xferd_device_info", kGauge, kFleetAll,
     "Constant 1; labels describe the device. simulated=\"1\" marks the simulated backend."},
    {FamilyId::kGpuInfo, "xferd_gpu_info", kGauge, kFleetAll,
     "Constant 1; the GPU as dcgm-exporter labels it (UUID, pci_bus_id, device, modelName, "
     "Hostname, hostname), beside xferd's gpu: join on UUID."},
    {FamilyId::kHostLinkInfo, "xferd_host_link_info", kGauge, kFleetAll,
     "Constant 1; type says how the GPU reaches host memory: pcie, c2c (NVLink-C2C, Grace "
     "Hopper) or integrated (shared DRAM)."},
    {FamilyId::kAerErrors, "xferd_pcie_aer_errors_total", kCounter, FleetFold(Fold::kSum, "device"),
     "PCIe AER errors a device on the GPU's path reported, by class (correctable, nonfatal, "
     "fatal): the kernel's TOTAL_ERR_* of aer_dev_*. Absent while not readable "
     "(xferd_pcie_error_source_readable)."},
    {FamilyId::kAerRootportErrors, "xferd_pcie_aer_rootport_errors_total", kCounter, kFleetNone,
     "PCIe AER error messages the root port of the GPU's path received from every device "
     "below it, by class: the kernel's aer_rootport_total_err_*."},
    {FamilyId::kPcieReplays, "xferd_pcie_replays_total", kCounter, kFleetAll,
     "PCIe replays (link-level retransmissions) the GPU counted on its own link: NVML's replay "
     "counter. Absent while not readable."},
    {FamilyId::kErrorSourceReadable, "xferd_pcie_error_source_readable", kGauge,
     FleetFold(Fold::kMin, "device"),
     "1 when a link-error source of the GPU's path was read this cycle: source=\"aer\" a "
     "device's AER counters, \"nvml_replay\" the GPU's replay counter. 0: missing (no AER "
     "capability, a VM) or not trusted (an odd file, a count that went back); see the log."},
    {FamilyId::kConcurrent, "xferd_concurrent_bandwidth_bytes_per_second", kGauge, kFleetAll,
     "Median bandwidth of the GPU's pinned probe while every GPU of the group moved data at "
     "once."},
    {FamilyId::kAggregate, "xferd_host_aggregate_bandwidth_bytes_per_second", kGauge, kFleetAll,
     "Sum over the group's GPUs of what each moved in the last concurrent run."},
    {FamilyId::kAggregateExpected, "xferd_host_aggregate_expected_bandwidth_bytes_per_second",
     kGauge, kFleetAll,
     "Expected aggregate band of the group per direction: the band fractions x what the "
     "members' paths carry together, capped by the links they share."},
    {FamilyId::kGroupInfo, "xferd_concurrent_group_info", kGauge, kFleetAll,
     "Constant 1; the GPUs of a concurrent group and the narrowest link they share (empty: "
     "none)."},
    {FamilyId::kCycleDuration, "xferd_cycle_duration_seconds", kGauge, kFleetAll,
     "Wall time of the last probe cycle, all GPUs."},
    {FamilyId::kCycles, "xferd_cycles_total", kCounter, kFleetAll, "Probe cycles by outcome."},
    {FamilyId::kReloadOk, "xferd_config_last_reload_successful", kGauge, kFleetAll,
     "1 when the last configuration load succeeded."},
    {FamilyId::kReloadTimestamp, "xferd_config_last_reload_success_timestamp_seconds", kGauge,
     kFleetAll, "Unix time of the last successful configuration load."},
    {FamilyId::kStateWriteErrors, "xferd_state_write_errors_total", kCounter, kFleetAll,
     "Failed writes of the state file (baselines stay in memory)."},
    {FamilyId::kTextfileWriteErrors, "xferd_textfile_write_errors_total", kCounter, kFleetAll,
     "Failed writes of the node_exporter textfile (the previous file stays)."},
    {FamilyId::kBuildInfo, "xferd_build_info", kGauge, kFleetAll,
     "Constant 1; labels describe the build."},
}};

constexpr bool InIdOrder() {
  for (std::size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<std::size_t>(kTable[i].id) != i) return false;
  }
  return true;
}
static_assert(InIdOrder(), "families.cc: the table's rows must follow FamilyId's order");

template <typename Builder>
auto* Register(Builder builder, const FamilySpec& spec, prometheus::Registry& registry) {
  return &builder.Name(std::string(spec.name)).Help(std::string(spec.help)).Register(registry);
}

template <typename Metric, typename Any>
prometheus::Family<Metric>& Get(const Any& any, FamilyId id) {
  auto* const* family = std::get_if<prometheus::Family<Metric>*>(&any);
  if (family == nullptr) {
    const std::string_view name = kTable[static_cast<std::size_t>(id)].name;
    std::fprintf(stderr, "xferd: the metric family %.*s asked for as another type\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return **family;
}

}  // namespace

const std::array<FamilySpec, kFamilyCount>& FamilyTable() {
  return kTable;
}

const FamilySpec* FindFamily(std::string_view name) {
  for (const FamilySpec& spec : kTable) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

Families::Families(prometheus::Registry& registry) {
  for (const FamilySpec& spec : kTable) {
    Any& slot = families_[static_cast<std::size_t>(spec.id)];
    switch (spec.type) {
      case kGauge: slot = Register(prometheus::BuildGauge(), spec, registry); break;
      case kCounter: slot = Register(prometheus::BuildCounter(), spec, registry); break;
      case kHistogram: slot = Register(prometheus::BuildHistogram(), spec, registry); break;
    }
  }
}

prometheus::Family<prometheus::Gauge>& Families::Gauge(FamilyId id) const {
  return Get<prometheus::Gauge>(families_[static_cast<std::size_t>(id)], id);
}
prometheus::Family<prometheus::Counter>& Families::Counter(FamilyId id) const {
  return Get<prometheus::Counter>(families_[static_cast<std::size_t>(id)], id);
}
prometheus::Family<prometheus::Histogram>& Families::Histogram(FamilyId id) const {
  return Get<prometheus::Histogram>(families_[static_cast<std::size_t>(id)], id);
}

}  // namespace xferd::exporter
