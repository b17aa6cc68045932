// `xferd probe --concurrent`: the selected GPUs alone and then together, group by group
// (core/host_groups.h), pinned each way: what each GPU gets alone and while its group moves
// data, and the group's aggregate beside the bound its shared path allows.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "xferd/probes/backend.h"

namespace xferd::cmd {

// Prints a table (or JSON) on stdout; returns 0, or 1 when a probe failed or an aggregate
// fell below its expected band.
int RunConcurrentProbes(probes::TransferBackend& backend,
                        const std::vector<probes::DeviceInfo>& selected,
                        const config::Config& config, bool json);

}  // namespace xferd::cmd
