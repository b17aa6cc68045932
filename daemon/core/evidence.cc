#include "core/evidence.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>

#include "core/band.h"
#include "core/fault_codes.h"
#include "platform/build_info.h"
#include "platform/command.h"
#include "platform/files.h"
#include "platform/printable.h"

namespace xferd::core {
namespace {

using nlohmann::json;
using std::chrono::system_clock;

// Outside text in a record (sysfs, a driver's message, lspci's output) is printable and
// bounded: the record stays valid UTF-8 and within its size.
constexpr std::size_t kTextBytes = 300;

std::string Text(std::string_view text, std::size_t bytes = kTextBytes) {
  return platform::Printable(text, bytes);
}

json Rate(double bytes_per_s) {
  return bytes_per_s > 0 && std::isfinite(bytes_per_s) ? json(bytes_per_s) : json(nullptr);
}

json Link(int gen, int width) {
  return {{"generation", gen > 0 ? json(gen) : json(nullptr)},
          {"width", width > 0 ? json(width) : json(nullptr)}};
}

// Each hop of the path: its link as trained (state) and what its ends can do (capability).
json PathJson(const probes::LinkPath& path) {
  json hops = json::array();
  for (const probes::PcieLink& l : path.links) {
    hops.push_back(
        {{"bdf", Text(l.bdf)},
         {"other_end_bdf", l.other_end_bdf.empty() ? json(nullptr) : json(Text(l.other_end_bdf))},
         {"current", Link(l.current_gen, l.current_width)},
         {"max", Link(l.max_gen, l.max_width)},
         {"other_end_max", Link(l.other_end_max_gen, l.other_end_max_width)},
         {"link_max", Link(l.LinkMaxGen(), l.LinkMaxWidth())},
         {"current_bytes_per_second", Rate(l.CurrentBytesPerSecond())},
         {"link_max_bytes_per_second", Rate(l.LinkMaxBytesPerSecond())},
         {"downtrained", l.Downtrained()},
         {"capped_by_other_end", l.CappedByOtherEnd()}});
  }
  return {{"pcie", path.pcie},
          {"c2c", path.c2c},
          {"numa_node", path.numa_node >= 0 ? json(path.numa_node) : json(nullptr)},
          {"iommu_type", path.iommu_type.empty() ? json(nullptr) : json(Text(path.iommu_type))},
          {"note", Text(path.note)},
          {"hops", std::move(hops)}};
}

json AerCounts(const std::array<std::optional<std::uint64_t>, 3>& counts) {
  json out = json::object();
  for (probes::AerClass c : probes::kAllAerClasses) {
    const auto& v = counts[static_cast<std::size_t>(c)];
    out[std::string(probes::ToString(c))] = v ? json(*v) : json(nullptr);
  }
  return out;
}

// The path's error counters as one reading judged them.
json LinkErrorsJson(const LinkErrorReading& r) {
  json devices = json::array();
  for (const LinkErrorDevice& d : r.aer) {
    json grown = json::object();
    for (probes::AerClass c : probes::kAllAerClasses) {
      grown[std::string(probes::ToString(c))] = d.grown[static_cast<std::size_t>(c)];
    }
    json kinds = json::array();
    for (const probes::AerKind& k : d.kinds_grown) {
      kinds.push_back({{"kind", Text(k.name, 80)}, {"grown", k.count}});
    }
    devices.push_back(
        {{"bdf", Text(d.read.bdf)},
         {"readable", d.readable},
         {"problem", Text(d.problem)},
         {"aer", AerCounts(d.read.device)},
         {"aer_rootport", d.read.root_port ? AerCounts(d.read.rootport) : json(nullptr)},
         {"grown", std::move(grown)},
         {"kinds_grown", std::move(kinds)}});
  }
  return {{"devices", std::move(devices)},
          {"replays", r.replays ? json(*r.replays) : json(nullptr)},
          {"replays_readable", r.replays_readable},
          {"replays_problem", Text(r.replays_problem)},
          {"replays_grown", r.replays_grown},
          {"interval_seconds", r.interval_s}};
}

json GrowthJson(const LinkErrorGrowth& g) {
  json aer = json::object();
  for (probes::AerClass c : probes::kAllAerClasses) {
    aer[std::string(probes::ToString(c))] = g.aer[static_cast<std::size_t>(c)];
  }
  return {{"window_seconds", g.window_s},
          {"replays", g.replays},
          {"aer", std::move(aer)},
          {"worst_bdf", Text(g.worst_bdf)},
          {"worst_where", Text(g.worst_where)},
          {"significant", g.Significant()}};
}

// The tokens of the kernel command line that set the IOMMU's mode: what decides whether
// the GPU's DMA is translated (iommu_translating).
json IommuCmdline(const std::filesystem::path& root) {
  const auto text = platform::TryReadFileBounded(root / "proc/cmdline", 8192);
  if (!text) return nullptr;
  json tokens = json::array();
  std::istringstream in(*text);
  std::string token;
  while (in >> token) {
    if (token.starts_with("iommu") || token.starts_with("intel_iommu") ||
        token.starts_with("amd_iommu") || token.starts_with("iommu.")) {
      tokens.push_back(Text(token, 80));
    }
  }
  return tokens;
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

// --- EvidenceStore ----------------------------------------------------------------------

EvidenceStore::EvidenceStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

std::string EvidenceStore::RecordName(system_clock::time_point time, int gpu) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  const int millis = static_cast<int>(ms - static_cast<long long>(seconds) * 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, "%03dZ-gpu%d.json", millis, std::max(0, gpu));
  return buf;
}

bool EvidenceStore::IsRecordName(std::string_view name) {
  // YYYYMMDDTHHMMSSmmmZ-gpuN.json
  constexpr std::string_view kGpu = "Z-gpu", kJson = ".json";
  if (name.size() < 18 + kGpu.size() + 1 + kJson.size() || name.size() > 40) return false;
  for (std::size_t i = 0; i < 18; ++i) {
    const char c = name[i];
    if (i == 8 ? c != 'T' : (c < '0' || c > '9')) return false;
  }
  if (name.substr(18, kGpu.size()) != kGpu || !name.ends_with(kJson)) return false;
  const std::string_view digits =
      name.substr(18 + kGpu.size(), name.size() - 18 - kGpu.size() - kJson.size());
  return !digits.empty() && digits.size() <= 7 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<int> EvidenceStore::GpuOf(std::string_view name) {
  if (!IsRecordName(name)) return std::nullopt;
  const std::string_view digits = name.substr(23, name.size() - 23 - 5);
  int gpu = 0;
  for (char c : digits) gpu = gpu * 10 + (c - '0');
  return gpu;
}

std::vector<EvidenceStore::Entry> EvidenceStore::List() const {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!IsRecordName(name)) continue;
    // lstat: a link named as a record is not one, whatever it points at.
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({name, *GpuOf(name), static_cast<std::uintmax_t>(st.st_size)});
  }
  // The name starts with the time: newest first.
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name > b.name; });
  return out;
}

