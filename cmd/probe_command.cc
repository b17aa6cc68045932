// `xferd probe`: every selected probe once on every selected GPU, as a table or JSON.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "cmd/commands.h"
#include "config/config.h"
#include "platform/exit_codes.h"
#include "core/health.h"
#include "xferd/probes/cuda_backend.h"
#include "xferd/probes/sim_backend.h"
#include "xferd/probes/stats.h"
#include "xferd/probes/topology.h"

namespace xferd::cmd {

using namespace xferd::config;
using namespace xferd::core;
using namespace xferd::web;
namespace {

using probes::Direction;
using probes::ProbeSample;
using probes::ProbeSpec;
using probes::ProbeStatus;
using probes::TransferMode;

// A mistake in the flags: the message names it and the fix; exit 64.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Slower than this and a probe is taken for stuck: the deadline of one probe is the
// configured one, stretched for the sizes and iteration counts a user may ask for here.
constexpr double kSlowestPlausibleBytesPerSecond = 0.5e9;
// A backend that ignores its deadline (a hung driver call) is asked to stop this long after.
constexpr std::chrono::seconds kHangGrace{2};
constexpr auto kLinkPollInterval = std::chrono::milliseconds(5);
// Below this a transfer is dominated by its fixed latency (a few us), not the link: it
// says nothing about the band. At 4 MiB the floor costs under 5% even on Gen5 x16.
constexpr std::uint64_t kMinBandSizeBytes = 4ull << 20;

struct Plan {
  std::vector<std::pair<TransferMode, Direction>> pairs;
  std::vector<std::uint64_t> sizes;
  int iterations = 20;
  int warmup = 2;
  std::chrono::milliseconds deadline{5000};
  int streams = 4;
  std::uint64_t chunk_bytes = 1ull << 20;
};

struct Row {
  ProbeSample sample;
  std::optional<double> percent_of_link;
  std::string verdict;
  bool bad = false;
};

struct DeviceReport {
  probes::DeviceInfo info;
  probes::LinkPath path;
  probes::ExpectedBand band;
  std::vector<Row> rows;
  std::vector<Diagnosis> diagnoses;  // likely causes of what the rows show; usually none
};

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string ModeList() {
  std::string out;
  for (TransferMode mode : probes::kAllModes) {
    if (!out.empty()) out += ", ";
    out += probes::ToString(mode);
  }
  return out;
}

Plan MakePlan(const ProbeCommandOptions& options, const Config* config) {
  Plan plan;
  std::vector<TransferMode> modes;
  if (!options.modes.empty()) {
    for (const std::string& text : options.modes) {
      const auto mode = probes::ParseMode(Lower(text));
      if (!mode) {
        throw UsageError("unknown mode \"" + text + "\" in --mode; valid modes: " + ModeList());
      }
      if (std::find(modes.begin(), modes.end(), *mode) == modes.end()) modes.push_back(*mode);
    }
  } else if (config != nullptr) {
    modes = config->modes;
  } else {
    modes.assign(probes::kAllModes.begin(), probes::kAllModes.end());
  }
  const bool bidirectional = config == nullptr || config->bidirectional;
  for (const auto& [mode, direction] : probes::AllModeDirections()) {
    if (std::find(modes.begin(), modes.end(), mode) == modes.end()) continue;
    if (direction == Direction::kBidirectional && !bidirectional) continue;
    plan.pairs.emplace_back(mode, direction);
  }

  if (!options.sizes.empty()) {
    for (const std::string& text : options.sizes) {
      const auto size = probes::ParseSize(text);
      if (!size || *size == 0) {
        throw UsageError("bad transfer size \"" + text +
                         "\" in --size; write a positive size such as 4KiB, 64MiB or 1GiB");
      }
      plan.sizes.push_back(*size);
    }
  } else if (config != nullptr) {
    plan.sizes = config->sizes;
  } else {
    plan.sizes = {64ull << 20};
  }

  plan.iterations = options.iterations;
  plan.warmup = options.warmup;
  if (config != nullptr) {
    // Flags left at their defaults give way to the file.
    const ProbeCommandOptions defaults;
    if (options.iterations == defaults.iterations) plan.iterations = config->iterations;
    if (options.warmup == defaults.warmup) plan.warmup = config->warmup;
    plan.deadline = config->probe_deadline;
    plan.streams = config->streams;
    plan.chunk_bytes = config->chunk_bytes;
  }
  return plan;
}

ProbeSpec SpecFor(const Plan& plan, TransferMode mode, Direction direction, std::uint64_t size) {
  ProbeSpec spec;
  spec.mode = mode;
  spec.direction = direction;
  spec.size_bytes = size;
  spec.iterations = plan.iterations;
  spec.warmup = plan.warmup;
  spec.streams = plan.streams;
  spec.chunk_bytes = plan.chunk_bytes;
  const double bytes = static_cast<double>(size) * (plan.iterations + plan.warmup) *
                       (direction == Direction::kBidirectional ? 2 : 1);
  const auto stretched = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::ceil(bytes / kSlowestPlausibleBytesPerSecond * 1000)));
  spec.deadline = std::max(plan.deadline, stretched);
  return spec;
}

