// [[simulate.fault]]: the parameters of each fault kind, read by one table with a row per
// kind of probes::AllSimFaultKinds() (the simulator's own table is probes/sim/fault_kinds.cc;
// probes/sim/README.md says how to add a kind to both).
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/toml_reader.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::config {

// How one kind's parameters are read: the keys it takes besides kind and device, and the
// reader that fills them in (it may also refuse the fault against the rest of [simulate]).
struct FaultReader {
  probes::SimFault::Kind kind;
  std::vector<std::string_view> keys;
  void (*read)(const TableReader& fault_table, const probes::SimOptions& sim,
               probes::SimFault& fault);
};

// Every kind's row, in the order of probes::AllSimFaultKinds().
const std::vector<FaultReader>& FaultReaders();

// The keys a [[simulate.fault]] table may hold: kind, device and every kind's parameters
// (the schema's "simulate.fault" section).
std::vector<std::string_view> SimulateFaultKeys();

// [[simulate.fault]] number `index` of `file`; `sim` is the rest of [simulate], read first.
probes::SimFault ReadFault(const std::string& file, const toml::table& table, std::size_t index,
                           const probes::SimOptions& sim);

// The widths a PCIe link trains to, and the fix that lists them.
bool ValidPcieWidth(std::int64_t width);
inline constexpr const char* kPcieWidthFix = "use 1, 2, 4, 8, 12, 16 or 32";

}  // namespace xferd::config