std::string EvidenceStore::Read(std::string_view name) const {
  // A little over the bound: a record as written is within it.
  return platform::ReadFileBounded(dir_ / std::string(name), kEvidenceRecordBytes + 4096,
                                   "evidence record", platform::Secrecy::kPublic,
                                   platform::Links::kRefuse);
}

std::size_t EvidenceStore::RemoveAbandoned() const {
  return platform::RemoveAbandonedTempFiles(
      dir_, [](std::string_view name) { return IsRecordName(name); });
}

void EvidenceStore::Prepare() const {
  struct stat st {};
  if (::lstat(dir_.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      throw platform::FileError("cannot write", "evidence record", dir_,
                                "the evidence directory is a symbolic link, which xferd never "
                                "writes through",
                                "remove the link; xferd makes the directory itself", 0);
    }
    if (!S_ISDIR(st.st_mode)) {
      throw platform::FileError("cannot write", "evidence record", dir_,
                                "something other than a directory is in its place",
                                "remove it; xferd makes the directory itself", ENOTDIR);
    }
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_.parent_path(), ec);
  if (::mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST) {
    const int error = errno;
    throw platform::FileError("cannot write", "evidence record", dir_,
                              std::string("mkdir: ") + std::strerror(error),
                              "make the state directory writable for xferd's user "
                              "(systemd: StateDirectory=xferd)",
                              error);
  }
}