// Devices picked by --gpu (index or UUID), in the order given; every device when none.
std::vector<probes::DeviceInfo> SelectDevices(const std::vector<probes::DeviceInfo>& devices,
                                              const std::vector<std::string>& wanted) {
  if (wanted.empty()) return devices;
  std::vector<probes::DeviceInfo> out;
  for (const std::string& token : wanted) {
    const probes::DeviceInfo* match = nullptr;
    for (const auto& d : devices) {
      if (token == std::to_string(d.index) || Lower(token) == Lower(d.uuid)) match = &d;
    }
    if (match == nullptr) {
      std::string known;
      for (const auto& d : devices) {
        known += (known.empty() ? "" : ", ") + std::to_string(d.index) + " (" + d.uuid + ")";
      }
      throw UsageError("no GPU \"" + token +
                       "\" for --gpu; give an index or a UUID of one of: " + known);
    }
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const auto& d) { return d.index == match->index; });
    if (!seen) out.push_back(*match);
  }
  return out;
}

double NarrowestRate(const probes::LinkPath& path) {
  const probes::PcieLink* link = path.Narrowest();
  return link != nullptr ? link->CurrentBytesPerSecond() : 0.0;
}

// Runs one probe on its own thread. While it runs, `link` (if given) is read again and
// again and the widest reading kept: idle links train down, so a path read with no traffic
// would understate the link. A backend that overruns the deadline is asked to stop.
ProbeSample RunProbe(probes::TransferBackend& backend, int device, const ProbeSpec& spec,
                     probes::LinkPath* link) {
  std::stop_source stop;
  auto future = std::async(std::launch::async, [&backend, device, spec, token = stop.get_token()] {
    return backend.Run(device, spec, token);
  });
  const auto give_up_at = std::chrono::steady_clock::now() + spec.deadline + kHangGrace;
  bool asked_to_stop = false;
  bool read_once = false;
  while (future.wait_for(read_once ? kLinkPollInterval : std::chrono::milliseconds(0)) !=
         std::future_status::ready) {
    if (link != nullptr) {
      probes::LinkPath now = backend.ReadLinkPath(device);
      if (!read_once || NarrowestRate(now) > NarrowestRate(*link)) *link = std::move(now);
    }
    read_once = true;
    if (!asked_to_stop && std::chrono::steady_clock::now() > give_up_at) {
      stop.request_stop();
      asked_to_stop = true;
    }
  }
  if (link != nullptr && !read_once) *link = backend.ReadLinkPath(device);
  ProbeSample sample = future.get();
  if (asked_to_stop && sample.status == ProbeStatus::kError) {
    sample.status = ProbeStatus::kTimeout;
    sample.message = "no answer within the " + std::to_string(spec.deadline.count()) +
                     " ms deadline (hung device?); the probe was cancelled";
  }
  return sample;
}

