#include "xferd/probes/link_errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>

#include "platform/files.h"
#include "platform/printable.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

// The kernel writes these from one page: anything larger is not an AER file.
constexpr std::size_t kMaxAerFileBytes = 4096;
// A class has at most 32 error bits, plus the total.
constexpr std::size_t kMaxAerLines = 40;

// Without the whitespace around it (named apart from topology.cc's: unity builds join them).
std::string_view Stripped(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::optional<std::uint64_t> ParseCount(std::string_view text) {
  std::uint64_t value = 0;
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// An error kind as the kernel names it: letters, digits, spaces and a few marks
// ("RxErr", "RELAY_NUM Rollover", "dev_cor_errs_bit[9]").
bool LooksLikeKind(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == ' ' || c == '_' || c == '-' || c == '[' || c == ']' ||
           c == '(' || c == ')' || c == '/' || c == '.';
  });
}

std::string_view TotalLineOf(AerClass aer_class) {
  switch (aer_class) {
    case AerClass::kCorrectable: return "TOTAL_ERR_COR";
    case AerClass::kNonFatal: return "TOTAL_ERR_NONFATAL";
    case AerClass::kFatal: return "TOTAL_ERR_FATAL";
  }
  return "TOTAL_ERR_COR";
}

std::size_t Index(AerClass aer_class) {
  return static_cast<std::size_t>(aer_class);
}

// A PCI bridge (class 0x0604xx): at the top of a path, the root port.
bool IsBridge(const fs::path& dir) {
  const auto text = platform::TryReadFileBounded(dir / "class", kMaxAerFileBytes);
  if (!text) return false;
  std::string klass(Stripped(*text));
  std::transform(klass.begin(), klass.end(), klass.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return klass.starts_with("0x0604");
}

// One file's text, or why it cannot be read; `missing` when it does not exist.
struct FileText {
  std::optional<std::string> text;
  std::string problem;
  bool missing = false;
};

FileText ReadAerFile(const fs::path& file) {
  FileText out;
  try {
    out.text = platform::ReadFileBounded(file, kMaxAerFileBytes, "AER counter file");
  } catch (const platform::FileError& e) {
    out.missing = e.error() == ENOENT;
    out.problem = platform::PrintablePath(file.string()) + ": " + e.cause();
  }
  return out;
}

void AddProblem(AerCounters& c, const std::string& problem) {
  if (!c.problem.empty()) c.problem += "; ";
  c.problem += problem;
}

AerCounters ReadDevice(const fs::path& sysfs_root, const std::string& bdf, bool top) {
  AerCounters c;
  c.bdf = bdf;
  const fs::path dir = sysfs_root / "bus" / "pci" / "devices" / bdf;
  int missing = 0;
  std::vector<std::string> problems;
  for (AerClass aer_class : kAllAerClasses) {
    const fs::path file = dir / DeviceFileOf(aer_class);
    FileText read = ReadAerFile(file);
    if (!read.text) {
      missing += read.missing ? 1 : 0;
      problems.push_back(read.problem);
      continue;
    }
    AerFile parsed = ParseAerFile(*read.text, aer_class);
    if (!parsed.problem.empty()) {
      problems.push_back(platform::PrintablePath(file.string()) + ": " + parsed.problem);
      continue;
    }
    c.device[Index(aer_class)] = parsed.total;
    for (AerKind& kind : parsed.kinds) c.kinds.push_back(std::move(kind));
  }
  if (missing == static_cast<int>(kAllAerClasses.size())) {
    c.missing = true;
    c.problem = "no AER counters in sysfs (" +
                platform::PrintablePath((dir / "aer_dev_*").string()) +
                " missing): the device has no AER capability or the kernel does not report "
                "it (AER off, a virtual machine)";
    return c;
  }
  for (const std::string& p : problems) AddProblem(c, p);
  c.root_port = top && IsBridge(dir);
  if (!c.root_port) return c;
  for (AerClass aer_class : kAllAerClasses) {
    const fs::path file = dir / RootPortFileOf(aer_class);
    FileText read = ReadAerFile(file);
    if (!read.text) {
      AddProblem(c, read.problem);
      continue;
    }
    if (const auto count = ParseAerCount(*read.text)) {
      c.rootport[Index(aer_class)] = *count;
    } else {
      AddProblem(c, platform::PrintablePath(file.string()) + ": not a count: \"" +
                        platform::Printable(Stripped(*read.text), 40, true) + "\"");
    }
  }
  return c;
}

// Replays from NVML, the rest from sysfs.
class SysfsLinkErrorReader final : public LinkErrorReader {
 public:
  SysfsLinkErrorReader(fs::path sysfs_root, std::shared_ptr<NvmlApi> nvml)
      : sysfs_root_(std::move(sysfs_root)), nvml_(std::move(nvml)) {}

  LinkErrors Read(const DeviceInfo& device, const LinkPath& path) override {
    LinkErrors out;
    out.aer = ReadAer(sysfs_root_, path);
    out.replays = Replays(device);
    return out;
  }

  std::string Describe() const override {
    const std::string nvml = nvml_->Unavailable();
    return fmt::format("AER counters under {}; PCIe replays {}", sysfs_root_.string(),
                       nvml.empty() ? "from NVML" : "not readable: " + nvml);
  }

 private:
  ReplayCounter Replays(const DeviceInfo& device) {
    ReplayCounter r;
    if (const std::string why = nvml_->Unavailable(); !why.empty()) {
      r.problem = "no NVML: " + why;
      r.missing = true;
      return r;
    }
    std::lock_guard lock(mutex_);
    auto [it, fresh] = handles_.try_emplace(device.uuid, nullptr);
    if (fresh) {
      if (const NvmlReturn rc = FindNvmlDevice(*nvml_, device, &it->second); rc != kNvmlSuccess) {
        unknown_[device.uuid] = "NVML does not know this GPU: " + nvml_->ErrorText(rc);
      }
    }
    if (it->second == nullptr) {
      r.problem = unknown_[device.uuid];
      return r;
    }
    unsigned replays = 0;
    const NvmlReturn rc = nvml_->PcieReplayCounter(it->second, &replays);
    if (rc == kNvmlSuccess) {
      r.value = replays;
    } else if (rc == kNvmlErrorNotSupported) {
      r.problem = "nvmlDeviceGetPcieReplayCounter: not supported on this GPU (N/A)";
      r.missing = true;
    } else {
      r.problem = "nvmlDeviceGetPcieReplayCounter: " + nvml_->ErrorText(rc);
    }
    return r;
  }

  fs::path sysfs_root_;
  std::shared_ptr<NvmlApi> nvml_;
  std::mutex mutex_;
  std::map<std::string, NvmlDevice> handles_;  // by UUID
  std::map<std::string, std::string> unknown_;
};

}  // namespace

