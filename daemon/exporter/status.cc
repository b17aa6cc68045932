#include "exporter/status.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/allowance.h"
#include "core/band.h"
#include "core/fault_codes.h"
#include "platform/build_info.h"
#include "platform/printable.h"

namespace xferd::exporter {
namespace {

using core::DeviceVerdict;
using nlohmann::json;
using std::chrono::system_clock;

// Messages and names that came from outside (a driver's error, NVML's name) are quoted this
// far at most: the document stays small and valid UTF-8.
constexpr std::size_t kTextBytes = 300;

std::string Text(std::string_view text) {
  return platform::Printable(text, kTextBytes);
}

// A rate, or null when it is not known (0 or not finite).
json Rate(double bytes_per_s) {
  return bytes_per_s > 0 && std::isfinite(bytes_per_s) ? json(bytes_per_s) : json(nullptr);
}

json Link(int generation, int width) {
  json link = json::object();
  link["generation"] = generation > 0 ? json(generation) : json(nullptr);
  link["width"] = width > 0 ? json(width) : json(nullptr);
  return link;
}

// The PCIe link as /metrics shows it (RecordLinkPath): nothing for an integrated GPU or one
// that reaches host memory over NVLink-C2C.
json PcieOf(const probes::LinkPath& path) {
  if (!path.pcie || path.c2c || path.links.empty()) return nullptr;
  const probes::PcieLink& own = path.links.front();
  json pcie = {{"address", own.bdf},
               {"current", Link(own.current_gen, own.current_width)},
               {"max", Link(own.LinkMaxGen(), own.LinkMaxWidth())},
               {"narrowest", nullptr}};
  if (const probes::PcieLink* narrowest = path.Narrowest()) {
    json n = Link(narrowest->current_gen, narrowest->current_width);
    n["address"] = narrowest->bdf;
    n["bytes_per_second"] = Rate(narrowest->CurrentBytesPerSecond());
    pcie["narrowest"] = std::move(n);
  }
  bool downtrained = false;
  for (const probes::PcieLink& l : path.links) downtrained = downtrained || l.Downtrained();
  pcie["downtrained"] = downtrained;
  return pcie;
}

json Watch(const std::optional<core::LinkWatchState>& watch) {
  if (!watch || !watch->watching) {
    return {{"watching", false},
            {"reason",
             "not watched: the link watch is off, or has no link of this GPU to read (an "
             "integrated or NVLink-C2C GPU, a path neither sysfs nor NVML shows)"}};
  }
  const core::LinkWatchState& w = *watch;
  return {{"watching", true},
          {"source", Text(w.source)},
          {"problem", Text(w.problem)},
          {"transitions_total", w.transitions},
          {"reduced_seconds_total", w.reduced_s},
          {"window_seconds", w.window_s},
          {"window_transitions", w.window_transitions},
          {"window_reduced_seconds", w.window_reduced_s},
          {"flapping", w.flapping},
          {"last_seen", Text(w.last_seen)}};
}

// Seconds from `from` to `to` on the daemon's clock; null when either is not known.
json Seconds(const std::optional<core::SteadyTime>& from,
             const std::optional<core::SteadyTime>& to) {
  if (!from || !to) return nullptr;
  return std::chrono::duration<double>(*to - *from).count();
}

// The degraded series furthest below what it should be, and what it is below.
json Headline(const core::DeviceHealth& health) {
  const core::SeriesHealth* worst = core::WorstDegraded(health);
  if (worst == nullptr) return nullptr;
  const std::optional<core::DiagnosisCause> cause = core::LeadingCause(health);
  const core::FaultCode& fault = cause ? core::FaultOf(*cause) : core::DegradedNoCause();
  json h = {{"mode", probes::ToString(worst->mode)},
            {"direction", probes::ToString(worst->direction)},
            {"size", probes::FormatSize(worst->size_bytes)},
            {"cause", cause ? json(core::ToString(*cause)) : json(nullptr)},
            {"code", fault.Code()},
            {"action", core::ToString(fault.action)},
            {"baseline_of", worst->peer_baseline_bytes_per_s > 0 ? "peers" : "own"}};
  if (worst->below_band) {
    h["below"] = "band";
    h["reading_bytes_per_second"] =
        Rate(core::PerDirection(worst->direction, worst->median_bytes_per_s));
    h["reference_bytes_per_second"] =
        Rate(core::ModeBand(health.band, worst->mode, worst->direction).lower_bytes_per_s);
  } else if (worst->below_baseline) {
    h["below"] = "baseline";
    h["reading_bytes_per_second"] = Rate(worst->median_bytes_per_s);
    h["reference_bytes_per_second"] = Rate(worst->BaselineReference());
  } else {
    // Degraded, its last reading good again: short of the readings that flip it back.
    h["below"] = nullptr;
    h["reading_bytes_per_second"] = Rate(worst->median_bytes_per_s);
    h["reference_bytes_per_second"] = nullptr;
  }
  return h;
}

// Confidential computing and MIG as last read: what the GPU's band and verdict follow
// from. `probed_through`: the GPU instance id of the last probe (-1: none).
json Shape(const probes::ConfidentialComputing& cc, const probes::MigState& mig,
           int probed_through) {
  json instances = json::array();
  for (const probes::MigInstance& i : mig.instances) {
    instances.push_back(
        {{"gpu_instance_id", i.gpu_instance_id},
         {"compute_instance_id", i.compute_instance_id},
         {"profile", Text(i.profile)},
         {"uuid", Text(i.uuid)},
         {"copy_engines", i.copy_engines > 0 ? json(i.copy_engines) : json(nullptr)},
         {"reachable", i.reachable},
         {"last_probed", i.gpu_instance_id == probed_through}});
  }
  return {{"confidential_computing",
           {{"state", probes::ToString(cc.state)},
            {"gpus_ready", cc.gpus_ready ? json(*cc.gpus_ready) : json(nullptr)},
            {"detail", Text(cc.detail)},
            {"problem", Text(cc.problem)}}},
          {"mig",
           {{"mode", probes::ToString(mig.mode)},
            {"whole_gpu_copy_engines",
             mig.whole_gpu_copy_engines > 0 ? json(mig.whole_gpu_copy_engines) : json(nullptr)},
            {"instances", std::move(instances)},
            {"problem", Text(mig.problem)}}}};
}

// ---- The document as tables ---------------------------------------------------------------
// Each object of the document is one table of fields: its name and how its value is made
// from what the object shows (docs/http.md has the same tables, in words). A field is added
// by a row; the order of the rows is the order docs/http.md reads in (the JSON object's
// keys are written sorted).

template <class T>
struct Field {
  const char* name;
  json (*make)(const T&);
};

template <class T, std::size_t N>
json ObjectOf(const T& from, const Field<T> (&fields)[N]) {
  json object = json::object();
  for (const Field<T>& f : fields) object[f.name] = f.make(from);
  return object;
}

// A list of objects, one per item, each made from `context(item)`.
template <class Items, class Context, class T, std::size_t N>
json ListOf(const Items& items, Context context, const Field<T> (&fields)[N]) {
  json list = json::array();
  for (const auto& item : items) list.push_back(ObjectOf<T>(context(item), fields));
  return list;
}

// The names of a table's fields, for StatusFieldNames.
template <class T, std::size_t N>
void NamesOf(const std::string& prefix, const Field<T> (&fields)[N],
             std::vector<std::string>& names) {
  for (const Field<T>& f : fields) names.push_back(prefix + f.name);
}

json Optional(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

struct DaemonContext {
  const DaemonStatus& daemon;
  const ConfigLoad& load;
};

constexpr Field<core::FreshnessBounds> kFreshnessFields[] = {
    {"headline_seconds", [](const core::FreshnessBounds& f) { return json(f.headline_s); }},
    {"rotating_seconds", [](const core::FreshnessBounds& f) { return json(f.rotating_s); }},
    {"degraded_seconds", [](const core::FreshnessBounds& f) { return json(f.degraded_s); }},
};

constexpr Field<ConfigLoad> kReloadFields[] = {
    {"successful", [](const ConfigLoad& l) { return json(l.successful); }},
    {"time", [](const ConfigLoad& l) { return json(core::FormatUtcTime(l.time)); }},
    {"reloads", [](const ConfigLoad& l) { return json(l.reloads); }},
    {"error", [](const ConfigLoad& l) { return json(Text(l.error)); }},
};

constexpr Field<DaemonContext> kDaemonFields[] = {
    {"healthy", [](const DaemonContext& c) { return json(c.daemon.healthy); }},
    {"reason", [](const DaemonContext& c) { return json(Text(c.daemon.reason)); }},
    {"cycles", [](const DaemonContext& c) { return json(c.daemon.cycles); }},
    {"uptime_seconds", [](const DaemonContext& c) { return json(c.daemon.uptime_s); }},
    {"last_cycle_age_seconds",
     [](const DaemonContext& c) { return Optional(c.daemon.last_cycle_age_s); }},
    {"stale_after_seconds", [](const DaemonContext& c) { return json(c.daemon.stale_after_s); }},
    {"interval_seconds", [](const DaemonContext& c) { return json(c.daemon.interval_s); }},
    {"consecutive_bad", [](const DaemonContext& c) { return json(c.daemon.consecutive_bad); }},
    {"freshness",
     [](const DaemonContext& c) { return ObjectOf(c.daemon.freshness, kFreshnessFields); }},
    {"reload", [](const DaemonContext& c) { return ObjectOf(c.load, kReloadFields); }},
};

constexpr Field<core::PairVerdict> kPairFields[] = {
    {"mode", [](const core::PairVerdict& v) { return json(probes::ToString(v.mode)); }},
    {"direction", [](const core::PairVerdict& v) { return json(probes::ToString(v.direction)); }},
    {"degraded", [](const core::PairVerdict& v) { return json(v.degraded); }},
    {"stale", [](const core::PairVerdict& v) { return json(v.stale); }},
};

struct CauseContext {
  const core::Diagnosis& cause;
  std::optional<core::DiagnosisCause> lead;
};

constexpr Field<CauseContext> kCauseFields[] = {
    {"cause", [](const CauseContext& c) { return json(core::ToString(c.cause.cause)); }},
    {"code", [](const CauseContext& c) { return json(core::FaultOf(c.cause.cause).Code()); }},
    {"action",
     [](const CauseContext& c) {
       return json(core::ToString(core::FaultOf(c.cause.cause).action));
     }},
    {"fault", [](const CauseContext& c) { return json(!core::IsNote(c.cause.cause)); }},
    {"leads", [](const CauseContext& c) { return json(c.lead && *c.lead == c.cause.cause); }},
    {"detail", [](const CauseContext& c) { return json(Text(c.cause.detail)); }},
    {"advice", [](const CauseContext& c) { return json(Text(c.cause.advice)); }},
};

constexpr Field<LinkErrorCounter> kCounterFields[] = {
    {"device", [](const LinkErrorCounter& c) { return json(Text(c.device)); }},
    {"counter", [](const LinkErrorCounter& c) { return json(c.counter); }},
    {"source", [](const LinkErrorCounter& c) { return json(c.source); }},
    {"class",
     [](const LinkErrorCounter& c) {
       return c.aer_class.empty() ? json(nullptr) : json(c.aer_class);
     }},
    {"readable", [](const LinkErrorCounter& c) { return json(c.readable); }},
    {"value", [](const LinkErrorCounter& c) { return c.value ? json(*c.value) : json(nullptr); }},
    {"reason",
     [](const LinkErrorCounter& c) { return json(c.readable ? std::string() : Text(c.reason)); }},
};

using LinkErrors = std::optional<std::vector<LinkErrorCounter>>;

constexpr Field<LinkErrors> kErrorsFields[] = {
    {"read", [](const LinkErrors& e) { return json(e.has_value()); }},
    {"reason",
     [](const LinkErrors& e) {
       return json(e ? "" : "this xferd does not read the link's error counters");
     }},
    {"counters",
     [](const LinkErrors& e) {
       return e ? ListOf(
                      *e, [](const LinkErrorCounter& c) -> const LinkErrorCounter& { return c; },
                      kCounterFields)
                : json::array();
     }},
};

struct OutlookContext {
  const core::DeviceCycle::Outlook& outlook;
  const DaemonStatus& daemon;
};

constexpr Field<OutlookContext> kOutlookFields[] = {
    {"mode", [](const OutlookContext& c) { return json(probes::ToString(c.outlook.spec.mode)); }},
    {"direction",
     [](const OutlookContext& c) { return json(probes::ToString(c.outlook.spec.direction)); }},
    {"size",
     [](const OutlookContext& c) { return json(probes::FormatSize(c.outlook.spec.size_bytes)); }},
    {"class", [](const OutlookContext& c) { return json(core::ToString(c.outlook.cls)); }},
    {"held_back", [](const OutlookContext& c) { return json(c.outlook.held_back); }},
    {"next_run_in_seconds",
     [](const OutlookContext& c) { return Seconds(c.daemon.now, c.outlook.next_run); }},
};

struct ScheduleContext {
  const GpuSchedule& schedule;
  const DaemonStatus& daemon;
};

constexpr Field<ScheduleContext> kScheduleFields[] = {
    {"allowance_seconds", [](const ScheduleContext& c) { return json(c.schedule.allowance_s); }},
    {"allowance_capacity_seconds",
     [](const ScheduleContext& c) { return json(c.schedule.capacity_s); }},
    {"burst_reserve_seconds", [](const ScheduleContext& c) { return json(c.schedule.reserve_s); }},
    {"max_duty_cycle", [](const ScheduleContext& c) { return json(c.schedule.duty_cycle); }},
    {"held_back", [](const ScheduleContext& c) { return json(c.schedule.held_back); }},
    {"series",
     [](const ScheduleContext& c) {
       return ListOf(
           c.schedule.series,
           [&](const core::DeviceCycle::Outlook& o) {
             return OutlookContext{o, c.daemon};
           },
           kOutlookFields);
     }},
};

struct SeriesContext {
  const core::SeriesHealth& s;
  const core::ExpectedBand& band;
  const DaemonStatus& daemon;
  const RecentReadings* recent;
};

json LowerOf(const SeriesContext& c) {
  if (!core::HeldToBand(c.s.mode, c.s.direction, c.s.size_bytes, c.band) || !c.band.Known()) {
    return nullptr;
  }
  return core::ModeBand(c.band, c.s.mode, c.s.direction).lower_bytes_per_s;
}

// {"age_seconds": [...], "bytes_per_second": [...]}, oldest first: the readings the page
// plots. Two lists of numbers rather than a list of pairs: half the nodes when a reader
// parses it (a 64-GPU host holds 26,000 readings). Ages to a tenth of a second and rates to
// the byte keep the text short.
json RecentOf(const SeriesContext& c) {
  json ages = json::array(), rates = json::array();
  if (c.recent != nullptr && c.daemon.now) {
    for (std::size_t i = 0; i < c.recent->size(); ++i) {
      const RecentReadings::Reading& r = (*c.recent)[i];
      const double age = std::chrono::duration<double>(*c.daemon.now - r.at).count();
      ages.push_back(std::round(age * 10) / 10);
      rates.push_back(std::llround(r.bytes_per_s));
    }
  }
  return {{"age_seconds", std::move(ages)}, {"bytes_per_second", std::move(rates)}};
}

constexpr Field<SeriesContext> kSeriesFields[] = {
    {"mode", [](const SeriesContext& c) { return json(probes::ToString(c.s.mode)); }},
    {"direction", [](const SeriesContext& c) { return json(probes::ToString(c.s.direction)); }},
    {"size", [](const SeriesContext& c) { return json(probes::FormatSize(c.s.size_bytes)); }},
    {"size_bytes", [](const SeriesContext& c) { return json(c.s.size_bytes); }},
    {"status", [](const SeriesContext& c) { return json(probes::ToString(c.s.status)); }},
    {"bandwidth_bytes_per_second",
     [](const SeriesContext& c) { return Rate(c.s.median_bytes_per_s); }},
    {"held_to_band",
     [](const SeriesContext& c) {
       return json(core::HeldToBand(c.s.mode, c.s.direction, c.s.size_bytes, c.band));
     }},
    {"band_lower_bytes_per_second", LowerOf},
    {"baseline_bytes_per_second",
     [](const SeriesContext& c) { return Rate(c.s.baseline_bytes_per_s); }},
    {"baseline_cycles", [](const SeriesContext& c) { return json(c.s.baseline_cycles); }},
    {"below_band", [](const SeriesContext& c) { return json(c.s.below_band); }},
    {"below_baseline", [](const SeriesContext& c) { return json(c.s.below_baseline); }},
    {"contended", [](const SeriesContext& c) { return json(c.s.contended); }},
    {"peer_baseline_bytes_per_second",
     [](const SeriesContext& c) { return Rate(c.s.peer_baseline_bytes_per_s); }},
    {"bad_streak", [](const SeriesContext& c) { return json(c.s.bad_streak); }},
    {"good_streak", [](const SeriesContext& c) { return json(c.s.good_streak); }},
    {"degraded", [](const SeriesContext& c) { return json(c.s.degraded); }},
    {"stale", [](const SeriesContext& c) { return json(c.s.stale); }},
    {"headline", [](const SeriesContext& c) { return json(c.s.headline); }},
    {"measured_at",
     [](const SeriesContext& c) {
       return c.s.measured_wall ? json(core::FormatUtcTime(*c.s.measured_wall)) : json(nullptr);
     }},
    {"age_seconds", [](const SeriesContext& c) { return Seconds(c.s.measured_at, c.daemon.now); }},
    {"recent", RecentOf},
};

struct ProbeContext {
  const GpuRecord::ProbeKey& key;
  const GpuRecord::ProbeRecord& record;
};

constexpr Field<ProbeContext> kProbeFields[] = {
    {"mode", [](const ProbeContext& c) { return json(probes::ToString(std::get<0>(c.key))); }},
    {"direction", [](const ProbeContext& c) { return json(probes::ToString(std::get<1>(c.key))); }},
    {"size", [](const ProbeContext& c) { return json(probes::FormatSize(std::get<2>(c.key))); }},
    {"last_run",
     [](const ProbeContext& c) { return json(core::FormatUtcTime(c.record.last_run)); }},
    {"result", [](const ProbeContext& c) { return json(ToString(c.record.result)); }},
    {"message", [](const ProbeContext& c) { return json(c.record.message); }},
    {"last_success",
     [](const ProbeContext& c) {
       return c.record.last_success ? json(core::FormatUtcTime(*c.record.last_success))
                                    : json(nullptr);
     }},
};

constexpr Field<core::ExpectedBand> kBandFields[] = {
    {"lower_bytes_per_second",
     [](const core::ExpectedBand& b) { return json(b.lower_bytes_per_s); }},
    {"upper_bytes_per_second",
     [](const core::ExpectedBand& b) { return json(b.upper_bytes_per_s); }},
    {"source", [](const core::ExpectedBand& b) { return json(Text(b.source)); }},
};

constexpr Field<GpuRecord> kLinkFields[] = {
    {"host_link",
     [](const GpuRecord& d) { return json(probes::ToString(probes::HostLinkOf(d.info))); }},
    {"read", [](const GpuRecord& d) { return json(d.path.has_value()); }},
    {"pcie", [](const GpuRecord& d) { return d.path ? PcieOf(*d.path) : json(nullptr); }},
    {"numa_node",
     [](const GpuRecord& d) {
       return d.path && d.path->numa_node >= 0 ? json(d.path->numa_node) : json(nullptr);
     }},
    {"iommu",
     [](const GpuRecord& d) { return d.path ? json(Text(d.path->iommu_type)) : json(nullptr); }},
    {"errors", [](const GpuRecord& d) { return ObjectOf(d.link_errors, kErrorsFields); }},
    {"watch", [](const GpuRecord& d) { return Watch(d.link_watch); }},
};

constexpr Field<GpuRecord> kLastProbeFields[] = {
    {"mode", [](const GpuRecord& d) { return json(probes::ToString(d.last_probe->mode)); }},
    {"direction",
     [](const GpuRecord& d) { return json(probes::ToString(d.last_probe->direction)); }},
    {"size", [](const GpuRecord& d) { return json(probes::FormatSize(d.last_probe->size_bytes)); }},
    {"state", [](const GpuRecord& d) { return json(probes::ToString(d.last_contention)); }},
};

constexpr Field<GpuRecord> kContentionFields[] = {
    {"busy", [](const GpuRecord& d) { return json(d.busy); }},
    {"traffic_readable",
     [](const GpuRecord& d) {
       return d.traffic_readable ? json(*d.traffic_readable) : json(nullptr);
     }},
    {"foreign_h2d_bytes_per_second", [](const GpuRecord& d) { return Optional(d.foreign_h2d); }},
    {"foreign_d2h_bytes_per_second", [](const GpuRecord& d) { return Optional(d.foreign_d2h); }},
    {"last_probe",
     [](const GpuRecord& d) {
       return d.last_probe ? ObjectOf(d, kLastProbeFields) : json(nullptr);
     }},
};

// The GPU's code (core/fault_codes.h): its leading cause's when degraded, its state's when
// there is no verdict to act on; none when ok.
const core::FaultCode* GpuFault(const GpuRecord& d, core::DeviceVerdict verdict) {
  switch (verdict) {
    case DeviceVerdict::kDegraded: {
      const auto lead = d.health ? core::LeadingCause(*d.health) : std::nullopt;
      return lead ? &core::FaultOf(*lead) : &core::DegradedNoCause();
    }
    case DeviceVerdict::kPending: return &core::FaultOf(core::NoVerdict::kPending);
    case DeviceVerdict::kStale: return &core::FaultOf(core::NoVerdict::kStale);
    case DeviceVerdict::kUnknown:
      return &core::FaultOf(core::UnjudgeableState(d.health ? d.health->cc : d.info.cc));
    case DeviceVerdict::kOk: return nullptr;
  }
  return nullptr;
}

constexpr Field<EvidenceLink> kEvidenceLinkFields[] = {
    {"record", [](const EvidenceLink& e) { return json(e.record); }},
    {"path", [](const EvidenceLink& e) { return json(Text(e.path)); }},
    {"incident_time",
     [](const EvidenceLink& e) { return json(core::FormatUtcTime(e.incident_time)); }},
    {"bytes", [](const EvidenceLink& e) { return json(e.bytes); }},
};

constexpr Field<EvidenceSummary> kEvidenceFields[] = {
    {"dir", [](const EvidenceSummary& e) { return json(Text(e.dir)); }},
    {"records_kept", [](const EvidenceSummary& e) { return json(e.keep); }},
    {"written", [](const EvidenceSummary& e) { return json(e.written); }},
    {"dropped", [](const EvidenceSummary& e) { return json(e.dropped); }},
    {"last_problem", [](const EvidenceSummary& e) { return json(Text(e.last_problem)); }},
};

struct GpuContext {
  int index;
  const GpuRecord& d;
  core::DeviceVerdict verdict;
  core::ExpectedBand band;  // the health's, or none before it
  const DaemonStatus& daemon;
};

json SeriesOf(const GpuContext& c) {
  if (!c.d.health) return json::array();
  return ListOf(
      c.d.health->series,
      [&](const core::SeriesHealth& s) {
        const auto it = c.d.recent.find({s.mode, s.direction, s.size_bytes});
        return SeriesContext{s, c.band, c.daemon, it == c.d.recent.end() ? nullptr : &it->second};
      },
      kSeriesFields);
}

json CausesOf(const GpuContext& c) {
  if (!c.d.health) return json::array();
  // Ranked (core::RankCauses): the cause that leads first, the notes last.
  const std::optional<core::DiagnosisCause> lead = core::LeadingCause(*c.d.health);
  return ListOf(
      c.d.health->diagnoses,
      [&](const core::Diagnosis& d) {
        return CauseContext{d, lead};
      },
      kCauseFields);
}

constexpr Field<GpuContext> kGpuFields[] = {
    {"gpu", [](const GpuContext& c) { return json(c.index); }},
    {"uuid", [](const GpuContext& c) { return json(Text(c.d.info.uuid)); }},
    {"name", [](const GpuContext& c) { return json(Text(c.d.info.name)); }},
    {"pci_bus_id", [](const GpuContext& c) { return json(Text(c.d.info.pci_bus_id)); }},
    {"simulated", [](const GpuContext& c) { return json(c.d.info.simulated); }},
    {"verdict", [](const GpuContext& c) { return json(core::ToString(c.verdict)); }},
    // Why a GPU has no verdict it can be judged by (unknown); null otherwise.
    {"verdict_reason",
     [](const GpuContext& c) {
       return c.d.health && !c.d.health->unjudgeable.empty() ? json(Text(c.d.health->unjudgeable))
                                                             : json(nullptr);
     }},
    {"code",
     [](const GpuContext& c) {
       const core::FaultCode* f = GpuFault(c.d, c.verdict);
       return f ? json(f->Code()) : json(nullptr);
     }},
    {"action",
     [](const GpuContext& c) {
       const core::FaultCode* f = GpuFault(c.d, c.verdict);
       return f ? json(core::ToString(f->action)) : json(nullptr);
     }},
    {"shape",
     [](const GpuContext& c) {
       return Shape(c.d.health ? c.d.health->cc : c.d.info.cc,
                    c.d.health ? c.d.health->mig : c.d.info.mig, c.d.probed_through);
     }},
    {"stale_series",
     [](const GpuContext& c) { return c.d.health ? json(c.d.health->StaleSeries()) : json(0); }},
    {"band",
     [](const GpuContext& c) {
       return c.band.Known() ? ObjectOf(c.band, kBandFields) : json(nullptr);
     }},
    {"pairs",
     [](const GpuContext& c) {
       return c.d.health
                  ? ListOf(
                        c.d.health->verdicts,
                        [](const core::PairVerdict& v) -> const core::PairVerdict& { return v; },
                        kPairFields)
                  : json::array();
     }},
    {"series", SeriesOf},
    {"headline",
     [](const GpuContext& c) { return c.d.health ? Headline(*c.d.health) : json(nullptr); }},
    {"causes", CausesOf},
    {"schedule",
     [](const GpuContext& c) {
       return c.d.schedule ? ObjectOf(ScheduleContext{*c.d.schedule, c.daemon}, kScheduleFields)
                           : json(nullptr);
     }},
    {"link", [](const GpuContext& c) { return ObjectOf(c.d, kLinkFields); }},
    {"contention", [](const GpuContext& c) { return ObjectOf(c.d, kContentionFields); }},
    {"probes",
     [](const GpuContext& c) {
       return ListOf(
           c.d.probes,
           [](const auto& p) {
             return ProbeContext{p.first, p.second};
           },
           kProbeFields);
     }},
    {"evidence",
     [](const GpuContext& c) {
       return c.d.evidence ? ObjectOf(*c.d.evidence, kEvidenceLinkFields) : json(nullptr);
     }},
};

struct DocumentContext {
  const DaemonStatus& daemon;
  const ConfigLoad& load;
  // Every GPU's verdict, as `gpus` was written (before `verdict`, in name order): the
  // node's follows from them (core::NodeVerdict).
  const std::vector<DeviceVerdict>& verdicts;
  std::chrono::system_clock::time_point now;
  json& incidents;  // newest first
};

// `gpus` is written apart (WriteDocument): its row stands for its place in the document.
constexpr Field<DocumentContext> kDocumentFields[] = {
    {"version", [](const DocumentContext&) { return json(kStatusVersion); }},
    {"xferd_version", [](const DocumentContext&) { return json(kVersion); }},
    {"time", [](const DocumentContext& c) { return json(core::FormatUtcTime(c.now)); }},
    {"verdict",
     [](const DocumentContext& c) {
       // A host with no GPU yet is pending.
       return json(core::ToString(c.verdicts.empty() ? DeviceVerdict::kPending
                                                     : core::NodeVerdict(c.verdicts)));
     }},
    {"summary", [](const DocumentContext& c) { return json(Text(c.daemon.summary)); }},
    {"daemon",
     [](const DocumentContext& c) {
       return ObjectOf(DaemonContext{c.daemon, c.load}, kDaemonFields);
     }},
    {"gpus", [](const DocumentContext&) { return json::array(); }},
    {"incidents", [](const DocumentContext& c) { return std::move(c.incidents); }},
    {"evidence",
     [](const DocumentContext& c) { return ObjectOf(c.daemon.evidence, kEvidenceFields); }},
};

void Write(const json& value, std::string& out) {
  out += value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The document's text: its fields in the order a JSON object is written (by name), `gpus`
// as each GPU was written (Render: one at a time, so that the tree of one GPU is held at a
// time, never the whole document's: a 64-GPU host's document is ~1.3 MB of text and its
// tree several times that).
// `gpus` appends the GPUs' objects to `out`, straight into the document's text (no second
// copy of the largest part); `reserve` is what the text is expected to take (the last
// document's size), so that it is not grown by doubling either.
void WriteDocument(const DocumentContext& c, const std::function<void(std::string&)>& gpus,
                   std::size_t reserve, std::string& out) {
  std::vector<const Field<DocumentContext>*> fields;
  for (const Field<DocumentContext>& f : kDocumentFields) fields.push_back(&f);
  std::sort(fields.begin(), fields.end(),
            [](auto* a, auto* b) { return std::string_view(a->name) < b->name; });
  out.reserve(reserve + 16384);
  out += '{';
  for (const Field<DocumentContext>* f : fields) {
    if (out.size() > 1) out += ',';
    Write(json(f->name), out);
    out += ':';
    if (std::string_view(f->name) == "gpus") {
      out += '[';
      gpus(out);
      out += ']';
    } else {
      Write(f->make(c), out);
    }
  }
  out += "}\n";
}
}  // namespace

StatusBoard::StatusBoard(const core::IncidentLog& incidents) : incidents_(incidents) {}

void StatusBoard::SetDevice(const probes::DeviceInfo& device) {
  std::lock_guard lock(mutex_);
  ++generation_;
  devices_[device.index].info = device;
}

void StatusBoard::RecordLinkPath(int gpu, const probes::LinkPath& path) {
  std::lock_guard lock(mutex_);
  ++generation_;
  devices_[gpu].path = path;
}

void StatusBoard::RecordSample(const probes::DeviceInfo& device,
                               const probes::ProbeSample& sample) {
  const auto now = system_clock::now();
  std::lock_guard lock(mutex_);
  ++generation_;
  GpuRecord& d = devices_[device.index];
  const bool ok = sample.status == probes::ProbeStatus::kOk;
  GpuRecord::ProbeRecord& p =
      d.probes[{sample.spec.mode, sample.spec.direction, sample.spec.size_bytes}];
  p.last_run = now;
  p.result = ok && sample.Contended() ? ProbeResult::kContended : ResultOf(sample.status);
  p.message = ok ? std::string() : Text(sample.message);
  d.last_probe = sample.spec;
  if (sample.instance) d.probed_through = sample.instance->gpu_instance_id;
  d.last_contention = sample.contention.state;
  if (ok) {
    d.traffic_readable = sample.traffic.has_value();
    if (sample.traffic) {
      d.foreign_h2d = sample.contention.foreign_h2d_bytes_per_s;
      d.foreign_d2h = sample.contention.foreign_d2h_bytes_per_s;
    }
  }
  // As xferd_probe_last_success_timestamp_seconds: an uncontended reading with durations.
  if (p.result == ProbeResult::kOk && !sample.durations_s.empty()) p.last_success = now;
}

void StatusBoard::RecordSkipped(int gpu, const probes::ProbeSpec& spec, ProbeResult result) {
  const auto now = system_clock::now();
  std::lock_guard lock(mutex_);
  ++generation_;
  GpuRecord::ProbeRecord& p = devices_[gpu].probes[{spec.mode, spec.direction, spec.size_bytes}];
  p.last_run = now;
  p.result = result;
  p.message = result == ProbeResult::kTimeout ? "no answer past its deadline (a hung probe)" : "";
}

void StatusBoard::RecordHealth(const core::DeviceHealth& health, DeviceVerdict verdict, bool busy) {
  std::lock_guard lock(mutex_);
  ++generation_;
  GpuRecord& d = devices_[health.gpu];
  d.health = health;
  d.verdict = verdict;
  d.busy = busy;
  // Each series' judged reading into its ring; the rings of series no longer planned go.
  std::map<GpuRecord::ProbeKey, RecentReadings> recent;
  for (const core::SeriesHealth& s : health.series) {
    const GpuRecord::ProbeKey key{s.mode, s.direction, s.size_bytes};
    auto it = d.recent.find(key);
    RecentReadings& ring =
        recent.emplace(key, it == d.recent.end() ? RecentReadings{} : std::move(it->second))
            .first->second;
    if (s.measured_at && s.median_bytes_per_s > 0) ring.Add(*s.measured_at, s.median_bytes_per_s);
  }
  d.recent = std::move(recent);
}

void StatusBoard::RecordConfigLoad(bool reload, bool successful, system_clock::time_point time,
                                   const std::string& error) {
  std::lock_guard lock(mutex_);
  ++generation_;
  if (reload) ++config_load_.reloads;
  config_load_.successful = successful;
  config_load_.time = time;
  config_load_.error = successful ? std::string() : error;
}

void RecentReadings::Add(core::SteadyTime at, double bytes_per_s) {
  if (count_ > 0 && (*this)[count_ - 1].at == at) return;
  ring_[next_] = {at, bytes_per_s};
  next_ = (next_ + 1) % kRecentReadings;
  count_ = std::min(count_ + 1, kRecentReadings);
}

void StatusBoard::OnLinkErrors(const probes::DeviceInfo& device,
                               const core::LinkErrorReading& reading) {
  RecordLinkErrors(device, reading);
}

void StatusBoard::OnLinkWatch(const probes::DeviceInfo& device, const core::LinkWatchState& state) {
  RecordLinkWatch(device.index, state);
}

void StatusBoard::OnJudged(const core::GpuJudgement& j) {
  RecordHealth(j.health, j.verdict, j.busy);
  if (j.cycle == nullptr || j.confirmation) return;
  RecordSchedule(j.cycle->device.index, {j.cycle->allowance_s, core::AllowanceCapacity(j.settings),
                                         j.settings.burst_reserve_s, j.settings.max_duty_cycle,
                                         j.cycle->held_back, j.cycle->outlook});
}

void StatusBoard::RecordSchedule(int gpu, GpuSchedule schedule) {
  std::lock_guard lock(mutex_);
  devices_[gpu].schedule = std::move(schedule);
}

void StatusBoard::RecordLinkWatch(int gpu, const core::LinkWatchState& state) {
  std::lock_guard lock(mutex_);
  devices_[gpu].link_watch = state;
}

void StatusBoard::RecordLinkErrors(const probes::DeviceInfo& device,
                                   const core::LinkErrorReading& reading) {
  std::vector<LinkErrorCounter> counters;
  for (const core::LinkErrorDevice& d : reading.aer) {
    for (probes::AerClass c : probes::kAllAerClasses) {
      const auto i = static_cast<std::size_t>(c);
      auto add = [&](std::string_view file, const std::optional<std::uint64_t>& value) {
        counters.push_back({d.read.bdf, std::string(file), "aer", std::string(probes::ToString(c)),
                            d.readable && value.has_value(), value,
                            d.problem.empty() ? "not in this device's files" : d.problem});
      };
      add(probes::DeviceFileOf(c), d.read.device[i]);
      if (d.read.root_port) add(probes::RootPortFileOf(c), d.read.rootport[i]);
    }
  }
  counters.push_back({device.pci_bus_id, "nvml_pcie_replay", "nvml_replay", "",
                      reading.replays_readable && reading.replays.has_value(), reading.replays,
                      reading.replays_problem});
  std::lock_guard lock(mutex_);
  ++generation_;
  devices_[device.index].link_errors = std::move(counters);
}

void StatusBoard::RecordEvidence(int gpu, EvidenceLink link) {
  std::lock_guard lock(mutex_);
  ++generation_;
  devices_[gpu].evidence = std::move(link);
}

std::string StatusBoard::Render(const DaemonStatus& daemon, system_clock::time_point now) const {
  json incidents = json::array();
  const std::vector<core::Incident> log = incidents_.Incidents();
  for (auto it = log.rbegin(); it != log.rend(); ++it)
    incidents.push_back(core::IncidentToJson(*it));

  std::vector<DeviceVerdict> verdicts;
  std::string out;
  std::lock_guard lock(mutex_);
  // The node's verdict is what its GPUs' give, always (xferd health checks it): during the
  // first cycle a GPU already judged counts as judged, the rest are pending.
  const auto gpus = [&](std::string& text) {
    bool first = true;
    for (const auto& [index, d] : devices_) {
      // A GPU before its first cycle is pending whatever the log said.
      const DeviceVerdict verdict = d.health ? d.verdict : DeviceVerdict::kPending;
      verdicts.push_back(verdict);
      const GpuContext gpu{index, d, verdict, d.health ? d.health->band : core::ExpectedBand{},
                           daemon};
      if (!first) text += ',';
      first = false;
      Write(ObjectOf(gpu, kGpuFields), text);
    }
  };
  WriteDocument(DocumentContext{daemon, config_load_, verdicts, now, incidents}, gpus, last_size_,
                out);
  last_size_ = out.size();
  return out;
}

std::vector<std::string> StatusFieldNames() {
  std::vector<std::string> names;
  NamesOf("", kDocumentFields, names);
  NamesOf("daemon.", kDaemonFields, names);
  NamesOf("daemon.freshness.", kFreshnessFields, names);
  NamesOf("daemon.reload.", kReloadFields, names);
  NamesOf("gpus[].", kGpuFields, names);
  NamesOf("gpus[].band.", kBandFields, names);
  NamesOf("gpus[].pairs[].", kPairFields, names);
  NamesOf("gpus[].series[].", kSeriesFields, names);
  NamesOf("gpus[].causes[].", kCauseFields, names);
  NamesOf("gpus[].schedule.", kScheduleFields, names);
  NamesOf("gpus[].schedule.series[].", kOutlookFields, names);
  NamesOf("gpus[].link.", kLinkFields, names);
  NamesOf("gpus[].link.errors.", kErrorsFields, names);
  NamesOf("gpus[].link.errors.counters[].", kCounterFields, names);
  NamesOf("gpus[].contention.", kContentionFields, names);
  NamesOf("gpus[].contention.last_probe.", kLastProbeFields, names);
  NamesOf("gpus[].probes[].", kProbeFields, names);
  NamesOf("gpus[].evidence.", kEvidenceLinkFields, names);
  NamesOf("evidence.", kEvidenceFields, names);
  return names;
}

}  // namespace xferd::exporter