Row Judge(ProbeSample sample, const probes::LinkPath& path, const probes::ExpectedBand& band) {
  Row row;
  const bool bidir = sample.spec.direction == Direction::kBidirectional;
  switch (sample.status) {
    case ProbeStatus::kUnsupported: row.verdict = "unsupported: " + sample.message; break;
    case ProbeStatus::kError:
      row.verdict = "error: " + sample.message;
      row.bad = true;
      break;
    case ProbeStatus::kTimeout:
      row.verdict = "timeout";
      row.bad = true;
      break;
    case ProbeStatus::kOk: {
      // The band is per direction; both directions at once are judged per direction.
      const double per_direction = sample.MedianBandwidth() / (bidir ? 2.0 : 1.0);
      if (const double rate = NarrowestRate(path); rate > 0) {
        row.percent_of_link = 100.0 * per_direction / rate;
      }
      if (!probes::IsLinkBound(sample.spec.mode, sample.spec.direction)) {
        row.verdict = "n/a (not link-bound)";
      } else if (!band.Known()) {
        row.verdict = "n/a (no expected band)";
      } else if (sample.spec.size_bytes < kMinBandSizeBytes) {
        row.verdict = "n/a (latency-bound size)";
      } else if (per_direction < band.lower_bytes_per_s) {
        row.verdict = "below band";
        row.bad = true;
      } else {
        row.verdict = "ok";
      }
      break;
    }
  }
  row.sample = std::move(sample);
  return row;
}

probes::ExpectedBand BandFor(const probes::DeviceInfo& info, const probes::LinkPath& path,
                             const Config* config) {
  if (config == nullptr) return probes::BandFromPath(path);
  for (const BandOverride& b : config->bands) {
    if (b.gpu == std::to_string(info.index) || Lower(b.gpu) == Lower(info.uuid)) {
      return {b.lower_bytes_per_s, b.upper_bytes_per_s, "config"};
    }
  }
  return probes::BandFromPath(path, config->band_lower_fraction, config->band_upper_fraction);
}

DeviceReport ProbeDevice(probes::TransferBackend& backend, const probes::DeviceInfo& info,
                         const Plan& plan, const Config* config) {
  DeviceReport report;
  report.info = info;
  const probes::Capabilities caps = backend.GetCapabilities(info.index);
  bool link_read = false;
  std::vector<ProbeSample> samples;
  for (std::uint64_t size : plan.sizes) {
    for (const auto& [mode, direction] : plan.pairs) {
      const ProbeSpec spec = SpecFor(plan, mode, direction, size);
      if (!caps.Supports(mode)) {
        ProbeSample skipped;
        skipped.spec = spec;
        skipped.status = ProbeStatus::kUnsupported;
        skipped.message = caps.unsupported.at(mode);
        samples.push_back(std::move(skipped));
        continue;
      }
      // Read the path during the first link-bound probe, when the link carries traffic.
      const bool watch = !link_read && probes::IsLinkBound(mode, direction);
      samples.push_back(RunProbe(backend, info.index, spec, watch ? &report.path : nullptr));
      link_read = link_read || watch;
    }
  }
  if (!link_read) report.path = backend.ReadLinkPath(info.index);
  report.band = BandFor(info, report.path, config);
  // Judged as the daemon judges one cycle (no history, so no baseline cause); without a
  // config file, by the defaults the daemon would use.
  report.diagnoses = DiagnoseOnce(config != nullptr ? *config : Config{},
                                  CycleObservation{info, report.path, samples});
  for (ProbeSample& sample : samples) {
    report.rows.push_back(Judge(std::move(sample), report.path, report.band));
  }
  return report;
}