std::vector<std::string> EvidenceStore::Prune(std::size_t keep) const {
  std::vector<std::string> removed;
  const std::vector<Entry> records = List();
  for (std::size_t i = keep; i < records.size(); ++i) {
    if (::unlink((dir_ / records[i].name).c_str()) == 0) removed.push_back(records[i].name);
  }
  return removed;
}

// --- EvidenceKeeper ---------------------------------------------------------------------

EvidenceKeeper::EvidenceKeeper(EvidenceOptions options,
                               std::function<void(const EvidenceWritten&)> on_done)
    : options_(std::move(options)), store_(options_.dir), on_done_(std::move(on_done)) {
  if (!options_.write) {
    options_.write = [](const std::filesystem::path& path, std::string_view content) {
      platform::WriteFileAtomically(
          path, content,
          {"evidence record", 0640, "[daemon] state_dir", "systemd: StateDirectory=xferd"});
    };
  }
}

EvidenceKeeper::~EvidenceKeeper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::size_t EvidenceKeeper::Start() {
  const std::size_t removed = store_.RemoveAbandoned();
  if (!writer_.joinable()) writer_ = std::thread([this] { WriterLoop(); });
  return removed;
}

void EvidenceKeeper::Observe(const CycleObservation& obs, const DeviceHealth& health,
                             const Incident* incident) {
  Gpu& gpu = gpus_[obs.device.uuid];
  const system_clock::time_point at =
      obs.at_wall == system_clock::time_point{} ? system_clock::now() : obs.at_wall;
  // Each reading of the cycle; the last of each series carries the verdict's judgement.
  for (std::size_t i = 0; i < obs.samples.size(); ++i) {
    const probes::ProbeSample& s = obs.samples[i];
    const SeriesKey key{s.spec.mode, s.spec.direction, s.spec.size_bytes};
    bool last = true;
    for (std::size_t j = i + 1; j < obs.samples.size(); ++j) {
      const probes::ProbeSpec& o = obs.samples[j].spec;
      if (SeriesKey{o.mode, o.direction, o.size_bytes} == key) last = false;
    }
    Reading r{at, s.status, s.MedianBandwidth(), std::nullopt, s.Contended(), obs.confirmation};
    if (last && s.status == probes::ProbeStatus::kOk && !s.Contended()) {
      for (const SeriesHealth& h : health.series) {
        if (h.mode == s.spec.mode && h.direction == s.spec.direction &&
            h.size_bytes == s.spec.size_bytes) {
          r.bad = h.Bad();
        }
      }
    }
    std::vector<Reading>& ring = gpu.readings[key];
    if (ring.capacity() < kEvidenceReadingsPerSeries) ring.reserve(kEvidenceReadingsPerSeries);
    if (ring.size() == kEvidenceReadingsPerSeries) ring.erase(ring.begin());
    ring.push_back(r);
  }
  if (obs.link_error_reading) {
    gpu.link_errors.emplace_back(at, *obs.link_error_reading);
    while (gpu.link_errors.size() > kEvidenceLinkErrorReadings) gpu.link_errors.pop_front();
  }
  if (incident == nullptr || incident->to != DeviceVerdict::kDegraded) return;

  Job job;
  job.what.gpu = obs.device.index;
  job.what.uuid = obs.device.uuid;
  job.what.incident_time = incident->time;
  job.what.name = EvidenceStore::RecordName(incident->time, obs.device.index);
  job.what.path = store_.dir() / job.what.name;
  if (!incident->causes.empty()) {
    job.what.code = incident->causes.front().code;
    job.what.cause = incident->causes.front().cause;
  }
  job.record = Snapshot(obs, health, *incident, gpu);
  job.simulated = obs.device.simulated;
  if (obs.device.simulated) {
    job.lspci_not_run = "a simulated device: its bus ids are not this host's devices";
  } else if (!options_.lspci) {
    job.lspci_not_run = "lspci is not installed (Debian/Ubuntu: the pciutils package)";
  } else {
    // The GPU and each device above it, once each, in the path's order.
    const auto add = [&](const std::string& bdf) {
      if (!bdf.empty() &&
          std::find(job.lspci_bdfs.begin(), job.lspci_bdfs.end(), bdf) == job.lspci_bdfs.end()) {
        job.lspci_bdfs.push_back(bdf);
      }
    };
    add(obs.device.pci_bus_id);
    for (const probes::PcieLink& l : obs.link_path.links) {
      add(l.bdf);
      add(l.other_end_bdf);
    }
    if (job.lspci_bdfs.empty()) job.lspci_not_run = "the GPU has no PCIe path to show";
  }
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() < kEvidenceQueue) {
      queue_.push_back(std::move(job));
      wake_.notify_one();
      return;
    }
  }
  // The writer is behind (a slow disk, GPUs flipping together): this one is dropped.
  EvidenceWritten dropped = job.what;
  dropped.problem = "the writer is behind (" + std::to_string(kEvidenceQueue) +
                    " records waiting): this one is dropped";
  Done(dropped);
}

