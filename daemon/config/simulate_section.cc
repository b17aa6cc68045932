// [simulate]: the simulated device and its load; its injected faults are read by
// simulate_faults.cc.
#include <algorithm>
#include <climits>
#include <regex>
#include <tuple>
#include <utility>

#include "config/messages.h"
#include "config/sections.h"
#include "config/simulate_faults.h"
#include "config/toml_reader.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::config {
namespace {

// "gen4x16" -> (4, 16); the key's error otherwise.
std::pair<int, int> ParseLinkText(const TableReader& r, std::string_view key,
                                  const std::string& text) {
  static const std::regex kLink("[Gg][Ee][Nn]([1-6])[Xx]([0-9]{1,2})");
  std::smatch m;
  if (!std::regex_match(text, m, kLink) || !ValidPcieWidth(std::stoi(m[2].str()))) {
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
    if (!ValidPcieWidth(*v)) {
      r.Fail(*r.Find("link_width"), "link_width", "PCIe has no x" + std::to_string(*v) + " link",
             kPcieWidthFix);
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

// A list of MIG profiles, each checked; `key` names it in messages.
std::vector<std::string> ReadProfiles(const TableReader& r, const toml::node& node,
                                      std::string_view key) {
  const auto* list = node.as_array();
  if (!list) {
    r.Fail(node, key, "must be a list of MIG profiles, got " + TypeName(node),
           "write " + std::string(key) +
               " = [\"3g.71gb\", \"3g.71gb\"] ([] = MIG on with no "
               "instance)");
  }
  std::vector<std::string> profiles;
  int slices = 0;
  for (const toml::node& item : *list) {
    const auto* text = item.as_string();
    if (!text) {
      r.Fail(item, key, "must list profiles as strings, got " + TypeName(item),
             "write " + std::string(key) + " = [\"3g.71gb\"]");
    }
    if (std::string problem = probes::SimMigProfileProblem(**text); !problem.empty()) {
      r.Fail(item, key, Quote(**text) + " is " + problem, "use e.g. \"3g.71gb\" or \"1g.18gb\"");
    }
    slices += probes::SimMigSlicesOf(**text);
    profiles.push_back(**text);
  }
  if (slices > probes::kSimMigSlices) {
    r.Fail(node, key,
           "the instances take " + std::to_string(slices) + " slices; a GPU has " +
               std::to_string(probes::kSimMigSlices),
           "list instances of at most 7 slices in all (\"3g.71gb\" takes 3)");
  }
  return profiles;
}

// mig = ["3g.71gb", ...] for every simulated GPU, or [[simulate.mig]] tables (device,
// instances) for some of them.
void ReadMig(const std::string& file, const TableReader& r, probes::SimOptions& sim) {
  const toml::node* node = r.Find("mig");
  if (!node) return;
  const auto* list = node->as_array();
  if (list && list->is_array_of_tables() && !list->empty()) {
    sim.mig.clear();
    for (std::size_t i = 0; i < list->size(); ++i) {
      TableReader m(file, *list->get(i)->as_table(), "simulate.mig");
      m.SetDisplayPrefix("simulate.mig[" + std::to_string(i) + "]");
      const auto device = m.Integer("device", -1, 63, 0);
      if (!device) {
        m.FailAt(m.TableLine(), "device", "missing: which simulated GPU",
                 "add device = 0 (-1 = every GPU)");
      }
      const toml::node* instances = m.Find("instances");
      if (!instances) {
        m.FailAt(m.TableLine(), "instances", "missing: the GPU's instances",
                 "add instances = [\"3g.71gb\", \"3g.71gb\"] ([] = MIG on with no instance)");
      }
      if (sim.mig.contains(static_cast<int>(*device))) {
        m.Fail(*m.Find("device"), "device", "names a GPU an earlier [[simulate.mig]] named",
               "give each GPU one [[simulate.mig]] table");
      }
      sim.mig[static_cast<int>(*device)] = ReadProfiles(m, *instances, "instances");
      m.RejectUnknown();
    }
    return;
  }
  sim.mig.clear();
  sim.mig[-1] = ReadProfiles(r, *node, "mig");
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
  if (auto v = r.Bool("confidential_computing")) config.sim.confidential_computing = *v;
  if (auto v = r.Bool("confidential_computing_ready")) config.sim.cc_ready = *v;
  if (r.Find("confidential_computing_ready") && !config.sim.confidential_computing) {
    r.Fail(*r.Find("confidential_computing_ready"), "confidential_computing_ready",
           "says whether CC GPUs accept work, but confidential_computing is not on",
           "add confidential_computing = true, or remove confidential_computing_ready");
  }
  ReadMig(file, r, config.sim);
  ReadForeignTraffic(r, config.sim);
  if (const toml::node* faults_node = r.Find("fault")) {
    const auto* faults = faults_node->as_array();
    if (!faults || !faults->is_array_of_tables()) {
      r.Fail(*faults_node, "fault",
             "must be a list of [[simulate.fault]] tables, got " + TypeName(*faults_node),
             "write each fault as a table of its own: a line [[simulate.fault]], then "
             "kind = \"degrade\" and factor = 0.5 on lines of their own");
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
