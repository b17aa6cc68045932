// What xferd exports, written as the daemon learns it (prefix xferd_, base units): every
// family is a row of the family table (exporter/families.def, the one place that names them),
// and what each metrics profile serves of them is exporter/profile.h. The reference with
// types, labels, profiles and the series budget is docs/metrics.md.
//
// Use (the service): Metrics metrics(registry); metrics.SetBuildInfo(); per GPU at start
// SetDevice(dev); per probe RecordLinkPath, RecordSample (or RecordSkipped); what a cycle
// came to through the core::CyclePipeline it is a consumer of (RecordHealth, RecordSchedule,
// the link's errors and watch, RecordConcurrent, RecordCycle). All methods are thread-safe
// (prometheus-cpp metrics are).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/cycle_pipeline.h"
#include "core/health_tracker.h"
#include "core/host_groups.h"
#include "core/link_errors.h"
#include "exporter/families.h"
#include "exporter/profile.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::exporter {

class LinkErrorMetrics;

// Results a probe can have, as the `result` label of xferd_probe_runs_total.
// kContended: the probe ran, but its window saw another process's traffic on the link: its
// reading is neither judged nor learned, nor published as bandwidth.
enum class ProbeResult { kOk, kError, kTimeout, kSkippedBusy, kUnsupported, kContended };
std::string_view ToString(ProbeResult result);  // "ok", "error", "timeout", ...
ProbeResult ResultOf(probes::ProbeStatus status);

// Outcomes of a whole cycle, the `result` label of xferd_cycles_total.
enum class CycleResult { kOk, kPartial, kSkippedBusy, kOverBudget };
std::string_view ToString(CycleResult result);  // "ok", "partial", "skipped_busy", "over_budget"
// Every GPU skipped busy; else over its budget; else some probe failed, timed out or was
// skipped busy; else ok.
CycleResult CycleResultOf(const core::CycleReport& report);

// Bucket boundaries (seconds) of one duration histogram: 9 fine boundaries of ratio 2^(1/8)
// (~1.09) from 0.917x to 1.83x the anchor duration and one coarse boundary at 4x. Every
// boundary is a point of one global grid 2^(i/8) s, so series of different
// devices with similar anchors share `le` values and can be summed.
std::vector<double> DurationBuckets(double anchor_seconds);

// A bus id as NVML, DCGM and dcgm-exporter write it (pci_bus_id): the domain in 8 hex
// digits, upper case ("0000:3b:00.0" -> "00000000:3B:00.0"); "" stays "".
std::string DcgmBusId(std::string_view bus_id);

// The node's name as dcgm-exporter labels its series (Hostname, hostname): $NODE_NAME when
// set (a Kubernetes pod's node, from the downward API), else the host name.
std::string NodeName();

class Metrics final : public core::CycleConsumer {
 public:
  explicit Metrics(prometheus::Registry& registry, std::string node_name = NodeName());
  ~Metrics() override;
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // xferd_build_info{version, cuda_version, cuda_backend, build_type} = 1.
  void SetBuildInfo();

  // xferd_device_info and xferd_gpu_info = 1 and every per-GPU counter at 0 so rate() works
  // from the start (the run counters of the modes SetPlan named).
  void SetDevice(const probes::DeviceInfo& device);

  // The modes a configuration probes, at the start and after each reload: their run
  // counters start at 0 on every GPU SetDevice named, so rate() works from their first
  // probe. A mode the configuration never probed has none. Also the metrics profile in
  // force (settings.metrics_profile) and the pairs it keeps.
  void SetPlan(const core::Settings& settings);

  // What /metrics and the textfile render: the registry as the profile SetPlan named
  // exports it (exporter/profile.h). Valid while this Metrics lives.
  std::shared_ptr<prometheus::Collectable> Exposition() const { return exposed_; }

  // Link generation/width: the GPU's own link (current, max) and the narrowest one's.
  void RecordLinkPath(int gpu, const probes::LinkPath& path);

  // One probe: histogram of every duration, median bandwidth, run counter, last success,
  // device time, overlap ratio, the foreign traffic its window saw and whether the link
  // could be read. The first sample of a series fixes its histogram buckets around
  // `anchor_bytes_per_s` (e.g. the learned baseline) when > 0, else around the sample's
  // own median duration. A contended sample counts as result="contended" and moves none of
  // the bandwidth series (histogram, gauge, last success): they carry uncontended readings
  // only, as the fleet-peer rules assume.
  // `histogram` false: the gauges only (the "headline" histogram profile, for the other
  // probes).
  void RecordSample(const probes::DeviceInfo& device, const probes::ProbeSample& sample,
                    double anchor_bytes_per_s = 0, bool histogram = true);

