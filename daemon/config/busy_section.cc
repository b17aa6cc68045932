// [busy]: when a GPU counts as busy with someone else's work.
#include "config/sections.h"
#include "config/toml_reader.h"

namespace xferd::config {

void ReadBusy(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "busy");
  if (!table) return;
  TableReader r(file, *table, "busy");
  if (auto v = r.Bool("enabled")) config.busy_detection = *v;
  if (auto v = r.Number("gpu_utilization_percent", 0, 100, true, 50))
    config.busy_gpu_utilization_percent = *v;
  if (auto v = r.Bandwidth("pcie_bytes_per_second", "2GB/s")) config.busy_pcie_bytes_per_s = *v;
  r.RejectUnknown();
}

}  // namespace xferd::config
