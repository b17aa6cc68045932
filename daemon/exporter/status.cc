#include "exporter/status.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

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

json Errors(const std::optional<std::vector<LinkErrorCounter>>& counters) {
  if (!counters) {
    return {{"read", false},
            {"reason", "this xferd does not read the link's error counters"},
            {"counters", json::array()}};
  }
  json list = json::array();
  for (const LinkErrorCounter& c : *counters) {
    list.push_back({{"device", Text(c.device)},
                    {"counter", c.counter},
                    {"source", c.source},
                    {"class", c.aer_class.empty() ? json(nullptr) : json(c.aer_class)},
                    {"readable", c.readable},
                    {"value", c.value ? json(*c.value) : json(nullptr)},
                    {"reason", c.readable ? std::string() : Text(c.reason)}});
  }
  return {{"read", true}, {"reason", ""}, {"counters", std::move(list)}};
}

// Seconds from `from` to `to` on the daemon's clock; null when either is not known.
json Seconds(const std::optional<core::SteadyTime>& from,
             const std::optional<core::SteadyTime>& to) {
  if (!from || !to) return nullptr;
  return std::chrono::duration<double>(*to - *from).count();
}

json Series(const core::SeriesHealth& s, const core::ExpectedBand& band,
            const std::optional<core::SteadyTime>& now) {
  const bool held = core::HeldToBand(s.mode, s.direction, s.size_bytes, band);
  json lower = nullptr;
  if (held && band.Known()) lower = core::ModeBand(band, s.mode, s.direction).lower_bytes_per_s;
  return {{"mode", probes::ToString(s.mode)},
          {"direction", probes::ToString(s.direction)},
          {"size", probes::FormatSize(s.size_bytes)},
          {"size_bytes", s.size_bytes},
          {"status", probes::ToString(s.status)},
          {"bandwidth_bytes_per_second", Rate(s.median_bytes_per_s)},
          {"held_to_band", held},
          {"band_lower_bytes_per_second", lower},
          {"baseline_bytes_per_second", Rate(s.baseline_bytes_per_s)},
          {"baseline_cycles", s.baseline_cycles},
          {"below_band", s.below_band},
          {"below_baseline", s.below_baseline},
          {"contended", s.contended},
          {"peer_baseline_bytes_per_second", Rate(s.peer_baseline_bytes_per_s)},
          {"bad_streak", s.bad_streak},
          {"good_streak", s.good_streak},
          {"degraded", s.degraded},
          {"stale", s.stale},
          {"headline", s.headline},
          {"measured_at",
           s.measured_wall ? json(core::FormatUtcTime(*s.measured_wall)) : json(nullptr)},
          {"age_seconds", Seconds(s.measured_at, now)}};
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
  Device& d = devices_[device.index];
  const bool ok = sample.status == probes::ProbeStatus::kOk;
  ProbeRecord& p = d.probes[{sample.spec.mode, sample.spec.direction, sample.spec.size_bytes}];
  p.last_run = now;
  p.result = ok && sample.Contended() ? ProbeResult::kContended : ResultOf(sample.status);
  p.message = ok ? std::string() : Text(sample.message);
  d.last_probe = sample.spec;
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
  ProbeRecord& p = devices_[gpu].probes[{spec.mode, spec.direction, spec.size_bytes}];
  p.last_run = now;
  p.result = result;
  p.message = result == ProbeResult::kTimeout ? "no answer past its deadline (a hung probe)" : "";
}

void StatusBoard::RecordHealth(const core::DeviceHealth& health, DeviceVerdict verdict, bool busy) {
  std::lock_guard lock(mutex_);
  ++generation_;
  Device& d = devices_[health.gpu];
  d.health = health;
  d.verdict = verdict;
  d.busy = busy;
}

