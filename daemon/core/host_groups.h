// Concurrent groups: sets of GPUs that move data at the same moment, found in the topology,
// what they should carry together, and what it means when one of them gets far less than
// alone. `xferd run` (the scheduler, at [probe] concurrent_interval) and `xferd probe
// --concurrent` both take their groups, plans and causes from here, their band from
// core/band.h (GroupBand).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/diagnosis.h"
#include "core/plan.h"
#include "core/settings.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::core {

struct HostGroup {
  // "host" (every probed GPU) or "uplink_<bdf>" (the GPUs behind one upstream port; the
  // port's address in lower case): the `group` label.
  std::string name;
  std::vector<int> gpus;  // device indices, ascending
  // The narrowest link every member's path crosses, "0000:16:00.0 Gen5 x16"; "" when they
  // share none (or the topology is unknown).
  std::string shared_link;
  // What the members' paths carry together per direction, theoretical
  // (probes::AggregateCapacity of each link's core::BandRate): what GroupBand is a share
  // of; 0 when a member's path is unknown.
  double capacity_bytes_per_s = 0;
  // What the members' paths would carry if nothing were shared: the sum of each one's
  // core::HostLinkRate. Above capacity_bytes_per_s when a shared link is the bottleneck.
  double unshared_bytes_per_s = 0;

  std::string GpuList() const;  // "0,1,2": the `gpus` label
  bool SharedLinkLimits() const;
};

// The groups of `devices` (paths[i] is devices[i]'s path): "host" when there are at least
// `min_host_size` devices (2 for the daemon; `xferd probe --concurrent` also measures a
// group of one), then one "uplink_<bdf>" per set of at least 2 devices behind one upstream
// port, named after the deepest port they share, ordered by name. Integrated and NVLink-C2C
// GPUs have no uplink. At most one group per device plus one.
std::vector<HostGroup> FindGroups(const std::vector<probes::DeviceInfo>& devices,
                                  const std::vector<probes::LinkPath>& paths,
                                  std::size_t min_host_size = 2);

// The probes of a concurrent run: pinned h2d, d2h, and both ways when `bidirectional`, at
// the largest configured size (the one nearest the link's rate), as PlanProbes makes them
// on a link of `link_bytes_per_s` (the group's members': so their solo figures, at the
// size their own plan gives them, compare).
std::vector<probes::ProbeSpec> PlanConcurrent(const Settings& settings,
                                              Deadlines deadlines = Deadlines::kAsConfigured,
                                              double link_bytes_per_s = 0);

// One concurrent run of one group in one direction.
struct GroupRun {
  HostGroup group;
  probes::ProbeSpec spec;
  std::vector<probes::DeviceInfo> devices;   // the members, in group order
  std::vector<probes::ProbeSample> samples;  // what each got while all moved data
  // What each got alone (the same pinned probe in the same cycle or the last one); 0 when
  // unknown.
  std::vector<double> solo_bytes_per_s;

  bool AllOk() const;
  // The sum of the members' medians; 0 unless every member's probe was ok.
  double Aggregate() const;
};

// Below this share of its solo figure while its group moves data, a GPU is "well below".
inline constexpr double kSharedUplinkRatio = 0.8;

// shared_uplink: for a run of an uplink group whose shared link is the bottleneck
// (capacity below what the members' own paths carry), each member that got less than
// kSharedUplinkRatio of its solo figure. Keyed by device index; the detail names the link,
// the GPUs behind it and the figures.
std::map<int, Diagnosis> DiagnoseSharedUplink(const GroupRun& run);

}  // namespace xferd::core