json EvidenceKeeper::Snapshot(const CycleObservation& obs, const DeviceHealth& health,
                              const Incident& incident, const Gpu& gpu) const {
  const probes::DeviceInfo& d = obs.device;
  json record = {{"evidence_version", kEvidenceVersion},
                 {"xferd_version", kVersion},
                 {"gpu",
                  {{"index", d.index},
                   {"uuid", Text(d.uuid)},
                   {"name", Text(d.name)},
                   {"pci_bus_id", Text(d.pci_bus_id)},
                   {"driver_version", Text(d.driver_version)},
                   {"simulated", d.simulated},
                   {"integrated", d.integrated},
                   {"c2c", d.c2c}}},
                 {"incident", IncidentToJson(incident)}};

  // The verdict: the worst series and the cause that leads, with its code.
  const SeriesHealth* worst = WorstDegraded(health);
  const std::optional<DiagnosisCause> lead = LeadingCause(health);
  const FaultCode& fault = lead ? FaultOf(*lead) : DegradedNoCause();
  json verdict = {{"code", fault.Code()},
                  {"action", ToString(fault.action)},
                  {"cause", lead ? json(ToString(*lead)) : json(nullptr)}};
  if (worst != nullptr) {
    verdict["mode"] = probes::ToString(worst->mode);
    verdict["direction"] = probes::ToString(worst->direction);
    verdict["size"] = probes::FormatSize(worst->size_bytes);
    verdict["below"] = worst->below_band       ? json("band")
                       : worst->below_baseline ? json("baseline")
                                               : json(nullptr);
  }
  record["verdict"] = std::move(verdict);
  json causes = json::array();
  for (const Diagnosis& c : health.diagnoses) {
    const FaultCode& f = FaultOf(c.cause);
    causes.push_back({{"cause", ToString(c.cause)},
                      {"code", f.Code()},
                      {"action", ToString(f.action)},
                      {"fault", !IsNote(c.cause)},
                      {"detail", Text(c.detail)},
                      {"advice", Text(c.advice, 1000)}});
  }
  record["causes"] = std::move(causes);
  record["band"] = health.band.Known()
                       ? json{{"lower_bytes_per_second", health.band.lower_bytes_per_s},
                              {"upper_bytes_per_second", health.band.upper_bytes_per_s},
                              {"source", Text(health.band.source)}}
                       : json(nullptr);

  // The readings that flipped it: each degraded series' last readings, its streak marked.
  json streaks = json::array();
  system_clock::time_point streak_start = incident.time;
  for (const SeriesHealth& s : health.series) {
    if (!s.degraded) continue;
    const auto it = gpu.readings.find({s.mode, s.direction, s.size_bytes});
    std::vector<bool> in_streak;
    json readings = json::array();
    if (it != gpu.readings.end()) {
      const std::vector<Reading>& ring = it->second;
      in_streak.assign(ring.size(), false);
      // Back from the newest: the bad readings of the streak, failed and contended ones
      // passed over (they neither extend nor break it), up to the first good one.
      int left = s.bad_streak;
      for (std::size_t k = ring.size(); k-- > 0 && left > 0;) {
        if (ring[k].bad == std::optional<bool>(false)) break;
        if (ring[k].bad == std::optional<bool>(true)) {
          in_streak[k] = true;
          --left;
          streak_start = std::min(streak_start, ring[k].time);
        }
      }
      for (std::size_t k = 0; k < ring.size(); ++k) {
        const Reading& r = ring[k];
        readings.push_back({{"time", FormatUtcTime(r.time)},
                            {"status", probes::ToString(r.status)},
                            {"bandwidth_bytes_per_second", Rate(r.bytes_per_s)},
                            {"bad", r.bad ? json(*r.bad) : json(nullptr)},
                            {"contended", r.contended},
                            {"confirmation", r.confirmation},
                            {"in_streak", static_cast<bool>(in_streak[k])}});
      }
    }
    const bool held = HeldToBand(s.mode, s.direction, s.size_bytes, health.band);
    streaks.push_back({{"mode", probes::ToString(s.mode)},
                       {"direction", probes::ToString(s.direction)},
                       {"size", probes::FormatSize(s.size_bytes)},
                       {"bad_streak", s.bad_streak},
                       {"below_band", s.below_band},
                       {"below_baseline", s.below_baseline},
                       {"band_lower_bytes_per_second",
                        held && health.band.Known()
                            ? json(ModeBand(health.band, s.mode, s.direction).lower_bytes_per_s)
                            : json(nullptr)},
                       {"baseline_bytes_per_second", Rate(s.BaselineReference())},
                       {"baseline_of", s.peer_baseline_bytes_per_s > 0 ? "peers" : "own"},
                       {"readings", std::move(readings)}});
  }
  record["streak"] = std::move(streaks);

  // Each hop's link state and capability; NUMA and IOMMU.
  record["link"] = PathJson(obs.link_path);
  int host_node = obs.host_numa_node;
  std::string placement;
  for (const probes::ProbeSample& s : obs.samples) {
    if (s.status != probes::ProbeStatus::kOk) continue;
    if (host_node < 0) host_node = s.host_numa_node;
    if (placement.empty()) placement = s.host_placement;
  }
  record["placement"] = {
      {"gpu_numa_node",
       obs.link_path.numa_node >= 0 ? json(obs.link_path.numa_node) : json(nullptr)},
      {"host_buffer_numa_node", host_node >= 0 ? json(host_node) : json(nullptr)},
      {"host_placement_problem", Text(placement)}};

  // The counters before the streak (the newest reading older than its first bad reading)
  // and during it (the newest).
  json errors = nullptr;
  if (!gpu.link_errors.empty()) {
    const auto& during = gpu.link_errors.back();
    const std::pair<system_clock::time_point, LinkErrorReading>* before = nullptr;
    for (const auto& r : gpu.link_errors) {
      if (r.first < streak_start) before = &r;
    }
    errors = {{"before", before ? json{{"time", FormatUtcTime(before->first)},
                                       {"reading", LinkErrorsJson(before->second)}}
                                : json(nullptr)},
              {"during",
               {{"time", FormatUtcTime(during.first)}, {"reading", LinkErrorsJson(during.second)}}},
              {"growth", GrowthJson(obs.link_errors)}};
  }
  record["link_errors"] = std::move(errors);
  return record;
}

