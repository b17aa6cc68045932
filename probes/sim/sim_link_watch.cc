// The link watch's reader on the simulated device: its sysfs tree read as on a real host
// (the same reader: kept-open attributes, one pread each), or the built-in host's links,
// with what the simulated device does to each GPU's own link on top, and the traffic of
// its link model.
#include <fmt/format.h>

#include <algorithm>

#include "xferd/probes/link_watch.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::probes {
namespace {

class SimLinkStateReader final : public LinkStateReader {
 public:
  SimLinkStateReader(const SimBackend& sim, double pcie_bytes_per_s)
      : sim_(sim),
        load_(std::max(0.0, pcie_bytes_per_s)),
        tree_(sim.SysfsRoot().empty() ? nullptr : MakeLinkStateReader(sim.SysfsRoot(), nullptr)) {}

  std::vector<WatchedLink> Links(const DeviceInfo& device, const LinkPath& path) override {
    if (tree_) return tree_->Links(device, path);
    // The built-in host lists the GPU's link and its switch's uplink: two links, not the two
    // ends of one.
    std::vector<WatchedLink> out;
    if (!path.pcie || path.c2c) return out;
    for (const PcieLink& link : path.links) {
      out.push_back({link.bdf, "", link.LinkMaxGen(), link.LinkMaxWidth()});
    }
    return out;
  }

  void Read(const std::vector<WatchedGpu>& gpus, std::vector<LinkWatchReading>& out) override {
    if (tree_) {
      tree_->Read(gpus, out);
    } else {
      out.resize(gpus.size());
      for (std::size_t g = 0; g < gpus.size(); ++g) {
        // In memory: ReadLinkPath applies the device's faults and idle speed itself.
        const LinkPath path = sim_.ReadLinkPath(gpus[g].device.index);
        LinkWatchReading& reading = out[g];
        reading.problem.clear();
        reading.links.resize(gpus[g].links.size());
        for (std::size_t i = 0; i < gpus[g].links.size(); ++i) {
          reading.links[i] = i < path.links.size()
                                 ? LinkState{path.links[i].current_gen, path.links[i].current_width}
                                 : LinkState{};
        }
      }
    }
    for (std::size_t g = 0; g < gpus.size() && g < out.size(); ++g) {
      out[g].source = "simulated";
      if (!tree_ || out[g].links.empty()) continue;
      // The simulated device's own link on the tree: its faults, and power saving at idle
      // unless a steady load keeps it trained.
      const SimBackend::OwnLinkCaps caps = sim_.OwnLink(gpus[g].device.index);
      LinkState& own = out[g].links.front();
      const auto cap = [](int& value, int limit) {
        if (limit > 0 && value > limit) value = limit;
      };
      cap(own.gen, caps.fault_gen);
      cap(own.width, caps.fault_width);
      if (load_ <= 0) cap(own.gen, caps.idle_gen);
    }
  }

  std::optional<LinkTrafficCount> Traffic(const DeviceInfo& device) override {
    if (!device.simulated) return std::nullopt;
    const auto counters = sim_.ReadLinkCounters(device.index);
    if (!counters) return std::nullopt;
    // The steady load ([simulate] pcie_bytes_per_second) flows all the time.
    return LinkTrafficCount{counters->rx_bytes + counters->tx_bytes + load_ * counters->at_s,
                            counters->at_s};
  }

  std::string Describe() const override {
    return fmt::format("simulated: {}; traffic of the simulated link{}",
                       tree_ ? "current_link_speed/width under " +
                                   (sim_.SysfsRoot() / "bus/pci/devices").string() +
                                   ", each link at its upper end"
                             : std::string("the built-in host's links"),
                       load_ > 0 ? fmt::format(" plus a steady {:.1f} GB/s", load_ / 1e9) : "");
  }

 private:
  const SimBackend& sim_;
  double load_;
  std::unique_ptr<LinkStateReader> tree_;
};

}  // namespace

std::unique_ptr<LinkStateReader> MakeSimLinkStateReader(const SimBackend& sim,
                                                        double pcie_bytes_per_s) {
  return std::make_unique<SimLinkStateReader>(sim, pcie_bytes_per_s);
}

}  // namespace xferd::probes
