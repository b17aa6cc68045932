// [health] and [[health.band]]: verdict hysteresis, baselines and expected bands.
#include <set>

#include "config/messages.h"
#include "config/sections.h"
#include "config/toml_reader.h"
#include "config/units.h"

namespace xferd::config {

void ReadHealth(const std::string& file, const toml::table& root, Config& config) {
  const toml::table* table = SectionTable(file, root, "health");
  if (!table) return;
  TableReader r(file, *table, "health");
  if (auto v = r.Integer("consecutive_bad", 1, 1000, 3))
    config.consecutive_bad = static_cast<int>(*v);
  if (auto v = r.Integer("baseline_window", 1, 10000, 20))
    config.baseline_window = static_cast<int>(*v);
  if (auto v = r.Number("drift_fraction", 0, 1, true, 0.8)) config.drift_fraction = *v;
  if (auto v = r.Number("band_lower_fraction", 0, 1, true, 0.63)) config.band_lower_fraction = *v;
  if (auto v = r.Number("band_upper_fraction", 0, 1, true, 0.83)) config.band_upper_fraction = *v;
  if (auto v = r.Duration("link_watch_interval", std::chrono::milliseconds(0),
                          std::chrono::milliseconds(3600 * 1000), "2s")) {
    if (v->count() > 0 && *v < std::chrono::milliseconds(100)) {
      r.Fail(*r.Find("link_watch_interval"), "link_watch_interval",
             "must be 0 (the link watch off) or at least 100ms, got " + FormatDuration(*v),
             "set link_watch_interval = \"2s\"");
    }
    config.link_watch_interval = *v;
  }
  if (auto v = r.Duration("link_flap_window", std::chrono::milliseconds(1000),
                          std::chrono::milliseconds(24 * 3600 * 1000), "10m")) {
    config.link_flap_window = *v;
  }
  if (auto v = r.Integer("link_flap_transitions", 1, 100000, 4))
    config.link_flap_transitions = static_cast<int>(*v);
  if (config.link_watch_interval.count() > 0 &&
      config.link_flap_window < 10 * config.link_watch_interval) {
    const char* key = r.Find("link_flap_window") ? "link_flap_window" : "link_watch_interval";
    r.Fail(*r.Find(key), key,
           "link_flap_window (" + FormatDuration(config.link_flap_window) +
               ") must hold at least 10 polls of link_watch_interval (" +
               FormatDuration(config.link_watch_interval) + ")",
           "set link_flap_window = \"10m\" and link_watch_interval = \"2s\"");
  }
  if (config.band_lower_fraction > config.band_upper_fraction) {
    const char* key = r.Find("band_lower_fraction") ? "band_lower_fraction" : "band_upper_fraction";
    r.Fail(*r.Find(key), key,
           "band_lower_fraction (" + FormatNumber(config.band_lower_fraction) +
               ") is above band_upper_fraction (" + FormatNumber(config.band_upper_fraction) + ")",
           "keep lower below upper, e.g. 0.63 and 0.83");
  }

  if (const toml::node* bands_node = r.Find("band")) {
    const auto* bands = bands_node->as_array();
    if (!bands || !bands->is_array_of_tables()) {
      r.Fail(*bands_node, "band",
             "must be a list of [[health.band]] tables, got " + TypeName(*bands_node),
             "write each band as a table of its own: a line [[health.band]], then gpu = \"0\", "
             "lower = \"20GB/s\" and upper = \"26GB/s\" on lines of their own");
    }
    config.bands.clear();
    std::set<std::string> gpus_with_band;
    for (std::size_t i = 0; i < bands->size(); ++i) {
      const toml::table& band_table = *bands->get(i)->as_table();
      TableReader b(file, band_table, "health.band");
      b.SetDisplayPrefix("health.band[" + std::to_string(i) + "]");
      BandOverride band;
      const toml::node* gpu = b.Find("gpu");
      if (!gpu)
        b.FailAt(b.TableLine(), "gpu", "missing: which GPU the band is for",
                 "add gpu = \"0\" (an index or a UUID)");
      band.gpu = GpuId(b, *gpu, "gpu");
      const auto lower = b.Bandwidth("lower", "20GB/s");
      const auto upper = b.Bandwidth("upper", "26GB/s");
      if (!lower)
        b.FailAt(b.TableLine(), "lower", "missing: the band's lower bound",
                 "add lower = \"20GB/s\"");
      if (!upper)
        b.FailAt(b.TableLine(), "upper", "missing: the band's upper bound",
                 "add upper = \"26GB/s\"");
      if (*lower > *upper) {
        b.Fail(*b.Find("lower"), "lower",
               "lower bound " + FormatBandwidth(*lower) + " is above the upper bound " +
                   FormatBandwidth(*upper),
               "swap them or correct the units");
      }
      if (!gpus_with_band.insert(band.gpu).second) {
        b.Fail(*gpu, "gpu", "GPU " + Quote(band.gpu) + " already has a band",
               "keep one [[health.band]] per GPU");
      }
      band.lower_bytes_per_s = *lower;
      band.upper_bytes_per_s = *upper;
      b.RejectUnknown();
      config.bands.push_back(std::move(band));
    }
  }
  r.RejectUnknown();
}

}  // namespace xferd::config