void EvidenceKeeper::WriterLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      busy_ = false;
      idle_.notify_all();
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Write(job);
  }
}

void EvidenceKeeper::Write(Job& job) {
  json& record = job.record;
  record["written_at"] = FormatUtcTime(system_clock::now());
  record["name"] = job.what.name;

  // The host: the kernel's IOMMU settings and the driver's version as the kernel has it.
  json host = {{"iommu_cmdline", IommuCmdline(options_.host_root)}};
  if (!job.simulated) {
    // A sysfs attribute says it holds 4096 bytes, whatever it holds: a smaller cap refused
    // it (the H200 host's record said null).
    const auto module =
        platform::TryReadFileBounded(options_.host_root / "sys/module/nvidia/version", 4096);
    host["nvidia_module_version"] = module ? json(Text(Trimmed(*module), 80)) : json(nullptr);
  }
  record["host"] = std::move(host);

  // lspci -vvv of each device of the path: argv as is (no shell), bounded in time and size.
  json lspci = {{"run", job.lspci_bdfs.size() > 0 && job.lspci_not_run.empty()},
                {"reason", job.lspci_not_run},
                {"program", options_.lspci ? json(options_.lspci->string()) : json(nullptr)},
                {"devices", json::array()}};
  const auto deadline = std::chrono::steady_clock::now() + options_.lspci_timeout;
  for (const std::string& bdf : job.lspci_bdfs) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    json device = {{"bdf", Text(bdf)}};
    // Less than this left is not worth a start: lspci needs some to read the config space.
    if (left < std::chrono::milliseconds(100) || stop_) {
      device["error"] =
          stop_ ? "xferd is stopping" : "not run: the record's time for lspci is spent";
      lspci["devices"].push_back(std::move(device));
      continue;
    }
    const platform::CommandResult r = platform::RunCommand(
        {options_.lspci->string(), "-vvv", "-s", bdf}, left, options_.lspci_bytes, &stop_);
    device["exit_code"] = r.exit_code ? json(*r.exit_code) : json(nullptr);
    device["seconds"] = r.seconds;
    device["truncated"] = r.truncated;
    device["error"] = Text(r.error);
    // lspci's text is the host's own: kept as is but printable (bytes outside UTF-8
    // escaped), and within the per-device cap.
    device["output"] = platform::PrintableText(r.output, options_.lspci_bytes);
    lspci["devices"].push_back(std::move(device));
  }
  record["lspci"] = std::move(lspci);
  record["bounds"] = {{"max_bytes", options_.max_bytes},
                      {"records_kept", options_.keep},
                      {"lspci_bytes_per_device", options_.lspci_bytes},
                      {"lspci_seconds", options_.lspci_timeout.count() / 1000.0},
                      {"readings_per_series", kEvidenceReadingsPerSeries}};

  std::string text = record.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  if (text.size() > options_.max_bytes) {
    // Over the bound (an odd path, many series): lspci's text goes first, then the readings.
    for (json& device : record["lspci"]["devices"]) device["output"] = "(cut: record size bound)";
    text = record.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  }
  if (text.size() > options_.max_bytes) {
    for (json& s : record["streak"]) s["readings"] = json::array();
    record["cut"] = "readings left out to keep the record within its bound";
    text = record.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  }
  EvidenceWritten what = job.what;
  if (text.size() > options_.max_bytes) {
    what.problem = "the record would hold " + std::to_string(text.size()) + " bytes, over its " +
                   std::to_string(options_.max_bytes) + "-byte bound";
    Done(what);
    return;
  }
  try {
    store_.Prepare();
    options_.write(what.path, text);
    what.ok = true;
    what.bytes = text.size();
    what.pruned = store_.Prune(options_.keep);
  } catch (const std::exception& e) {
    what.problem = platform::Printable(e.what(), 1000);
  }
  Done(what);
}

void EvidenceKeeper::Done(const EvidenceWritten& what) {
  {
    std::lock_guard lock(mutex_);
    if (what.ok) {
      ++stats_.written;
    } else {
      ++stats_.dropped;
      stats_.last_problem = what.problem;
    }
  }
  if (on_done_) on_done_(what);
}

EvidenceKeeper::Stats EvidenceKeeper::GetStats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

bool EvidenceKeeper::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout, [&] { return queue_.empty() && !busy_; });
}

}  // namespace xferd::core
