#include "core/host_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/band.h"
#include "xferd/probes/shared_paths.h"

namespace xferd::core {
namespace {

using probes::LinkPath;
using probes::PcieLink;

// Whether the path's PCIe links are how the GPU reaches host memory.
bool HasPciePath(const LinkPath& path) {
  return path.pcie && !path.c2c && !path.links.empty();
}

// The narrowest known link of `path` from position `from` up to the root port, as
// "0000:16:00.0 Gen5 x16" (the deepest of equals); "" when none is known.
std::string NarrowestFrom(const LinkPath& path, std::size_t from) {
  const PcieLink* narrowest = nullptr;
  for (std::size_t i = from; i < path.links.size(); ++i) {
    const double rate = path.links[i].CurrentBytesPerSecond();
    if (rate <= 0) continue;
    if (narrowest == nullptr || rate < narrowest->CurrentBytesPerSecond()) {
      narrowest = &path.links[i];
    }
  }
  if (narrowest == nullptr) return "";
  return narrowest->bdf + " " +
         probes::FormatLink(narrowest->current_gen, narrowest->current_width);
}

HostGroup MakeGroup(std::string name, const std::vector<std::size_t>& members,
                    const std::vector<probes::DeviceInfo>& devices,
                    const std::vector<LinkPath>& paths, std::string shared_link) {
  HostGroup group;
  group.name = std::move(name);
  group.shared_link = std::move(shared_link);
  std::vector<LinkPath> member_paths;
  bool all_known = true;
  for (std::size_t m : members) {
    group.gpus.push_back(devices[m].index);
    member_paths.push_back(paths[m]);
    const double alone = HostLinkRate(paths[m]);
    all_known = all_known && alone > 0;
    group.unshared_bytes_per_s += alone;
  }
  std::sort(group.gpus.begin(), group.gpus.end());
  group.capacity_bytes_per_s = probes::AggregateCapacity(member_paths, &BandRate);
  if (!all_known) group.unshared_bytes_per_s = 0;
  return group;
}

}  // namespace

std::string HostGroup::GpuList() const {
  return fmt::format("{}", fmt::join(gpus, ","));
}

bool HostGroup::SharedLinkLimits() const {
  // A shared link limits the group when the members together could carry noticeably
  // more than it (rounding aside).
  return capacity_bytes_per_s > 0 && unshared_bytes_per_s > 1.01 * capacity_bytes_per_s;
}

std::vector<HostGroup> FindGroups(const std::vector<probes::DeviceInfo>& devices,
                                  const std::vector<LinkPath>& paths, std::size_t min_host_size) {
  std::vector<HostGroup> groups;
  if (devices.empty() || devices.size() != paths.size()) return groups;

  // Every port above a GPU (not its own link) and the GPUs below it.
  std::map<std::string, std::set<std::size_t>> below;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (!HasPciePath(paths[d])) continue;
    for (std::size_t i = 1; i < paths[d].links.size(); ++i) below[paths[d].links[i].bdf].insert(d);
  }
  // Each set of GPUs behind a port is named after the deepest port with that set: the
  // first met on a member's way up.
  std::map<std::set<std::size_t>, std::pair<std::string, std::string>> sets;  // -> name, link
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (!HasPciePath(paths[d])) continue;
    for (std::size_t i = 1; i < paths[d].links.size(); ++i) {
      const std::set<std::size_t>& members = below[paths[d].links[i].bdf];
      if (sets.contains(members)) continue;
      sets.emplace(members, std::make_pair(probes::NormalizeBdf(paths[d].links[i].bdf),
                                           NarrowestFrom(paths[d], i)));
    }
  }

  if (devices.size() >= std::max<std::size_t>(min_host_size, 1)) {
    std::vector<std::size_t> all(devices.size());
    for (std::size_t d = 0; d < all.size(); ++d) all[d] = d;
    const auto shared = sets.find(std::set<std::size_t>(all.begin(), all.end()));
    groups.push_back(
        MakeGroup("host", all, devices, paths, shared != sets.end() ? shared->second.second : ""));
  }
  std::vector<HostGroup> uplinks;
  for (const auto& [members, port] : sets) {
    if (members.size() < 2) continue;
    uplinks.push_back(MakeGroup("uplink_" + port.first,
                                std::vector<std::size_t>(members.begin(), members.end()), devices,
                                paths, port.second));
  }
  std::sort(uplinks.begin(), uplinks.end(),
            [](const HostGroup& a, const HostGroup& b) { return a.name < b.name; });
  groups.insert(groups.end(), uplinks.begin(), uplinks.end());
  return groups;
}

std::vector<probes::ProbeSpec> PlanConcurrent(const Settings& settings, Deadlines deadlines,
                                              double link_bytes_per_s) {
  Settings pinned = settings;
  pinned.modes = {probes::TransferMode::kPinned};
  pinned.sizes = {*std::max_element(settings.sizes.begin(), settings.sizes.end())};
  return PlanProbes(pinned, deadlines, link_bytes_per_s);
}

bool GroupRun::AllOk() const {
  return !samples.empty() && std::all_of(samples.begin(), samples.end(), [](const auto& s) {
    return s.status == probes::ProbeStatus::kOk;
  });
}

double GroupRun::Aggregate() const {
  if (!AllOk()) return 0;
  double sum = 0;
  for (const probes::ProbeSample& s : samples) sum += s.MedianBandwidth();
  return sum;
}

std::map<int, Diagnosis> DiagnoseSharedUplink(const GroupRun& run) {
  std::map<int, Diagnosis> out;
  if (!run.group.name.starts_with("uplink_") || !run.group.SharedLinkLimits()) return out;
  const std::string pair = PairName(run.spec.mode, run.spec.direction);
  for (std::size_t i = 0; i < run.samples.size() && i < run.devices.size(); ++i) {
    const probes::ProbeSample& s = run.samples[i];
    const double solo = i < run.solo_bytes_per_s.size() ? run.solo_bytes_per_s[i] : 0.0;
    if (s.status != probes::ProbeStatus::kOk || solo <= 0) continue;
    const double together = s.MedianBandwidth();
    if (together >= kSharedUplinkRatio * solo) continue;
    const std::string port = run.group.name.substr(std::string("uplink_").size());
    out[run.devices[i].index] = Diagnosis{
        DiagnosisCause::kSharedUplink,
        fmt::format("{} shared by GPUs {}: {} {} together, {} alone", run.group.shared_link,
                    run.group.GpuList(), pair, FormatGBps(together), FormatGBps(solo)),
        fmt::format("The GPUs behind the switch at {} share its uplink ({}), which carries "
                    "less than their own links together: while they all move data each gets "
                    "a share of it. Not a fault while the uplink runs at its maximum (`lspci -vv "
                    "-s {}`: LnkSta against LnkCap); place data-heavy jobs on GPUs behind "
                    "different switches.",
                    port, run.group.shared_link, port)};
  }
  return out;
}

}  // namespace xferd::core
