// [simulate]: the simulated device, its load and its injected faults.
#include <algorithm>
#include <climits>
#include <regex>
#include <tuple>
#include <utility>

#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::config {
namespace {

using Kind = probes::SimFault::Kind;

bool ValidWidth(std::int64_t width) {
  return width == 1 || width == 2 || width == 4 || width == 8 || width == 12 || width == 16 ||
         width == 32;
}

constexpr const char* kWidthFix = "use 1, 2, 4, 8, 12, 16 or 32";

// "gen4x16" -> (4, 16); the key's error otherwise.
std::pair<int, int> ParseLinkText(const TableReader& r, std::string_view key,
                                  const std::string& text) {
  static const std::regex kLink("[Gg][Ee][Nn]([1-6])[Xx]([0-9]{1,2})");
  std::smatch m;
  if (!std::regex_match(text, m, kLink) || !ValidWidth(std::stoi(m[2].str()))) {
    r.Fail(
        *r.Find(key), key, "not a PCIe link: " + Quote(text),
        "write " + std::string(key) + " = \"gen4x16\" (gen 1-6, width 1, 2, 4, 8, 12, 16 or 32)");
  }
  return {std::stoi(m[1].str()), std::stoi(m[2].str())};
}

// link = "gen4x16", or link_gen and link_width: the link the simulated GPU trained to.
void ReadLink(const TableReader& r, probes::SimOptions& sim) {
  const toml::node* link = r.Find("link");
  if (link && (r.Find("link_gen") || r.Find("link_width"))) {
    r.Fail(*link, "link", "set either link or link_gen/link_width, not both",
           "keep link = \"gen4x16\" and remove link_gen and link_width");
  }
  if (auto v = r.String("link", "\"gen4x16\"")) {
    std::tie(sim.link_gen, sim.link_width) = ParseLinkText(r, "link", *v);
  }
  if (auto v = r.Integer("link_gen", 1, 6, 4)) sim.link_gen = static_cast<int>(*v);
  if (auto v = r.Integer("link_width", 1, 32, 16)) {
    if (!ValidWidth(*v)) {
      r.Fail(*r.Find("link_width"), "link_width", "PCIe has no x" + std::to_string(*v) + " link",
             kWidthFix);
    }
    sim.link_width = static_cast<int>(*v);
  }
  // PCIe power saving: the generation the link drops to at idle.
  if (auto v = r.Integer("idle_link_gen", 1, 6, 1)) sim.idle_link_gen = static_cast<int>(*v);
}

// Where the simulated GPUs sit: the built-in host's switches, uplink and NUMA nodes, or a
// sysfs tree (relative to the config file) that says how many GPUs there are and where, so
// devices and the built-in host's keys are then not used.
void ReadTopology(const TableReader& r, const std::filesystem::path& source,
                  probes::SimOptions& sim) {
  if (auto v = r.String("sysfs_root", "\"/sys\"")) {
    if (v->empty()) {
      r.Fail(*r.Find("sysfs_root"), "sysfs_root", "must not be empty",
             "remove the key for the built-in host, or name a tree: sysfs_root = \"/sys\"");
    }
    sim.sysfs_root = ResolveAgainst(source, *v);
  }
  if (auto v = r.Integer("gpus_per_switch", 1, 15, 2)) sim.gpus_per_switch = static_cast<int>(*v);
  if (auto v = r.String("uplink", "\"gen4x16\"")) {
    std::tie(sim.uplink_gen, sim.uplink_width) = ParseLinkText(r, "uplink", *v);
  }
  if (auto v = r.Integer("numa_nodes", 1, 8, 2)) sim.numa_nodes = static_cast<int>(*v);
}

// unsupported = { mode = "reason" }: modes every simulated device cannot do.
void ReadUnsupported(const TableReader& r, probes::SimOptions& sim) {
  const toml::node* node = r.Find("unsupported");
  if (!node) return;
  const auto* modes = node->as_table();
  if (!modes) {
    r.Fail(*node, "unsupported", "must be a table of mode = \"reason\", got " + TypeName(*node),
           "write e.g. unsupported = { managed = \"no concurrentManagedAccess\" }");
  }
  for (const auto& [k, reason] : *modes) {
    const std::string key = "unsupported." + std::string(k.str());
    const auto mode = probes::ParseMode(k.str());
    if (!mode) {
      r.FailAt(static_cast<int>(k.source().begin.line), key, "unknown mode",
               "use names from: " + probes::AllModeNames());
    }
    const auto* text = reason.as_string();
    if (!text || (*text)->empty()) {
      r.Fail(reason, key, "must be the reason as a non-empty string, got " + TypeName(reason),
             "write " + std::string(k.str()) + " = \"why the simulated device cannot do it\"");
    }
    sim.unsupported[*mode] = **text;
  }
}

std::string KindNames() {
  std::string kinds;
  for (Kind k : {Kind::kDegrade, Kind::kDownTrain, Kind::kErrorEvery, Kind::kHang, Kind::kSlow,
                 Kind::kLost, Kind::kLinkErrors, Kind::kRemoteNuma, Kind::kSlowStaging}) {
    kinds += (kinds.empty() ? "" : ", ") + std::string(probes::ToString(k));
  }
  return kinds;
}

// kind = "link_errors": which counter grows, how fast, where on the path, and what it costs.
void ReadLinkErrorsFault(const TableReader& f, probes::SimFault& fault) {
  if (auto v = f.String("counter", "\"correctable\"")) {
    const auto counter = probes::ParseSimErrorCounter(*v);
    if (!counter) {
      f.Fail(*f.Find("counter"), "counter", "unknown counter " + Quote(*v),
             "use \"correctable\", \"nonfatal\", \"fatal\" (the kernel's AER counts) or "
             "\"replay\" (NVML's replay counter of the GPU's link)");
    }
    fault.counter = *counter;
  }
  const auto rate = f.Number("rate", 0, 1e6, true, 10);
  if (!rate) {
    f.FailAt(f.TableLine(), "rate", "missing: how many errors per second",
             "add rate = 10 (errors per second of simulated time, > 0)");
  }
  fault.rate = *rate;
  if (auto v = f.Integer("hop", -1, 15, 1)) fault.hop = static_cast<int>(*v);
  if (fault.counter == probes::SimFault::ErrorCounter::kReplay && fault.hop != 0) {
    f.Fail(*f.Find("hop"), "hop",
           "replays are counted by the GPU on its own link (hop 0), not at hop " +
               std::to_string(fault.hop),
           "remove hop, or count AER errors there: counter = \"correctable\"");
  }
  if (auto v = f.Number("factor", 0, 1, true, 0.6)) fault.factor = *v;
}

// The parameters of one fault: each kind takes only its own, so a misplaced one is not
// silently ignored.
void ReadFaultParameters(const TableReader& f, const std::string& kind_text,
                         const probes::SimOptions& sim, probes::SimFault& fault) {
  const auto only = [&](std::initializer_list<std::string_view> allowed) {
    for (std::string_view key : {"factor", "gen", "width", "every", "counter", "rate", "hop"}) {
      const toml::node* node = f.Find(key);
      if (node && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        f.Fail(*node, key, "kind " + Quote(kind_text) + " takes no " + std::string(key),
               "remove it");
      }
    }
  };
  const auto required = [&](const auto& value, std::string_view key, const char* missing,
                            const char* add) {
    if (!value) f.FailAt(f.TableLine(), key, missing, add);
    return *value;
  };
  switch (fault.kind) {
    case Kind::kDegrade:
      only({"factor"});
      fault.factor =
          required(f.Number("factor", 0, 1, true, 0.5), "factor",
                   "missing: how much bandwidth is left", "add factor = 0.5 (0 < factor <= 1)");
      break;
    case Kind::kSlow:
      only({"factor"});
      fault.factor = required(f.Number("factor", 1, 1e6, false, 10), "factor",
                              "missing: how many times slower", "add factor = 10 (factor >= 1)");
      break;
    case Kind::kDownTrain: {
      only({"gen", "width"});
      const auto gen = f.Integer("gen", 1, 6, 3);
      const auto width = f.Integer("width", 1, 32, 8);
      if (!gen && !width) {
        f.FailAt(f.TableLine(), "gen", "missing: the link it trained down to",
                 "add gen = 3 and/or width = 8");
      }
      if (width && !ValidWidth(*width)) {
        f.Fail(*f.Find("width"), "width", "PCIe has no x" + std::to_string(*width) + " link",
               kWidthFix);
      }
      fault.gen = gen ? static_cast<int>(*gen) : sim.link_gen;
      fault.width = width ? static_cast<int>(*width) : sim.link_width;
      break;
    }
    case Kind::kLinkErrors:
      only({"counter", "rate", "hop", "factor"});
      ReadLinkErrorsFault(f, fault);
      break;
    case Kind::kRemoteNuma:
      only({"factor"});
      // A far node's memory over the socket link: a third of the bandwidth lost is usual
      // on two-socket hosts.
      fault.factor = f.Number("factor", 0, 1, true, 0.7).value_or(0.7);
      if (sim.integrated) {
        f.Fail(*f.Find("kind"), "kind",
               "an integrated GPU shares the host's memory: it has no remote NUMA node",
               "remove the fault, or integrated = true");
      }
      if (sim.sysfs_root.empty() && sim.numa_nodes < 2) {
        f.Fail(*f.Find("kind"), "kind",
               "the simulated host has one NUMA node (numa_nodes = 1): no other node to "
               "place the host buffers on",
               "set numa_nodes = 2 in [simulate]");
      }
      break;
    case Kind::kSlowStaging:
      only({"factor"});
      // The default takes pageable h2d from ~1/3.6 of pinned to ~1/14: past the 10x the
      // diagnosis names.
      fault.factor = f.Number("factor", 0, 1, true, 0.25).value_or(0.25);
      break;
    case Kind::kErrorEvery:
      only({"every"});
      fault.every =
          static_cast<int>(required(f.Integer("every", 1, 1000000, 3), "every",
                                    "missing: every how many probes one fails", "add every = 3"));
      break;
    case Kind::kHang:
    case Kind::kLost: only({}); break;
  }
}

// [[simulate.fault]] number `index`.
probes::SimFault ReadFault(const std::string& file, const toml::table& table, std::size_t index,
                           const probes::SimOptions& sim) {
  TableReader f(file, table, "simulate.fault");
  f.SetDisplayPrefix("simulate.fault[" + std::to_string(index) + "]");
  probes::SimFault fault;
  const auto kind_text = f.String("kind", "\"degrade\"");
  if (!kind_text) {
    f.FailAt(f.TableLine(), "kind", "missing: what fault to inject",
             "add kind = one of " + KindNames());
  }
  const auto kind = probes::ParseSimFaultKind(*kind_text);
  if (!kind) {
    f.Fail(*f.Find("kind"), "kind", "unknown fault kind " + Quote(*kind_text),
           "use one of " + KindNames());
  }
  fault.kind = *kind;
  // A sysfs tree's GPUs are counted when the backend reads it, which checks the index.
  const int last_device = sim.sysfs_root.empty() ? sim.devices - 1 : 63;
  if (auto v = f.Integer("device", -1, last_device, -1)) fault.device = static_cast<int>(*v);
  ReadFaultParameters(f, *kind_text, sim, fault);
  f.RejectUnknown();
  return fault;
}

// Another process's traffic on each simulated GPU's link, in bursts at random moments: the
// rate and the duty go together.
void ReadForeignTraffic(const TableReader& r, probes::SimOptions& sim) {
  if (auto v = r.Bandwidth("foreign_traffic_bytes_per_second", "20GB/s", true)) {
    sim.foreign_traffic.bytes_per_s = *v;
  }
  if (auto v = r.Number("foreign_traffic_duty", 0, 1, false, 0.3)) sim.foreign_traffic.duty = *v;
  if (auto v = r.String("foreign_traffic_direction", "\"h2d\"")) {
    const auto direction = probes::ParseDirection(*v);
    if (!direction) {
      r.Fail(*r.Find("foreign_traffic_direction"), "foreign_traffic_direction",
             "unknown direction " + Quote(*v), "use \"h2d\", \"d2h\" or \"bidir\"");
    }
    sim.foreign_traffic.direction = *direction;
  }
  const toml::node* rate = r.Find("foreign_traffic_bytes_per_second");
  const toml::node* duty = r.Find("foreign_traffic_duty");
  if ((rate == nullptr) != (duty == nullptr)) {
    r.FailAt(LineOf(rate != nullptr ? *rate : *duty),
             rate != nullptr ? "foreign_traffic_duty" : "foreign_traffic_bytes_per_second",
             "missing: foreign traffic needs both its rate and its duty",
             rate != nullptr ? "add foreign_traffic_duty = 0.3 (the share of the time a burst "
                               "is on; 1 = steady)"
                             : "add foreign_traffic_bytes_per_second = \"20GB/s\"");
  }
}

}  // namespace