  // A concurrent run of a group in one direction (core/host_groups.h): what each member got,
  // the group's aggregate (only when every member's probe was ok; else the series is
  // removed rather than left stale), its expected band `band`, the group's info series, and
  // each member's device time.
  void RecordConcurrent(const core::GroupRun& run, const core::ExpectedBand& band);

  // A probe that did not run: kSkippedBusy or kUnsupported.
  void RecordSkipped(int gpu, probes::TransferMode mode, ProbeResult result);

  // Verdicts, baselines, expected band (and those of the probed pairs with a band of their
  // own; one no longer probed goes), diagnosis after Observe.
  void RecordHealth(const core::DeviceHealth& health);

  // After each cycle, per GPU: the device-time allowance it left and how many planned
  // series the allowance held back.
  void RecordSchedule(int gpu, double allowance_s, int held_back);

  // The link's error counters on the GPU's path and whether each source is readable
  // (exporter/link_error_metrics.h), after each reading.
  void RecordLinkErrors(const probes::DeviceInfo& device, const core::LinkErrorReading& reading);

  // After each cycle (all GPUs): wall time and outcome.
  void RecordCycle(double wall_seconds, CycleResult result);

  // The link watch's counts of one GPU (core/link_watch.h): its transitions and time below
  // capability (the counters start at 0 once it watches the GPU's links). Any thread; the
  // generation moves only when a count did.
  void RecordLinkWatch(int gpu, const core::LinkWatchState& state);

  // What a cycle came to (core::CyclePipeline): each GPU's health and, after a cycle, its
  // schedule; the link's errors and watch; the concurrent runs; the cycle's outcome (a
  // confirmation round is no cycle: the cycle counters and timings stay the cycles').
  void OnConcurrent(const core::GroupRun& run, const core::ExpectedBand& band) override;
  void OnLinkErrors(const probes::DeviceInfo& device,
                    const core::LinkErrorReading& reading) override;
  void OnLinkWatch(const probes::DeviceInfo& device, const core::LinkWatchState& state) override;
  void OnJudged(const core::GpuJudgement& judgement) override;
  void OnCycleEnd(const core::CycleReport& report, const core::Settings& settings) override;

  void RecordConfigReload(bool ok, double unix_seconds);
  void RecordStateWrite(bool ok);
  // A node_exporter textfile write (xferd_textfile_write_errors_total counts failures).
  void RecordTextfileWrite(bool ok);
  // An evidence record written or dropped (xferd_evidence_records_total). Thread-safe.
  void RecordEvidence(bool written);

  // Changes after every write to the registry's values (by the methods above, after they
  // wrote), so text rendered at generation g is current while Generation() == g: /metrics
  // serves the registry's text from a cache in between (exporter/routes.h).
  std::uint64_t Generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  using SeriesKey = std::tuple<int, probes::TransferMode, probes::Direction, std::uint64_t>;
  using Pair = std::pair<probes::TransferMode, probes::Direction>;

  // xferd_probe_runs_total of `mode` on GPU `gpu`, every result at 0.
  void AddRunCounters(int gpu, probes::TransferMode mode);

  // Every family of the table (exporter/families.h), registered in the registry.
  Families families_;
  prometheus::Family<prometheus::Gauge>& Gauge(FamilyId id) { return families_.Gauge(id); }
  prometheus::Family<prometheus::Counter>& Counter(FamilyId id) { return families_.Counter(id); }
  // What /metrics and the textfile render: the registry as the profile in force exports it.
  std::shared_ptr<ProfiledRegistry> exposed_;
  std::string node_name_;  // Hostname / hostname of xferd_gpu_info

  std::unique_ptr<LinkErrorMetrics> link_errors_;

  std::atomic<std::uint64_t> generation_{0};

  std::mutex mutex_;  // guards the maps below
  std::map<SeriesKey, prometheus::Histogram*> histograms_;
  // The link watch's totals last published, per GPU.
  struct LinkWatchTotals {
    std::uint64_t transitions = 0;
    double reduced_s = 0;
    prometheus::Counter* transitions_ = nullptr;
    prometheus::Counter* reduced_ = nullptr;
  };
  std::map<int, LinkWatchTotals> link_watch_;
  std::map<std::string, prometheus::Gauge*> group_info_by_group_;  // its current labels
  // Per GPU: its xferd_device_info series (its shape labels change on reload) and its MIG
  // instances' info series, replaced when they change.
  std::map<int, prometheus::Labels> device_info_labels_;
  std::map<int, std::vector<prometheus::Labels>> mig_instances_;
  // The device_info series of `labels`, replacing the GPU's earlier one (mutex_ held).
  void SetDeviceInfo(int gpu, prometheus::Labels labels);
  std::vector<int> devices_;                  // SetDevice's GPUs
  std::vector<probes::TransferMode> modes_;   // SetPlan's modes
  std::map<int, std::set<Pair>> pair_bands_;  // per GPU: the pairs whose own band is exported
};

}  // namespace xferd::exporter
