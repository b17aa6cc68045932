// Several GPUs moving data at once: what each gets where their paths share links, and what
// they carry together. Both the simulated device (its model of a busy switch) and the
// expected aggregate of a concurrent group (core/host_groups.h) use this one rule.
//
// Capacities are theoretical bytes/s per direction: each PCIe link on a path at `rate` (its
// current rate unless the caller asks for another; a link is known by the address of the
// device that reports it, so paths through one switch meet at its ports); an NVLink-C2C
// path is one link of kC2cBytesPerSecond of its own; links of unknown rate are left out,
// and a path with no known link has no capacity.
#pragma once

#include <vector>

#include "xferd/probes/topology.h"

namespace xferd::probes {

// The per-direction rate of one link that the capacities are made of.
using LinkRate = double (*)(const PcieLink& link);
// A link at the rate it trained to (PcieLink::CurrentBytesPerSecond).
double TrainedRate(const PcieLink& link);

// Max-min fair shares (progressive filling): every path's share grows at the same pace
// until one of its links is full; a full link stops every path across it. Bytes/s per
// path, in order; 0 for a path with no known capacity. A path alone gets its narrowest
// link's rate.
std::vector<double> FairShares(const std::vector<LinkPath>& paths, LinkRate rate_of = &TrainedRate);

// What the paths carry together: the sum of their fair shares, which on a tree of links
// is the sum over independent paths, each capped by its narrowest link, capped by every
// link they share. 0 when any path's capacity is unknown.
double AggregateCapacity(const std::vector<LinkPath>& paths, LinkRate rate_of = &TrainedRate);

}  // namespace xferd::probes