std::string_view ToString(AerClass aer_class) {
  switch (aer_class) {
    case AerClass::kCorrectable: return "correctable";
    case AerClass::kNonFatal: return "nonfatal";
    case AerClass::kFatal: return "fatal";
  }
  return "correctable";
}

std::string_view DeviceFileOf(AerClass aer_class) {
  switch (aer_class) {
    case AerClass::kCorrectable: return "aer_dev_correctable";
    case AerClass::kNonFatal: return "aer_dev_nonfatal";
    case AerClass::kFatal: return "aer_dev_fatal";
  }
  return "aer_dev_correctable";
}

std::string_view RootPortFileOf(AerClass aer_class) {
  switch (aer_class) {
    case AerClass::kCorrectable: return "aer_rootport_total_err_cor";
    case AerClass::kNonFatal: return "aer_rootport_total_err_nonfatal";
    case AerClass::kFatal: return "aer_rootport_total_err_fatal";
  }
  return "aer_rootport_total_err_cor";
}

AerFile ParseAerFile(std::string_view text, AerClass aer_class) {
  AerFile out;
  const std::string_view total_name = TotalLineOf(aer_class);
  bool total_seen = false;
  std::size_t lines = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view raw = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::string_view line = Stripped(raw);
    if (line.empty()) continue;
    ++lines;
    const auto fail = [&](const std::string& why) {
      out.problem = "line " + std::to_string(lines) + " \"" + platform::Printable(line, 60, true) +
                    "\" " + why;
      return out;
    };
    if (lines > kMaxAerLines) {
      return fail("is one of more than " + std::to_string(kMaxAerLines) +
                  " lines: not an AER counter file");
    }
    if (total_seen) return fail("follows the " + std::string(total_name) + " line, the last one");
    const std::size_t space = line.find_last_of(" \t");
    if (space == std::string_view::npos) return fail("is not \"<error kind> <count>\"");
    const std::string_view name = Stripped(line.substr(0, space));
    const auto count = ParseCount(line.substr(space + 1));
    if (!count) return fail("does not end in a count");
    if (name.starts_with("TOTAL_")) {
      if (name != total_name) return fail("is not the " + std::string(total_name) + " line");
      out.total = *count;
      total_seen = true;
      continue;
    }
    if (!LooksLikeKind(name)) return fail("names no error kind");
    out.kinds.push_back({aer_class, std::string(name), *count});
  }
  if (!total_seen) {
    out.kinds.clear();
    out.problem = "no " + std::string(total_name) + " line" +
                  (lines == 0 ? " (the file is empty)" : " (the kernel ends the file with it)");
  }
  return out;
}

std::optional<std::uint64_t> ParseAerCount(std::string_view text) {
  return ParseCount(Stripped(text));
}

std::vector<AerCounters> ReadAer(const fs::path& sysfs_root, const LinkPath& path) {
  std::vector<AerCounters> out;
  for (std::size_t i = 0; i < path.links.size(); ++i) {
    out.push_back(ReadDevice(sysfs_root, path.links[i].bdf, i + 1 == path.links.size()));
  }
  return out;
}

std::unique_ptr<LinkErrorReader> MakeLinkErrorReader(fs::path sysfs_root,
                                                     std::shared_ptr<NvmlApi> nvml) {
  return std::make_unique<SysfsLinkErrorReader>(std::move(sysfs_root), std::move(nvml));
}

}  // namespace xferd::probes