void ReadSimulate(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "simulate");
  if (!table) return;
  TableReader r(file, *table, "simulate");
  if (auto v = r.Bool("enabled")) config.simulate = *v;
  if (auto v = r.Integer("devices", 1, 64, 1)) config.sim.devices = static_cast<int>(*v);
  if (auto v = r.Integer("seed", 0, INT64_MAX, 1)) config.sim.seed = static_cast<std::uint64_t>(*v);
  ReadLink(r, config.sim);
  ReadTopology(r, config.source, config.sim);
  if (auto v = r.Bool("integrated")) config.sim.integrated = *v;
  if (auto v = r.Bool("c2c")) config.sim.c2c = *v;
  if (config.sim.c2c && config.sim.integrated) {
    r.Fail(*r.Find("c2c"), "c2c", "an integrated GPU has no NVLink-C2C: set one of them",
           "remove c2c = true or integrated = true");
  }
  if (auto v = r.Number("time_scale", 0, 1000, false, 1)) config.sim.time_scale = *v;
  // Simulated time: the daemon's clock runs this many times faster than real time and each
  // probe takes its simulated time on it (so a default 60 s cycle passes in a second at 60).
  if (auto v = r.Number("speedup", 1, 10000, false, 60)) config.sim_speedup = *v;
  // The load the simulated GPUs report to busy detection (in place of NVML).
  if (auto v = r.Number("gpu_utilization_percent", 0, 100, false, 90)) {
    config.sim_gpu_utilization_percent = *v;
  }
  if (auto v = r.Bandwidth("pcie_bytes_per_second", "10GB/s", true)) {
    config.sim_pcie_bytes_per_s = *v;
  }
  ReadUnsupported(r, config.sim);
  ReadForeignTraffic(r, config.sim);
  if (const toml::node* faults_node = r.Find("fault")) {
    const auto* faults = faults_node->as_array();
    if (!faults || !faults->is_array_of_tables()) {
      r.Fail(*faults_node, "fault",
             "must be a list of [[simulate.fault]] tables, got " + TypeName(*faults_node),
             "write each fault as\n  [[simulate.fault]]\n  kind = \"degrade\"\n  factor = 0.5");
    }
    // Each probe consults every fault: a test needs a handful, not thousands.
    constexpr std::size_t kMaxFaults = 64;
    if (faults->size() > kMaxFaults) {
      r.Fail(*faults->get(kMaxFaults), "fault",
             "more than " + std::to_string(kMaxFaults) + " [[simulate.fault]] tables (" +
                 std::to_string(faults->size()) + ")",
             "keep at most " + std::to_string(kMaxFaults) + " faults");
    }
    config.sim.faults.clear();
    for (std::size_t i = 0; i < faults->size(); ++i) {
      config.sim.faults.push_back(ReadFault(file, *faults->get(i)->as_table(), i, config.sim));
    }
  }
  r.RejectUnknown();
}

}  // namespace xferd::config
