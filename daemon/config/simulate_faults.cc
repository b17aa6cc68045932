// [[simulate.fault]]: one reader per fault kind, in one table (simulate_faults.h).
#include "config/simulate_faults.h"

#include <algorithm>
#include <stdexcept>

#include "config/messages.h"

namespace xferd::config {
namespace {

using Kind = probes::SimFault::Kind;

// A parameter a kind cannot do without: its value, or the error naming what to add.
template <typename T>
T Required(const TableReader& f, const std::optional<T>& value, std::string_view key,
           const char* missing, const char* add) {
  if (!value) f.FailAt(f.TableLine(), key, missing, add);
  return *value;
}

void ReadDegrade(const TableReader& f, const probes::SimOptions&, probes::SimFault& fault) {
  fault.factor =
      Required(f, f.Number("factor", 0, 1, true, 0.5), "factor",
               "missing: how much bandwidth is left", "add factor = 0.5 (0 < factor <= 1)");
}

void ReadSlow(const TableReader& f, const probes::SimOptions&, probes::SimFault& fault) {
  fault.factor = Required(f, f.Number("factor", 1, 1e6, false, 10), "factor",
                          "missing: how many times slower", "add factor = 10 (factor >= 1)");
}

// The link it trained down to: gen, width or both; the other stays as the link trained.
void ReadDownTrain(const TableReader& f, const probes::SimOptions& sim, probes::SimFault& fault) {
  const auto gen = f.Integer("gen", 1, 6, 3);
  const auto width = f.Integer("width", 1, 32, 8);
  if (!gen && !width) {
    f.FailAt(f.TableLine(), "gen", "missing: the link it trained down to",
             "add gen = 3 and/or width = 8");
  }
  if (width && !ValidPcieWidth(*width)) {
    f.Fail(*f.Find("width"), "width", "PCIe has no x" + std::to_string(*width) + " link",
           kPcieWidthFix);
  }
  fault.gen = gen ? static_cast<int>(*gen) : sim.link_gen;
  fault.width = width ? static_cast<int>(*width) : sim.link_width;
}

void ReadErrorEvery(const TableReader& f, const probes::SimOptions&, probes::SimFault& fault) {
  fault.every =
      static_cast<int>(Required(f, f.Integer("every", 1, 1000000, 3), "every",
                                "missing: every how many probes one fails", "add every = 3"));
}

void ReadNothing(const TableReader&, const probes::SimOptions&, probes::SimFault&) {}

// Which counter grows, how fast, where on the path, and what it costs.
void ReadLinkErrors(const TableReader& f, const probes::SimOptions&, probes::SimFault& fault) {
  if (auto v = f.String("counter", "\"correctable\"")) {
    const auto counter = probes::ParseSimErrorCounter(*v);
    if (!counter) {
      f.Fail(*f.Find("counter"), "counter", "unknown counter " + Quote(*v),
             "use \"correctable\", \"nonfatal\", \"fatal\" (the kernel's AER counts) or "
             "\"replay\" (NVML's replay counter of the GPU's link)");
    }
    fault.counter = *counter;
  }
  fault.rate =
      Required(f, f.Number("rate", 0, 1e6, true, 10), "rate", "missing: how many errors per second",
               "add rate = 10 (errors per second of simulated time, > 0)");
  if (auto v = f.Integer("hop", -1, 15, 1)) fault.hop = static_cast<int>(*v);
  if (fault.counter == probes::SimFault::ErrorCounter::kReplay && fault.hop != 0) {
    f.Fail(*f.Find("hop"), "hop",
           "replays are counted by the GPU on its own link (hop 0), not at hop " +
               std::to_string(fault.hop),
           "remove hop, or count AER errors there: counter = \"correctable\"");
  }
  if (auto v = f.Number("factor", 0, 1, true, 0.6)) fault.factor = *v;
}

void ReadRemoteNuma(const TableReader& f, const probes::SimOptions& sim, probes::SimFault& fault) {
  // A far node's memory over the socket link: a third of the bandwidth lost is usual on
  // two-socket hosts.
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
}

void ReadSlowStaging(const TableReader& f, const probes::SimOptions&, probes::SimFault& fault) {
  // The default takes pageable h2d from ~1/3.6 of pinned to ~1/14: past the 10x the
  // diagnosis names.
  fault.factor = f.Number("factor", 0, 1, true, 0.25).value_or(0.25);
}

std::string KindNames() {
  std::string kinds;
  for (Kind k : probes::AllSimFaultKinds()) {
    kinds += (kinds.empty() ? "" : ", ") + std::string(probes::ToString(k));
  }
  return kinds;
}

const FaultReader& ReaderOf(Kind kind) {
  const auto& readers = FaultReaders();
  const auto it = std::find_if(readers.begin(), readers.end(),
                               [kind](const FaultReader& r) { return r.kind == kind; });
  if (it == readers.end()) {
    throw std::logic_error("daemon/config/simulate_faults.cc has no reader for fault kind \"" +
                           std::string(probes::ToString(kind)) + "\"");
  }
  return *it;
}

}  // namespace

bool ValidPcieWidth(std::int64_t width) {
  return width == 1 || width == 2 || width == 4 || width == 8 || width == 12 || width == 16 ||
         width == 32;
}

const std::vector<FaultReader>& FaultReaders() {
  static const std::vector<FaultReader> kReaders = {
      {Kind::kDegrade, {"factor"}, ReadDegrade},
      {Kind::kDownTrain, {"gen", "width"}, ReadDownTrain},
      {Kind::kErrorEvery, {"every"}, ReadErrorEvery},
      {Kind::kHang, {}, ReadNothing},
      {Kind::kSlow, {"factor"}, ReadSlow},
      {Kind::kLost, {}, ReadNothing},
      {Kind::kLinkErrors, {"counter", "rate", "hop", "factor"}, ReadLinkErrors},
      {Kind::kRemoteNuma, {"factor"}, ReadRemoteNuma},
      {Kind::kSlowStaging, {"factor"}, ReadSlowStaging},
  };
  return kReaders;
}

std::vector<std::string_view> SimulateFaultKeys() {
  std::vector<std::string_view> keys = {"kind", "device"};
  for (const FaultReader& reader : FaultReaders()) {
    for (std::string_view key : reader.keys) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  return keys;
}

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
  // Each kind takes only its own parameters, so a misplaced one is not silently ignored.
  const FaultReader& reader = ReaderOf(fault.kind);
  for (std::string_view key : SimulateFaultKeys()) {
    if (key == "kind" || key == "device") continue;
    const toml::node* node = f.Find(key);
    if (node && std::find(reader.keys.begin(), reader.keys.end(), key) == reader.keys.end()) {
      f.Fail(*node, key, "kind " + Quote(*kind_text) + " takes no " + std::string(key),
             "remove it");
    }
  }
  reader.read(f, sim, fault);
  f.RejectUnknown();
  return fault;
}

}  // namespace xferd::config
