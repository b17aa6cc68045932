#include "xferd/probes/link_watch.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>

#include "platform/files.h"
#include "platform/printable.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;
using std::chrono::steady_clock;

// A sysfs attribute is a line of at most a page.
constexpr std::size_t kMaxAttributeBytes = 4096;
// An attribute that could not be opened or read is tried again this much later, not at
// every poll: a missing file costs nothing to find missing, but a device that is gone
// would fill the log and the poll with its errors.
constexpr auto kRetryAfter = std::chrono::seconds(60);

// One attribute, kept open between polls.
class Attribute {
 public:
  explicit Attribute(fs::path path) : path_(std::move(path)) {}

  // The value now; nullopt with `problem` set when it cannot be read.
  std::optional<std::string_view> Read(steady_clock::time_point now, std::string& problem) {
    if (!file_) {
      if (failed_at_ && now - *failed_at_ < kRetryAfter) {
        problem = problem_;
        return std::nullopt;
      }
      try {
        file_ = std::make_unique<platform::PolledFile>(path_, kMaxAttributeBytes);
      } catch (const platform::FileError& e) {
        return Fail(now, e.cause(), problem);
      }
    }
    if (auto text = file_->Read()) return text;
    const std::string cause = file_->problem();
    file_.reset();  // opened again later: a device that was removed may come back
    return Fail(now, cause, problem);
  }

 private:
  std::nullopt_t Fail(steady_clock::time_point now, const std::string& cause,
                      std::string& problem) {
    failed_at_ = now;
    problem_ = platform::Printable(path_.string()) + ": " + cause;
    problem = problem_;
    return std::nullopt;
  }

  fs::path path_;
  std::unique_ptr<platform::PolledFile> file_;
  std::optional<steady_clock::time_point> failed_at_;
  std::string problem_;
};

// Both attributes of one end of a link.
struct LinkEnd {
  LinkEnd(const fs::path& dir)
      : speed(dir / "current_link_speed"), width(dir / "current_link_width") {}
  Attribute speed, width;
  std::uint64_t read_in_poll = 0;  // the poll its `state` is from
  LinkState state;
  std::string problem;
};

class SysfsLinkStateReader final : public LinkStateReader {
 public:
  SysfsLinkStateReader(fs::path sysfs_root, std::shared_ptr<NvmlApi> nvml)
      : sysfs_root_(std::move(sysfs_root)), nvml_(std::move(nvml)) {
    if (nvml_ && !nvml_->Unavailable().empty()) nvml_why_ = nvml_->Unavailable();
    if (!nvml_) nvml_why_ = "no NVML";
  }

  std::vector<WatchedLink> Links(const DeviceInfo& device, const LinkPath& path) override {
    std::vector<WatchedLink> links = WatchedLinks(path);
    if (!links.empty() || !path.pcie || path.c2c || device.integrated) return links;
    // No link in sysfs (not mounted, a container without it): NVML's view of the GPU's own.
    std::lock_guard lock(mutex_);
    const NvmlDevice dev = Handle(device);
    if (dev == nullptr) return links;
    WatchedLink own;
    own.bdf = NormalizeBdf(device.pci_bus_id);
    unsigned gen = 0, width = 0;
    if (nvml_->MaxPcieLink(dev, &gen, &width) == kNvmlSuccess) {
      own.max_gen = static_cast<int>(gen);
      own.max_width = static_cast<int>(width);
    }
    links.push_back(std::move(own));
    return links;
  }

  void Read(const std::vector<WatchedGpu>& gpus, std::vector<LinkWatchReading>& out) override {
    std::lock_guard lock(mutex_);
    const auto now = steady_clock::now();
    ++poll_;
    out.resize(gpus.size());
    for (std::size_t g = 0; g < gpus.size(); ++g) {
      const WatchedGpu& gpu = gpus[g];
      LinkWatchReading& reading = out[g];
      reading.source = "sysfs";
      reading.problem.clear();
      reading.links.resize(gpu.links.size());
      for (std::size_t i = 0; i < gpu.links.size(); ++i) {
        LinkState state = ReadEnd(gpu.links[i].bdf, now, reading.problem);
        // The GPU's own link where sysfs does not show it: NVML's.
        if (!state.Readable() && i == 0) {
          if (const auto own = NvmlLink(gpu.device)) {
            state = *own;
            reading.source = "sysfs, NVML (the GPU's own link)";
          }
        }
        reading.links[i] = state;
      }
    }
  }

