#include "exporter/link_error_metrics.h"

namespace xferd::exporter {
namespace {

using prometheus::Labels;

std::string Class(probes::AerClass aer_class) {
  return std::string(probes::ToString(aer_class));
}

}  // namespace

LinkErrorMetrics::LinkErrorMetrics(const Families& families)
    : aer_(families.Counter(FamilyId::kAerErrors)),
      rootport_(families.Counter(FamilyId::kAerRootportErrors)),
      replays_(families.Counter(FamilyId::kPcieReplays)),
      readable_(families.Gauge(FamilyId::kErrorSourceReadable)) {}

void LinkErrorMetrics::Mirror(prometheus::Family<prometheus::Counter>& family, const Labels& labels,
                              std::uint64_t value) {
  auto [it, fresh] = shown_.try_emplace({&family, labels}, 0);
  if (!fresh && value < it->second) {
    family.Remove(&family.Add(labels));  // restarted: the next scrape sees a reset
    it->second = 0;
  }
  if (value > it->second || fresh) {
    family.Add(labels).Increment(static_cast<double>(value - it->second));
    it->second = value;
  }
}

void LinkErrorMetrics::Drop(prometheus::Family<prometheus::Counter>& family, const Labels& labels) {
  auto it = shown_.find({&family, labels});
  if (it == shown_.end()) return;
  family.Remove(&family.Add(labels));
  shown_.erase(it);
}

void LinkErrorMetrics::Record(const probes::DeviceInfo& device,
                              const core::LinkErrorReading& reading) {
  std::lock_guard lock(mutex_);
  const std::string gpu = std::to_string(device.index);
  std::set<std::string> now;
  for (const core::LinkErrorDevice& d : reading.aer) {
    const std::string& bdf = d.read.bdf;
    now.insert(bdf);
    for (probes::AerClass c : probes::kAllAerClasses) {
      const auto i = static_cast<std::size_t>(c);
      const Labels labels{{"gpu", gpu}, {"device", bdf}, {"class", Class(c)}};
      if (d.read.device[i]) {
        Mirror(aer_, labels, *d.read.device[i]);
      } else {
        Drop(aer_, labels);
      }
      if (d.read.rootport[i]) {
        Mirror(rootport_, labels, *d.read.rootport[i]);
      } else {
        Drop(rootport_, labels);
      }
    }
    readable_.Add({{"gpu", gpu}, {"device", bdf}, {"source", "aer"}}).Set(d.readable ? 1 : 0);
  }
  // Devices no longer on the path (a tree changed under a running daemon, a hot swap).
  for (const std::string& gone : devices_[device.index]) {
    if (now.contains(gone)) continue;
    for (probes::AerClass c : probes::kAllAerClasses) {
      const Labels labels{{"gpu", gpu}, {"device", gone}, {"class", Class(c)}};
      Drop(aer_, labels);
      Drop(rootport_, labels);
    }
    const Labels readable{{"gpu", gpu}, {"device", gone}, {"source", "aer"}};
    if (readable_.Has(readable)) readable_.Remove(&readable_.Add(readable));
  }
  devices_[device.index] = std::move(now);

  const Labels replays{{"gpu", gpu}};
  if (reading.replays) {
    Mirror(replays_, replays, *reading.replays);
  } else {
    Drop(replays_, replays);
  }
  readable_.Add({{"gpu", gpu}, {"device", device.pci_bus_id}, {"source", "nvml_replay"}})
      .Set(reading.replays_readable ? 1 : 0);
}

}  // namespace xferd::exporter
