// The CUDA backend: every mode of docs/probe.md on real GPUs. Run takes a probe through its
// steps: the spec checked, the GPU's leftover work drained (device_state.h), its buffers
// provisioned (provisioning.h), the mode's probe object run (probe_run.h, transfer_probe.h),
// the host buffer's placement reported. What the GPUs are and can do: discovery.h.
#include "xferd/probes/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/device_state.h"
#include "probes/cuda/discovery.h"
#include "probes/cuda/probe_abort.h"
#include "probes/cuda/probe_run.h"
#include "probes/cuda/provisioning.h"
#include "probes/cuda/transfer_probe.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {

bool CudaBackendBuilt() {
  return true;
}

namespace {

class CudaBackend final : public TransferBackend {
 public:
  explicit CudaBackend(const CudaOptions& options);
  ~CudaBackend() override;

  std::string Name() const override { return "cuda"; }
  std::vector<DeviceInfo> Devices() const override { return devices_; }
  Capabilities GetCapabilities(int device) const override;
  LinkPath ReadLinkPath(int device) const override;
  ProbeSample Run(int device, const ProbeSpec& spec, std::stop_token stop) override;
  void RefreshShape() override;

 private:
  CudaOptions options_;
  std::vector<DeviceInfo> devices_;
  std::vector<Capabilities> capabilities_;
  std::vector<std::unique_ptr<cuda::DeviceState>> states_;
  // Per device (under its state's lock): the managed (mode, direction) pairs warmed once.
  std::vector<std::set<std::pair<TransferMode, Direction>>> warmed_;
};

CudaBackend::CudaBackend(const CudaOptions& options) : options_(options) {
  for (cuda::DiscoveredGpu& gpu : cuda::DiscoverGpus(options_)) {
    states_.push_back(std::make_unique<cuda::DeviceState>(gpu.info.index, gpu.blocks));
    devices_.push_back(std::move(gpu.info));
    capabilities_.push_back(std::move(gpu.capabilities));
  }
  warmed_.resize(states_.size());
  RefreshShape();
}

void CudaBackend::RefreshShape() {
  // Confidential computing for the host, MIG for each GPU, as NVML reports them now; what
  // it cannot read is unknown with the reason (the log says it once, at start and reload).
  const std::shared_ptr<NvmlApi> nvml = OpenNvml();
  const ConfidentialComputing cc = ReadConfidentialComputing(*nvml);
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    DeviceInfo& info = devices_[i];
    info.cc = cc;
    NvmlDevice handle = nullptr;
    if (const NvmlReturn rc = FindNvmlDevice(*nvml, info, &handle); rc == kNvmlSuccess) {
      info.mig = ReadMig(*nvml, handle);
    } else {
      info.mig = {};
      info.mig.mode = MigMode::kUnknown;
      info.mig.problem = nvml->Unavailable().empty()
                             ? "NVML does not know the GPU: " + nvml->ErrorText(rc)
                             : "NVML not usable: " + nvml->Unavailable();
    }
    ShapeCapabilities(info, capabilities_[i]);
  }
}

// Each device's state frees what it holds on its own device, in device order, never
// waiting long for a GPU that does not answer (~DeviceState).
CudaBackend::~CudaBackend() {
  for (auto& state : states_) state.reset();
}

Capabilities CudaBackend::GetCapabilities(int device) const {
  if (device < 0 || device >= static_cast<int>(capabilities_.size())) return {};
  return capabilities_[device];
}

LinkPath CudaBackend::ReadLinkPath(int device) const {
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    LinkPath path;
    path.note = "no GPU with index " + std::to_string(device);
    return path;
  }
  return cuda::LinkPathOf(devices_[device], options_.sysfs_root);
}

// The spec's general problems (SpecProblem), then this backend's own limit.
std::string ValidateSpec(const ProbeSpec& spec, const CudaOptions& options) {
  if (std::string problem = SpecProblem(spec); !problem.empty()) return problem;
  if (spec.size_bytes > options.max_size_bytes) {
    return "size " + FormatSize(spec.size_bytes) + " is larger than the " +
           FormatSize(options.max_size_bytes) +
           " the backend's buffers were sized for (max_size_bytes): raise it to the largest "
           "probe size";
  }
  return "";
}

ProbeSample CudaBackend::Run(int device, const ProbeSpec& spec, std::stop_token stop) {
  ProbeSample sample;
  sample.spec = spec;
  sample.bytes_per_transfer =
      spec.direction == Direction::kBidirectional ? 2 * spec.size_bytes : spec.size_bytes;
  if (device < 0 || device >= static_cast<int>(states_.size())) {
    sample.status = ProbeStatus::kError;
    sample.message = "no GPU with index " + std::to_string(device) + " (this host has " +
                     std::to_string(states_.size()) + ")";
    return sample;
  }
  if (std::string why = capabilities_[device].Reason(spec.mode, spec.direction); !why.empty()) {
    sample.status = ProbeStatus::kUnsupported;
    sample.message = std::move(why);
    return sample;
  }
  if (std::string problem = ValidateSpec(spec, options_); !problem.empty()) {
    sample.status = ProbeStatus::kError;
    sample.message = problem;
    return sample;
  }
  cuda::DeviceState& state = *states_[device];
  std::lock_guard lock(state.mu);
  try {
    cuda::Check(cudaSetDevice(device), "cudaSetDevice");
    state.DrainUnfinishedWork(spec, stop);  // before allocating: a hung GPU stops here
    cuda::Provision(state, options_, spec);
    cuda::ProbeRun run(state, options_, spec, stop, sample);
    const std::unique_ptr<cuda::TransferProbe> probe = cuda::MakeTransferProbe(run);
    const bool managed =
        spec.mode == TransferMode::kManaged || spec.mode == TransferMode::kManagedPrefetch;
    std::uint64_t warm_rounds = 0;
    if (managed && warmed_[device].insert({spec.mode, spec.direction}).second) {
      // First use of the managed path this way on this GPU: warmed until steady, its cost
      // in this probe's device time (transfer_probe.h, docs/probe.md).
      warm_rounds = cuda::WarmUntilSteady(*probe, stop, run.progress()).size();
    }
    cuda::RunTransfers(*probe, spec, stop, run.progress(), sample);
    // Its pages crossed both ways in each of those rounds too: the link counters saw them.
    sample.link_h2d_bytes += warm_rounds * spec.size_bytes;
    sample.link_d2h_bytes += warm_rounds * spec.size_bytes;
    sample.status = ProbeStatus::kOk;
    cuda::ReportPlacement(state, spec.mode, sample);
  } catch (const cuda::ProbeAbort& abort) {
    sample.status = abort.status;
    sample.message = abort.message;
    state.unfinished_work = true;  // whatever was enqueued may still run: drain it first
  } catch (const std::exception& e) {
    sample.status = ProbeStatus::kError;
    sample.message = e.what();
  }
  if (sample.status != ProbeStatus::kOk) sample.overlap_ratio.reset();
  return sample;
}

}  // namespace

std::unique_ptr<TransferBackend> MakeCudaBackend(const CudaOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace xferd::probes
