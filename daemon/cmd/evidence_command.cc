// `xferd evidence [GPU]`: the evidence records kept when GPUs turned DEGRADED
// (core/evidence.h), read from the state directory's evidence/ directly, so they can be
// read with the daemon stopped (after a drain). `xferd faults`: the fault code table.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cmd/commands.h"
#include "config/config.h"
#include "core/evidence.h"
#include "core/fault_codes.h"
#include "platform/files.h"
#include "platform/printable.h"

namespace xferd::cmd {
namespace {

using nlohmann::json;

constexpr const char* kDefaultConfig = "/etc/xferd/xferd.toml";

// A field of a record, as text: records are xferd's own, but the directory may hold a file
// someone else put there under a record's name; nothing in one is trusted to be of a shape.
std::string Str(const json& object, const char* key, std::size_t bytes = 300) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  if (it->is_string()) return platform::Printable(it->get<std::string>(), bytes);
  if (it->is_number_integer()) return std::to_string(it->get<long long>());
  if (it->is_boolean()) return it->get<bool>() ? "yes" : "no";
  if (it->is_number()) return fmt::format("{}", it->get<double>());
  return "";
}

const json& Obj(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string GBps(const json& object, const char* key) {
  const json& v = Obj(object, key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) return "-";
  return fmt::format("{:.2f} GB/s", v.get<double>() / 1e9);
}

std::string LinkText(const json& link) {
  const std::string gen = Str(link, "generation"), width = Str(link, "width");
  return "Gen" + (gen.empty() ? "?" : gen) + " x" + (width.empty() ? "?" : width);
}

// The record for a person: what the verdict was, what flipped it, the path, the counters,
// lspci's text.
std::string Render(const json& r, const std::string& name, const std::filesystem::path& path) {
  std::string out;
  const auto line = [&](const std::string& text) { out += text + "\n"; };
  const json& gpu = Obj(r, "gpu");
  const json& verdict = Obj(r, "verdict");
  line(fmt::format("evidence record {} ({})", name, platform::PrintablePath(path.string())));
  line(fmt::format("  gpu {} {} {} at {}, driver {}{}", Str(gpu, "index"), Str(gpu, "uuid"),
                   Str(gpu, "name"), Str(gpu, "pci_bus_id"), Str(gpu, "driver_version"),
                   Obj(gpu, "simulated") == true ? " (simulated)" : ""));
  const json& incident = Obj(r, "incident");
  line(fmt::format("  turned DEGRADED at {} (from {}); written {}", Str(incident, "time"),
                   Str(incident, "from"), Str(r, "written_at")));
  line(fmt::format("  verdict: {}/{} {}: {} {} {} below {}", Str(verdict, "code"),
                   Str(verdict, "action"), Str(verdict, "cause"), Str(verdict, "mode"),
                   Str(verdict, "direction"), Str(verdict, "size"), Str(verdict, "below")));
  if (const json& band = Obj(r, "band"); band.is_object()) {
    line(fmt::format("  band: {} - {} ({})", GBps(band, "lower_bytes_per_second"),
                     GBps(band, "upper_bytes_per_second"), Str(band, "source")));
  }
  if (const json& causes = Obj(r, "causes"); causes.is_array() && !causes.empty()) {
    line("\ncauses:");
    for (const json& c : causes) {
      line(fmt::format("  {}/{} {}: {}", Str(c, "code"), Str(c, "action"), Str(c, "cause"),
                       Str(c, "detail")));
      const std::string advice = Str(c, "advice", 1000);
      if (!advice.empty()) line("    " + advice);
    }
  }
  if (const json& streaks = Obj(r, "streak"); streaks.is_array() && !streaks.empty()) {
    line("\nthe readings that flipped it (* = in the bad streak):");
    for (const json& s : streaks) {
      line(fmt::format("  {} {} {}: streak of {}, band lower {}, baseline {} ({})", Str(s, "mode"),
                       Str(s, "direction"), Str(s, "size"), Str(s, "bad_streak"),
                       GBps(s, "band_lower_bytes_per_second"), GBps(s, "baseline_bytes_per_second"),
                       Str(s, "baseline_of")));
      if (const json& readings = Obj(s, "readings"); readings.is_array()) {
        for (const json& x : readings) {
          const std::string bad = Str(x, "bad");
          line(fmt::format("    {} {} {:>12} {}{}{}{}", Obj(x, "in_streak") == true ? "*" : " ",
                           Str(x, "time"), GBps(x, "bandwidth_bytes_per_second"), Str(x, "status"),
                           bad == "yes"  ? " bad"
                           : bad == "no" ? " good"
                                         : "",
                           Obj(x, "contended") == true ? " contended" : "",
                           Obj(x, "confirmation") == true ? " (confirmation)" : ""));
        }
      }
    }
  }
  const json& link = Obj(r, "link");
  line(fmt::format("\npath (GPU first): NUMA node {}, IOMMU {}{}",
                   Str(link, "numa_node").empty() ? "unknown" : Str(link, "numa_node"),
                   Str(link, "iommu_type").empty() ? "none" : Str(link, "iommu_type"),
                   Obj(link, "c2c") == true ? ", NVLink-C2C" : ""));
  if (const json& hops = Obj(link, "hops"); hops.is_array()) {
    for (const json& h : hops) {
      line(fmt::format("  {} -> {}: {} (link max {}, this end {}){}{}", Str(h, "bdf"),
                       Str(h, "other_end_bdf").empty() ? "?" : Str(h, "other_end_bdf"),
                       LinkText(Obj(h, "current")), LinkText(Obj(h, "link_max")),
                       LinkText(Obj(h, "max")), Obj(h, "downtrained") == true ? " DOWNTRAINED" : "",
                       Obj(h, "capped_by_other_end") == true ? " capped by the other end" : ""));
    }
  }
  const json& placement = Obj(r, "placement");
  line(fmt::format(
      "placement: GPU on node {}, host buffers on node {}{}",
      Str(placement, "gpu_numa_node").empty() ? "unknown" : Str(placement, "gpu_numa_node"),
      Str(placement, "host_buffer_numa_node").empty() ? "unknown"
                                                      : Str(placement, "host_buffer_numa_node"),
      Str(placement, "host_placement_problem").empty()
          ? ""
          : " (" + Str(placement, "host_placement_problem") + ")"));
  const json& host = Obj(r, "host");
  std::string cmdline;
  if (const json& tokens = Obj(host, "iommu_cmdline"); tokens.is_array()) {
    for (const json& t : tokens) {
      if (t.is_string())
        cmdline += (cmdline.empty() ? "" : " ") + platform::Printable(t.get<std::string>(), 80);
    }
  }
  line(fmt::format(
      "host: kernel IOMMU settings: {}; nvidia module {}",
      cmdline.empty() ? "none on the command line" : cmdline,
      Str(host, "nvidia_module_version").empty() ? "-" : Str(host, "nvidia_module_version")));
  const json& errors = Obj(r, "link_errors");
  if (errors.is_object()) {
    line("\nlink error counters:");
    for (const char* when : {"before", "during"}) {
      const json& at = Obj(errors, when);
      if (!at.is_object()) {
        line(fmt::format("  {}: not read", when));
        continue;
      }
      const json& reading = Obj(at, "reading");
      line(fmt::format("  {} ({}): PCIe replays {}", when, Str(at, "time"),
                       Str(reading, "replays").empty() ? "not read" : Str(reading, "replays")));
      if (const json& devices = Obj(reading, "devices"); devices.is_array()) {
        for (const json& d : devices) {
          const json& aer = Obj(d, "aer");
          line(fmt::format(
              "    {}: AER {} correctable, {} nonfatal, {} fatal{}", Str(d, "bdf"),
              Str(aer, "correctable"), Str(aer, "nonfatal"), Str(aer, "fatal"),
              Obj(d, "readable") == true ? "" : " (not readable: " + Str(d, "problem") + ")"));
        }
      }
    }
  } else {
    line("\nlink error counters: not read");
  }
  const json& lspci = Obj(r, "lspci");
  if (Obj(lspci, "run") != true) {
    line("\nlspci: not run: " + Str(lspci, "reason"));
  } else if (const json& devices = Obj(lspci, "devices"); devices.is_array()) {
    for (const json& d : devices) {
      line(fmt::format("\nlspci -vvv -s {}{}:", Str(d, "bdf"),
                       Str(d, "error").empty() ? "" : " (" + Str(d, "error") + ")"));
      const json& text = Obj(d, "output");
      if (text.is_string()) out += platform::PrintableText(text.get<std::string>(), 64 * 1024);
      if (!out.empty() && out.back() != '\n') out += "\n";
    }
  }
  return out;
}

json ParseRecord(const core::EvidenceStore& store, const std::string& name) {
  json record = json::parse(store.Read(name), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    throw platform::FileError("cannot read", "evidence record", store.dir() / name,
                              "it is not an evidence record (not a JSON object)",
                              "remove it; xferd writes its records itself", 0);
  }
  return record;
}

std::filesystem::path EvidenceDir(const EvidenceCommandOptions& options) {
  if (options.state_dir) return std::filesystem::path(*options.state_dir) / "evidence";
  std::error_code ec;
  const std::string file = options.config_file.value_or(
      std::filesystem::exists(kDefaultConfig, ec) ? kDefaultConfig : "");
  config::Config config;
  if (!file.empty()) config = config::ParseConfig(config::ReadConfigFile(file), file);
  return config.state_dir / "evidence";
}

}  // namespace

int EvidenceCommand(const EvidenceCommandOptions& options) {
  const core::EvidenceStore store(EvidenceDir(options));
  std::vector<core::EvidenceStore::Entry> records = store.List();
  std::string wanted_uuid;
  if (options.gpu) {
    const std::string& g = *options.gpu;
    const bool index = !g.empty() && g.size() <= 7 &&
                       std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (index) {
      const int gpu = std::stoi(g);
      std::erase_if(records, [&](const auto& e) { return e.gpu != gpu; });
    } else {
      wanted_uuid = g;
    }
  }
  if (options.record) {
    std::erase_if(records, [&](const auto& e) { return e.name != *options.record; });
    if (records.empty()) {
      std::fprintf(stderr, "xferd evidence: no record %s in %s (`xferd evidence` lists them)\n",
                   platform::Printable(*options.record, 80).c_str(),
                   platform::PrintablePath(store.dir().string()).c_str());
      return 1;
    }
  }
  // Each record read once (bounded, never through a link); one that cannot be read is
  // listed with why.
  struct Read {
    core::EvidenceStore::Entry entry;
    json record;
    std::string problem;
  };
  std::vector<Read> read;
  for (const auto& e : records) {
    Read r{e, nullptr, ""};
    try {
      r.record = ParseRecord(store, e.name);
    } catch (const platform::Error& error) {
      r.problem = platform::Printable(error.what(), 500);
    }
    if (!wanted_uuid.empty()) {
      std::string uuid = Str(Obj(r.record, "gpu"), "uuid");
      const auto lower = [](std::string s) {
        for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return s;
      };
      if (lower(uuid) != lower(wanted_uuid)) continue;
    }
    read.push_back(std::move(r));
  }
  const bool list = options.list || (!options.gpu && !options.record);
  if (read.empty()) {
    const std::string which = options.gpu ? " of GPU " + platform::Printable(*options.gpu, 80) : "";
    if (options.json && list) {
      std::printf("[]\n");
    } else {
      std::printf("no evidence record%s in %s (a record is kept when a GPU turns DEGRADED)\n",
                  which.c_str(), platform::PrintablePath(store.dir().string()).c_str());
    }
    return list && !options.gpu ? 0 : 1;
  }
  if (list) {
    if (options.json) {
      json out = json::array();
      for (const Read& r : read) {
        const json& verdict = Obj(r.record, "verdict");
        out.push_back({{"record", r.entry.name},
                       {"path", (store.dir() / r.entry.name).string()},
                       {"gpu", r.entry.gpu},
                       {"uuid", Str(Obj(r.record, "gpu"), "uuid")},
                       {"time", Str(Obj(r.record, "incident"), "time")},
                       {"code", Str(verdict, "code")},
                       {"action", Str(verdict, "action")},
                       {"cause", Str(verdict, "cause")},
                       {"bytes", r.entry.bytes},
                       {"problem", r.problem}});
      }
      std::printf("%s\n", out.dump(1, ' ', false, json::error_handler_t::replace).c_str());
      return 0;
    }
    std::printf("%-30s %4s  %-24s  %-16s %-22s %8s\n", "RECORD", "GPU", "TURNED DEGRADED", "CODE",
                "CAUSE", "BYTES");
    for (const Read& r : read) {
      const json& verdict = Obj(r.record, "verdict");
      if (!r.problem.empty()) {
        std::printf("%-30s %4d  unreadable: %s\n", r.entry.name.c_str(), r.entry.gpu,
                    r.problem.c_str());
        continue;
      }
      std::printf("%-30s %4d  %-24s  %-16s %-22s %8ju\n", r.entry.name.c_str(), r.entry.gpu,
                  Str(Obj(r.record, "incident"), "time").c_str(),
                  (Str(verdict, "code") + "/" + Str(verdict, "action")).c_str(),
                  Str(verdict, "cause").c_str(), r.entry.bytes);
    }
    std::printf(
        "(%zu record%s in %s; the newest %zu are kept; `xferd evidence GPU` prints the "
        "newest of a GPU)\n",
        read.size(), read.size() == 1 ? "" : "s",
        platform::PrintablePath(store.dir().string()).c_str(), core::kEvidenceRecordsKept);
    return 0;
  }
  // One record: the GPU's newest, or the one named.
  const Read& r = read.front();
  if (!r.problem.empty()) {
    std::fprintf(stderr, "xferd evidence: %s\n", r.problem.c_str());
    return 1;
  }
  if (options.json) {
    std::printf("%s\n", r.record.dump(1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::fputs(Render(r.record, r.entry.name, store.dir() / r.entry.name).c_str(), stdout);
  }
  return 0;
}

int FaultsCommand(bool as_json) {
  if (as_json) {
    json out = json::array();
    for (const core::FaultCode& f : core::AllFaultCodes()) {
      out.push_back({{"code", f.Code()},
                     {"number", f.number},
                     {"name", f.name},
                     {"action", core::ToString(f.action)},
                     {"acts", f.acts},
                     {"reserved", f.reserved},
                     {"meaning", f.meaning}});
    }
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf("%-9s  %-30s  %-15s  %-4s  %s\n", "CODE", "CAUSE OR STATE", "ACTION", "ACTS",
              "MEANING");
  for (const core::FaultCode& f : core::AllFaultCodes()) {
    std::printf("%-9s  %-30s  %-15s  %-4s  %s%s\n", f.Code().c_str(), std::string(f.name).c_str(),
                std::string(core::ToString(f.action)).c_str(), f.acts ? "yes" : "no",
                std::string(f.meaning).c_str(), f.reserved ? " (reserved: not produced yet)" : "");
  }
  return 0;
}

}  // namespace xferd::cmd