void StatusBoard::RecordSchedule(int gpu, GpuSchedule schedule) {
  std::lock_guard lock(mutex_);
  devices_[gpu].schedule = std::move(schedule);
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
  json gpus = json::array();
  bool any_degraded = false, any_pending = false, any_stale = false;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [index, d] : devices_) {
      // A GPU before its first cycle is pending whatever the log said.
      const DeviceVerdict verdict = d.health ? d.verdict : DeviceVerdict::kPending;
      any_degraded = any_degraded || verdict == DeviceVerdict::kDegraded;
      any_pending = any_pending || verdict == DeviceVerdict::kPending;
      any_stale = any_stale || verdict == DeviceVerdict::kStale;
      json g = {{"gpu", index},
                {"uuid", Text(d.info.uuid)},
                {"name", Text(d.info.name)},
                {"pci_bus_id", Text(d.info.pci_bus_id)},
                {"simulated", d.info.simulated},
                {"verdict", core::ToString(verdict)}};
      const core::ExpectedBand band = d.health ? d.health->band : core::ExpectedBand{};
      g["band"] = band.Known() ? json{{"lower_bytes_per_second", band.lower_bytes_per_s},
                                      {"upper_bytes_per_second", band.upper_bytes_per_s},
                                      {"source", Text(band.source)}}
                               : json(nullptr);
      json pairs = json::array(), series = json::array(), causes = json::array();
      if (d.health) {
        for (const core::PairVerdict& v : d.health->verdicts) {
          pairs.push_back({{"mode", probes::ToString(v.mode)},
                           {"direction", probes::ToString(v.direction)},
                           {"degraded", v.degraded},
                           {"stale", v.stale}});
        }
        for (const core::SeriesHealth& s : d.health->series) {
          series.push_back(Series(s, band, daemon.now));
        }
        // Ranked (core::RankCauses): the cause that leads first, the notes last.
        const std::optional<core::DiagnosisCause> lead = core::LeadingCause(*d.health);
        for (const core::Diagnosis& c : d.health->diagnoses) {
          const core::FaultCode& fault = core::FaultOf(c.cause);
          causes.push_back({{"cause", core::ToString(c.cause)},
                            {"code", fault.Code()},
                            {"action", core::ToString(fault.action)},
                            {"fault", !core::IsNote(c.cause)},
                            {"leads", lead && *lead == c.cause},
                            {"detail", Text(c.detail)},
                            {"advice", Text(c.advice)}});
        }
      }
      g["stale_series"] = d.health ? json(d.health->StaleSeries()) : json(0);
      g["pairs"] = std::move(pairs);
      g["series"] = std::move(series);
      g["headline"] = d.health ? Headline(*d.health) : json(nullptr);
      g["causes"] = std::move(causes);
      // The GPU's code: its leading cause's when degraded, its state's when there is no
      // verdict to act on; null when ok (core/fault_codes.h).
      const core::FaultCode* fault = nullptr;
      if (verdict == DeviceVerdict::kDegraded) {
        const auto lead = d.health ? core::LeadingCause(*d.health) : std::nullopt;
        fault = lead ? &core::FaultOf(*lead) : &core::DegradedNoCause();
      } else if (verdict == DeviceVerdict::kPending) {
        fault = &core::FaultOf(core::NoVerdict::kPending);
      } else if (verdict == DeviceVerdict::kStale) {
        fault = &core::FaultOf(core::NoVerdict::kStale);
      }
      g["code"] = fault ? json(fault->Code()) : json(nullptr);
      g["action"] = fault ? json(core::ToString(fault->action)) : json(nullptr);

      json link = {
          {"host_link", probes::ToString(probes::HostLinkOf(d.info))},
          {"read", d.path.has_value()},
          {"pcie", d.path ? PcieOf(*d.path) : json(nullptr)},
          {"numa_node", d.path && d.path->numa_node >= 0 ? json(d.path->numa_node) : json(nullptr)},
          {"iommu", d.path ? json(Text(d.path->iommu_type)) : json(nullptr)}};
      link["errors"] = Errors(d.link_errors);
      g["link"] = std::move(link);

      json last = nullptr;
      if (d.last_probe) {
        last = {{"mode", probes::ToString(d.last_probe->mode)},
                {"direction", probes::ToString(d.last_probe->direction)},
                {"size", probes::FormatSize(d.last_probe->size_bytes)},
                {"state", probes::ToString(d.last_contention)}};
      }
      g["contention"] = {
          {"busy", d.busy},
          {"traffic_readable", d.traffic_readable ? json(*d.traffic_readable) : json(nullptr)},
          {"foreign_h2d_bytes_per_second", d.foreign_h2d ? json(*d.foreign_h2d) : json(nullptr)},
          {"foreign_d2h_bytes_per_second", d.foreign_d2h ? json(*d.foreign_d2h) : json(nullptr)},
          {"last_probe", std::move(last)}};

      json probes_list = json::array();
      for (const auto& [key, p] : d.probes) {
        const auto& [mode, direction, size] = key;
        probes_list.push_back(
            {{"mode", probes::ToString(mode)},
             {"direction", probes::ToString(direction)},
             {"size", probes::FormatSize(size)},
             {"last_run", core::FormatUtcTime(p.last_run)},
             {"result", ToString(p.result)},
             {"message", p.message},
             {"last_success",
              p.last_success ? json(core::FormatUtcTime(*p.last_success)) : json(nullptr)}});
      }
      g["probes"] = std::move(probes_list);

      json schedule = nullptr;
      if (d.schedule) {
        json list = json::array();
        for (const core::DeviceCycle::Outlook& o : d.schedule->series) {
          list.push_back({{"mode", probes::ToString(o.spec.mode)},
                          {"direction", probes::ToString(o.spec.direction)},
                          {"size", probes::FormatSize(o.spec.size_bytes)},
                          {"class", core::ToString(o.cls)},
                          {"held_back", o.held_back},
                          {"next_run_in_seconds", Seconds(daemon.now, o.next_run)}});
        }
        schedule = {{"allowance_seconds", d.schedule->allowance_s},
                    {"allowance_capacity_seconds", d.schedule->capacity_s},
                    {"burst_reserve_seconds", d.schedule->reserve_s},
                    {"max_duty_cycle", d.schedule->duty_cycle},
                    {"held_back", d.schedule->held_back},
                    {"series", std::move(list)}};
      }
      g["schedule"] = std::move(schedule);
      g["evidence"] = d.evidence
                          ? json{{"record", d.evidence->record},
                                 {"path", Text(d.evidence->path)},
                                 {"incident_time", core::FormatUtcTime(d.evidence->incident_time)},
                                 {"bytes", d.evidence->bytes}}
                          : json(nullptr);
      gpus.push_back(std::move(g));
    }
  }
  if (gpus.empty() || daemon.cycles == 0) any_pending = true;

  json incidents = json::array();
  const std::vector<core::Incident> log = incidents_.Incidents();
  for (auto it = log.rbegin(); it != log.rend(); ++it)
    incidents.push_back(core::IncidentToJson(*it));

  json doc = {{"version", kStatusVersion},
              {"xferd_version", kVersion},
              {"time", core::FormatUtcTime(now)},
              {"verdict", any_degraded  ? "degraded"
                          : any_pending ? "pending"
                          : any_stale   ? "stale"
                                        : "ok"},
              {"summary", Text(daemon.summary)},
              {"daemon",
               {{"healthy", daemon.healthy},
                {"reason", Text(daemon.reason)},
                {"cycles", daemon.cycles},
                {"uptime_seconds", daemon.uptime_s},
                {"last_cycle_age_seconds",
                 daemon.last_cycle_age_s ? json(*daemon.last_cycle_age_s) : json(nullptr)},
                {"stale_after_seconds", daemon.stale_after_s},
                {"interval_seconds", daemon.interval_s},
                {"consecutive_bad", daemon.consecutive_bad},
                {"freshness",
                 {{"headline_seconds", daemon.freshness.headline_s},
                  {"rotating_seconds", daemon.freshness.rotating_s},
                  {"degraded_seconds", daemon.freshness.degraded_s}}}}},
              {"gpus", std::move(gpus)},
              {"incidents", std::move(incidents)},
              {"evidence",
               {{"dir", Text(daemon.evidence.dir)},
                {"records_kept", daemon.evidence.keep},
                {"written", daemon.evidence.written},
                {"dropped", daemon.evidence.dropped},
                {"last_problem", Text(daemon.evidence.last_problem)}}}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace xferd::exporter
