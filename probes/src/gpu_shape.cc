// The shapes a GPU can be in that change what its probes can measure: confidential
// computing (CC) and MIG. What each means for the modes (ShapeCapabilities), which instances
// the link is probed through (LinkInstances), and when a GPU cannot be judged at all
// (UnjudgeableReason). How the driver is asked: probes/nvml/nvml_shape.cc.
#include <algorithm>
#include <string>

#include "xferd/probes/types.h"

namespace xferd::probes {

std::string_view ToString(CcState state) {
  switch (state) {
    case CcState::kUnknown: return "unknown";
    case CcState::kOff: return "off";
    case CcState::kOn: return "on";
  }
  return "unknown";
}

std::string_view ToString(MigMode mode) {
  switch (mode) {
    case MigMode::kUnknown: return "unknown";
    case MigMode::kDisabled: return "disabled";
    case MigMode::kEnabled: return "enabled";
  }
  return "unknown";
}

std::vector<std::size_t> LinkInstances(const MigState& state) {
  std::vector<std::size_t> out;
  if (!state.Enabled()) return out;
  int most = -1;
  for (const MigInstance& instance : state.instances) {
    if (instance.reachable) most = std::max(most, instance.copy_engines);
  }
  for (std::size_t i = 0; i < state.instances.size(); ++i) {
    if (state.instances[i].reachable && state.instances[i].copy_engines == most) out.push_back(i);
  }
  std::sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) {
    return state.instances[a].gpu_instance_id < state.instances[b].gpu_instance_id;
  });
  return out;
}

std::string UnjudgeableReason(const ConfidentialComputing& cc, const MigState& mig) {
  if (cc.NotReady()) {
    return "confidential computing on, GPUs not ready for work (no attestation yet: "
           "nvidia-smi conf-compute -grs says not ready)";
  }
  if (mig.Enabled() && LinkInstances(mig).empty()) {
    const bool later = std::any_of(mig.instances.begin(), mig.instances.end(),
                                   [](const MigInstance& i) { return !i.reachable; });
    return later ? "MIG enabled, its GPU instances were created after xferd started: restart "
                   "xferd to probe through them (CUDA lists MIG devices when a process starts)"
                 : "MIG enabled, no GPU instance to probe through";
  }
  return "";
}

std::string Capabilities::Reason(TransferMode mode, Direction direction) const {
  if (auto it = unsupported.find(mode); it != unsupported.end()) return it->second;
  if (auto it = unsupported_pairs.find({mode, direction}); it != unsupported_pairs.end()) {
    return it->second;
  }
  return "";
}

void ShapeCapabilities(const DeviceInfo& device, Capabilities& capabilities) {
  if (!device.cc.On()) return;
  // What the device cannot do anyway keeps its own reason.
  auto skip = [&](TransferMode mode, std::string reason) {
    capabilities.unsupported.try_emplace(mode, std::move(reason));
  };
  skip(TransferMode::kZeroCopy,
       "confidential computing on: kernels do not reach the confidential VM's memory directly "
       "(every copy goes through encrypted bounce buffers), so zero-copy measures no path "
       "workloads use there");
  const std::string managed =
      "confidential computing on: managed memory migrates through the driver's encrypted "
      "paging path, whose rate is the encryption's, not the link's (no published figure)";
  skip(TransferMode::kManaged, managed);
  skip(TransferMode::kManagedPrefetch, managed);
  capabilities.unsupported_pairs.try_emplace(
      std::pair{TransferMode::kPinned, Direction::kBidirectional},
      "confidential computing on: both directions share the one encryption path (nvbandwidth "
      "0.10 waives its bidirectional tests under CC)");
}

}  // namespace xferd::probes