std::string Gbps(double bytes_per_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", bytes_per_s / 1e9);
  return text;
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
  if (!path.pcie) return "none (" + path.note + ")";
  if (path.links.empty()) return "unknown (" + path.note + ")";
  const probes::PcieLink& own = path.links.front();
  std::string text = probes::FormatLink(own.current_gen, own.current_width);
  if (own.Downtrained()) {
    text += " DOWNTRAINED from " + probes::FormatLink(own.max_gen, own.max_width);
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
      const probes::PcieLink& own = r.path.links.front();
      std::printf(
          "  WARNING: the GPU's link runs at %s, below the %s it can do: check the slot, "
          "riser and seating (the band follows the trained link)\n",
          probes::FormatLink(own.current_gen, own.current_width).c_str(),
          probes::FormatLink(own.max_gen, own.max_width).c_str());
    }
    std::printf("  numa node: %s, iommu: %s\n",
                r.path.numa_node >= 0 ? std::to_string(r.path.numa_node).c_str() : "unknown",
                r.path.iommu_type.empty() ? "off" : r.path.iommu_type.c_str());
    if (r.band.Known()) {
      std::printf("  expected band: %s-%s GB/s per direction (%s)\n",
                  Gbps(r.band.lower_bytes_per_s).c_str(), Gbps(r.band.upper_bytes_per_s).c_str(),
                  r.band.source.c_str());
    } else {
      std::printf("  expected band: %s\n", r.band.source.c_str());
    }
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
        std::printf("    %s: %s\n      %s\n", std::string(ToString(d.cause)).c_str(),
                    d.detail.c_str(), d.advice.c_str());
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
          {"current_bytes_per_s", link.CurrentBytesPerSecond()},
          {"max_bytes_per_s", link.MaxBytesPerSecond()},
          {"downtrained", link.Downtrained()}};
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
      diagnoses.push_back(
          {{"cause", ToString(d.cause)}, {"detail", d.detail}, {"advice", d.advice}});
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
         {"expected_band",
          {{"lower_bytes_per_s", r.band.lower_bytes_per_s},
           {"upper_bytes_per_s", r.band.upper_bytes_per_s},
           {"source", r.band.source}}},
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
           {"bytes_per_transfer", s.bytes_per_transfer},
           {"device_time_s", s.device_time_s},
           {"host_numa_node", s.host_numa_node},
           {"overlap_ratio", s.overlap_ratio ? nlohmann::json(*s.overlap_ratio) : nlohmann::json()},
           {"percent_of_link",
            row.percent_of_link ? nlohmann::json(*row.percent_of_link) : nlohmann::json()},
           {"verdict", row.verdict}});
    }
  }
  const bool simulated = std::any_of(reports.begin(), reports.end(),
                                     [](const DeviceReport& r) { return r.info.simulated; });
  nlohmann::json doc{
      {"backend", backend}, {"simulated", simulated}, {"devices", devices}, {"results", results}};
  std::printf("%s\n", doc.dump(2).c_str());
}

// --config: bands, band fractions, modes, sizes, deadline and the simulated device's
// options come from the daemon's config file, so `xferd probe` judges as the daemon does.
std::optional<Config> LoadProbeConfig(const ProbeCommandOptions& options) {
  if (options.config_file.empty()) return std::nullopt;
  return LoadConfig(options.config_file);
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "xferd probe: %s\n", message.c_str());
  return code;
}

constexpr const char* kNoDeviceHint =
    "no NVIDIA driver/GPU found; run `xferd probe --simulate` to try the simulated device";

}  // namespace

int RunProbeCommand(const ProbeCommandOptions& options) {
  std::optional<Config> config;
  Plan plan;
  try {
    config = LoadProbeConfig(options);
    plan = MakePlan(options, config ? &*config : nullptr);
  } catch (const UsageError& e) {
    return Fail(kExitUsage, e.what());
  } catch (const ConfigError& e) {
    return Fail(kExitConfig, e.what());
  }
  if (plan.pairs.empty()) return Fail(kExitUsage, "no probe selected (check --mode)");

  std::unique_ptr<probes::TransferBackend> backend;
  if (options.simulate || (config && config->simulate)) {
    probes::SimOptions sim = config ? config->sim : probes::SimOptions{};
    // --seed wins over the config's seed unless left at its default.
    if (!config || options.seed != ProbeCommandOptions{}.seed) sim.seed = options.seed;
    backend = std::make_unique<probes::SimBackend>(std::move(sim));
  } else {
    probes::CudaOptions cuda;
    cuda.sysfs_root = options.sysfs_root;
    cuda.max_size_bytes = *std::max_element(plan.sizes.begin(), plan.sizes.end());
    if (config) cuda.pinned_cap_bytes = config->pinned_cap_bytes;
    try {
      backend = probes::MakeCudaBackend(cuda);
    } catch (const probes::NoDeviceError& e) {
      return Fail(kExitNoDevice, std::string(e.what()) + "\n" + kNoDeviceHint);
    }
  }

  const std::vector<probes::DeviceInfo> all = backend->Devices();
  if (all.empty()) return Fail(kExitNoDevice, kNoDeviceHint);
  std::vector<probes::DeviceInfo> selected;
  try {
    const std::vector<std::string>& wanted =
        !options.gpus.empty() ? options.gpus : (config ? config->gpus : std::vector<std::string>{});
    selected = SelectDevices(all, wanted);
  } catch (const UsageError& e) {
    return Fail(kExitUsage, e.what());
  }

  std::vector<DeviceReport> reports;
  for (const auto& info : selected) {
    reports.push_back(ProbeDevice(*backend, info, plan, config ? &*config : nullptr));
  }
  if (options.json) {
    PrintJson(backend->Name(), reports);
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
