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
#include "cmd/json_depth.h"
#include "config/config.h"
#include "core/evidence.h"
#include "core/fault_codes.h"
#include "platform/files.h"
#include "platform/printable.h"

namespace xferd::cmd {
namespace {

using nlohmann::json;

constexpr const char* kDaemonConfigFile = "/etc/xferd/xferd.toml";

// A field of a record, as text: records are xferd's own, but the directory may hold a file
// someone else put there under a record's name; nothing in one is trusted to be of a shape.
std::string Field(const json& object, const char* key, std::size_t bytes = 300) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  if (it->is_string()) return platform::Printable(it->get<std::string>(), bytes);
  if (it->is_number_integer()) return std::to_string(it->get<long long>());
  if (it->is_boolean()) return it->get<bool>() ? "yes" : "no";
  if (it->is_number()) return fmt::format("{}", it->get<double>());
  return "";
}

const json& Member(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string RecordRate(const json& object, const char* key) {
  const json& v = Member(object, key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) return "-";
  return fmt::format("{:.2f} GB/s", v.get<double>() / 1e9);
}

std::string LinkWords(const json& link) {
  const std::string gen = Field(link, "generation"), width = Field(link, "width");
  return "Gen" + (gen.empty() ? "?" : gen) + " x" + (width.empty() ? "?" : width);
}

// The record for a person: what the verdict was, what flipped it, the path, the counters,
// lspci's text.
std::string RenderRecord(const json& r, const std::string& name,
                         const std::filesystem::path& path) {
  std::string out;
  const auto line = [&](const std::string& text) { out += text + "\n"; };
  const json& gpu = Member(r, "gpu");
  const json& verdict = Member(r, "verdict");
  line(fmt::format("evidence record {} ({})", name, platform::PrintablePath(path.string())));
  line(fmt::format("  gpu {} {} {} at {}, driver {}{}", Field(gpu, "index"), Field(gpu, "uuid"),
                   Field(gpu, "name"), Field(gpu, "pci_bus_id"), Field(gpu, "driver_version"),
                   Member(gpu, "simulated") == true ? " (simulated)" : ""));
  const json& incident = Member(r, "incident");
  line(fmt::format("  turned DEGRADED at {} (from {}); written {}", Field(incident, "time"),
                   Field(incident, "from"), Field(r, "written_at")));
  line(fmt::format("  verdict: {}/{} {}: {} {} {} below {}", Field(verdict, "code"),
                   Field(verdict, "action"), Field(verdict, "cause"), Field(verdict, "mode"),
                   Field(verdict, "direction"), Field(verdict, "size"), Field(verdict, "below")));
  if (const json& band = Member(r, "band"); band.is_object()) {
    line(fmt::format("  band: {} - {} ({})", RecordRate(band, "lower_bytes_per_second"),
                     RecordRate(band, "upper_bytes_per_second"), Field(band, "source")));
  }
  if (const json& causes = Member(r, "causes"); causes.is_array() && !causes.empty()) {
    line("\ncauses:");
    for (const json& c : causes) {
      line(fmt::format("  {}/{} {}: {}", Field(c, "code"), Field(c, "action"), Field(c, "cause"),
                       Field(c, "detail")));
      const std::string advice = Field(c, "advice", 1000);
      if (!advice.empty()) line("    " + advice);
    }
  }
  if (const json& streaks = Member(r, "streak"); streaks.is_array() && !streaks.empty()) {
    line("\nthe readings that flipped it (* = in the bad streak):");
    for (const json& s : streaks) {
      line(fmt::format("  {} {} {}: streak of {}, band lower {}, baseline {} ({})",
                       Field(s, "mode"), Field(s, "direction"), Field(s, "size"),
                       Field(s, "bad_streak"), RecordRate(s, "band_lower_bytes_per_second"),
                       RecordRate(s, "baseline_bytes_per_second"), Field(s, "baseline_of")));
      if (const json& readings = Member(s, "readings"); readings.is_array()) {
        for (const json& x : readings) {
          const std::string bad = Field(x, "bad");
          line(fmt::format("    {} {} {:>12} {}{}{}{}", Member(x, "in_streak") == true ? "*" : " ",
                           Field(x, "time"), RecordRate(x, "bandwidth_bytes_per_second"),
                           Field(x, "status"),
                           bad == "yes"  ? " bad"
                           : bad == "no" ? " good"
                                         : "",
                           Member(x, "contended") == true ? " contended" : "",
                           Member(x, "confirmation") == true ? " (confirmation)" : ""));
        }
      }
    }
  }
  const json& link = Member(r, "link");
  line(fmt::format("\npath (GPU first): NUMA node {}, IOMMU {}{}",
                   Field(link, "numa_node").empty() ? "unknown" : Field(link, "numa_node"),
                   Field(link, "iommu_type").empty() ? "none" : Field(link, "iommu_type"),
                   Member(link, "c2c") == true ? ", NVLink-C2C" : ""));
  if (const json& hops = Member(link, "hops"); hops.is_array()) {
    for (const json& h : hops) {
      line(fmt::format("  {} -> {}: {} (link max {}, this end {}){}{}", Field(h, "bdf"),
                       Field(h, "other_end_bdf").empty() ? "?" : Field(h, "other_end_bdf"),
                       LinkWords(Member(h, "current")), LinkWords(Member(h, "link_max")),
                       LinkWords(Member(h, "max")),
                       Member(h, "downtrained") == true ? " DOWNTRAINED" : "",
                       Member(h, "capped_by_other_end") == true ? " capped by the other end" : ""));
    }
  }
  const json& placement = Member(r, "placement");
  line(fmt::format(
      "placement: GPU on node {}, host buffers on node {}{}",
      Field(placement, "gpu_numa_node").empty() ? "unknown" : Field(placement, "gpu_numa_node"),
      Field(placement, "host_buffer_numa_node").empty() ? "unknown"
                                                        : Field(placement, "host_buffer_numa_node"),
      Field(placement, "host_placement_problem").empty()
          ? ""
          : " (" + Field(placement, "host_placement_problem") + ")"));
  const json& host = Member(r, "host");
  std::string cmdline;
  if (const json& tokens = Member(host, "iommu_cmdline"); tokens.is_array()) {
    for (const json& t : tokens) {
      if (t.is_string())
        cmdline += (cmdline.empty() ? "" : " ") + platform::Printable(t.get<std::string>(), 80);
    }
  }
  line(fmt::format(
      "host: kernel IOMMU settings: {}; nvidia module {}",
      cmdline.empty() ? "none on the command line" : cmdline,
      Field(host, "nvidia_module_version").empty() ? "-" : Field(host, "nvidia_module_version")));
  const json& errors = Member(r, "link_errors");
  if (errors.is_object()) {
    line("\nlink error counters:");
    for (const char* when : {"before", "during"}) {
      const json& at = Member(errors, when);
      if (!at.is_object()) {
        line(fmt::format("  {}: not read", when));
        continue;
      }
      const json& reading = Member(at, "reading");
      line(fmt::format("  {} ({}): PCIe replays {}", when, Field(at, "time"),
                       Field(reading, "replays").empty() ? "not read" : Field(reading, "replays")));
      if (const json& devices = Member(reading, "devices"); devices.is_array()) {
        for (const json& d : devices) {
          const json& aer = Member(d, "aer");
          line(fmt::format(
              "    {}: AER {} correctable, {} nonfatal, {} fatal{}", Field(d, "bdf"),
              Field(aer, "correctable"), Field(aer, "nonfatal"), Field(aer, "fatal"),
              Member(d, "readable") == true ? "" : " (not readable: " + Field(d, "problem") + ")"));
        }
      }
    }
  } else {
    line("\nlink error counters: not read");
  }
  const json& lspci = Member(r, "lspci");
  if (Member(lspci, "run") != true) {
    line("\nlspci: not run: " + Field(lspci, "reason"));
  } else if (const json& devices = Member(lspci, "devices"); devices.is_array()) {
    for (const json& d : devices) {
      line(fmt::format("\nlspci -vvv -s {}{}:", Field(d, "bdf"),
                       Field(d, "error").empty() ? "" : " (" + Field(d, "error") + ")"));
      const json& text = Member(d, "output");
      if (text.is_string()) out += platform::PrintableText(text.get<std::string>(), 64 * 1024);
      if (!out.empty() && out.back() != '\n') out += "\n";
    }
  }
  return out;
}

// How deep a record nests at most (xferd writes 7: link_errors, during, reading, devices,
// a device, aer, a count); a deeper file is not one of its records, and is never built.
constexpr int kMaxRecordDepth = 16;

json ParseRecordFile(const core::EvidenceStore& store, const std::string& name) {
  const std::string text = store.Read(name);
  if (JsonNestsDeeperThan(text, kMaxRecordDepth)) {
    throw platform::FileError("cannot read", "evidence record", store.dir() / name,
                              "it nests deeper than any record xferd writes",
                              "remove it; xferd writes its records itself", 0);
  }
  json record = json::parse(text, nullptr, /*allow_exceptions=*/false);
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
      std::filesystem::exists(kDaemonConfigFile, ec) ? kDaemonConfigFile : "");
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
      r.record = ParseRecordFile(store, e.name);
    } catch (const platform::Error& error) {
      r.problem = platform::Printable(error.what(), 500);
    }
    if (!wanted_uuid.empty()) {
      std::string uuid = Field(Member(r.record, "gpu"), "uuid");
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
        const json& verdict = Member(r.record, "verdict");
        out.push_back({{"record", r.entry.name},
                       {"path", (store.dir() / r.entry.name).string()},
                       {"gpu", r.entry.gpu},
                       {"uuid", Field(Member(r.record, "gpu"), "uuid")},
                       {"time", Field(Member(r.record, "incident"), "time")},
                       {"code", Field(verdict, "code")},
                       {"action", Field(verdict, "action")},
                       {"cause", Field(verdict, "cause")},
                       {"bytes", r.entry.bytes},
                       {"problem", r.problem}});
      }
      std::printf("%s\n", out.dump(1, ' ', false, json::error_handler_t::replace).c_str());
      return 0;
    }
    std::printf("%-30s %4s  %-24s  %-16s %-22s %8s\n", "RECORD", "GPU", "TURNED DEGRADED", "CODE",
                "CAUSE", "BYTES");
    for (const Read& r : read) {
      const json& verdict = Member(r.record, "verdict");
      if (!r.problem.empty()) {
        std::printf("%-30s %4d  unreadable: %s\n", r.entry.name.c_str(), r.entry.gpu,
                    r.problem.c_str());
        continue;
      }
      std::printf("%-30s %4d  %-24s  %-16s %-22s %8ju\n", r.entry.name.c_str(), r.entry.gpu,
                  Field(Member(r.record, "incident"), "time").c_str(),
                  (Field(verdict, "code") + "/" + Field(verdict, "action")).c_str(),
                  Field(verdict, "cause").c_str(), r.entry.bytes);
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
    std::fputs(RenderRecord(r.record, r.entry.name, store.dir() / r.entry.name).c_str(), stdout);
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