  std::optional<LinkTrafficCount> Traffic(const DeviceInfo& device) override {
    std::lock_guard lock(mutex_);
    if (!nvml_ || !nvml_why_.empty() || !nvml_->HasPcieByteCounters()) return std::nullopt;
    const NvmlDevice dev = Handle(device);
    if (dev == nullptr) return std::nullopt;
    NvmlCounterValue rx, tx;
    if (nvml_->PcieByteCounters(dev, &rx, &tx) != kNvmlSuccess || rx.status != kNvmlSuccess ||
        tx.status != kNvmlSuccess || rx.timestamp_us <= 0) {
      return std::nullopt;
    }
    return LinkTrafficCount{static_cast<double>(rx.value) + static_cast<double>(tx.value),
                            static_cast<double>(rx.timestamp_us) / 1e6};
  }

  std::string Describe() const override {
    return fmt::format("current_link_speed/width under {}, each link at its upper end; {}",
                       (sysfs_root_ / "bus/pci/devices").string(),
                       nvml_why_.empty()
                           ? "the GPU's own link from NVML where sysfs does not show it; "
                             "traffic from NVML's PCIe byte counters"
                           : "NVML not readable (" + nvml_why_ +
                                 "): speed drops are judged only while xferd probes");
  }

 private:
  LinkState ReadEnd(const std::string& bdf, steady_clock::time_point now, std::string& problem) {
    auto it = ends_.find(bdf);
    if (it == ends_.end()) {
      it = ends_.try_emplace(bdf, sysfs_root_ / "bus" / "pci" / "devices" / bdf).first;
    }
    LinkEnd& end = it->second;
    if (end.read_in_poll != poll_) {  // a link several GPUs share is read once a poll
      end.read_in_poll = poll_;
      end.problem.clear();
      end.state = {};
      const auto speed = end.speed.Read(now, end.problem);
      if (speed) end.state.gen = ParseLinkSpeed(*speed);
      std::string width_problem;
      const auto width = end.width.Read(now, width_problem);
      if (width) end.state.width = ParseLinkWidth(*width);
      if (end.problem.empty()) end.problem = width_problem;
      if (end.problem.empty() && !end.state.Readable()) {
        const auto line = [](std::optional<std::string_view> text) {
          std::string_view v = text.value_or("");
          while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
          return platform::Printable(v, 40, true);
        };
        end.problem = fmt::format("{}: link speed/width not known (\"{}\", \"{}\")", bdf,
                                  line(speed), line(width));
      }
    }
    if (!end.problem.empty() && problem.empty()) problem = end.problem;
    return end.state;
  }

  std::optional<LinkState> NvmlLink(const DeviceInfo& device) {
    if (!nvml_ || !nvml_why_.empty()) return std::nullopt;
    const NvmlDevice dev = Handle(device);
    if (dev == nullptr) return std::nullopt;
    unsigned gen = 0, width = 0;
    if (nvml_->CurrentPcieLink(dev, &gen, &width) != kNvmlSuccess) return std::nullopt;
    LinkState state{static_cast<int>(gen), static_cast<int>(width)};
    if (!state.Readable()) return std::nullopt;
    return state;
  }

  NvmlDevice Handle(const DeviceInfo& device) {
    if (!nvml_ || !nvml_why_.empty()) return nullptr;
    auto [it, fresh] = handles_.try_emplace(device.uuid, nullptr);
    if (fresh && FindNvmlDevice(*nvml_, device, &it->second) != kNvmlSuccess) it->second = nullptr;
    return it->second;
  }

  fs::path sysfs_root_;
  std::shared_ptr<NvmlApi> nvml_;
  std::string nvml_why_;  // "" when NVML can be used
  std::mutex mutex_;
  std::uint64_t poll_ = 0;
  std::map<std::string, LinkEnd> ends_;        // by bdf
  std::map<std::string, NvmlDevice> handles_;  // by UUID
};

}  // namespace

std::vector<WatchedLink> WatchedLinks(const LinkPath& path) {
  std::vector<WatchedLink> out;
  if (!path.pcie || path.c2c) return out;
  for (std::size_t i = 0; i < path.links.size(); i += 2) {
    const bool paired = i + 1 < path.links.size();
    const PcieLink& read = paired ? path.links[i + 1] : path.links[i];
    out.push_back({read.bdf, paired ? path.links[i].bdf : std::string(), read.LinkMaxGen(),
                   read.LinkMaxWidth()});
  }
  return out;
}

std::unique_ptr<LinkStateReader> MakeLinkStateReader(fs::path sysfs_root,
                                                     std::shared_ptr<NvmlApi> nvml) {
  return std::make_unique<SysfsLinkStateReader>(std::move(sysfs_root), std::move(nvml));
}

}  // namespace xferd::probes
