// The CUDA backend: every mode of docs/probe.md on real GPUs. Run takes a probe through its
// steps: the spec checked, the GPU's leftover work drained (device_state.h), its buffers
// provisioned (provisioning.h), the mode's probe object run (probe_run.h, transfer_probe.h),
// the host buffer's placement reported. What the GPUs are and can do: discovery.h.
#include "xferd/probes/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <optional>
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
  std::vector<DeviceInfo> Devices() const override;
  Capabilities GetCapabilities(int device) const override;
  LinkPath ReadLinkPath(int device) const override;
  ProbeSample Run(int device, const ProbeSpec& spec, std::stop_token stop) override;
  void RefreshShape() override;

 private:
  // The CUDA device a probe of physical GPU `device` goes through now (its own, or the next
  // of its MIG link instances in turn), and that instance; -1 when there is none.
  int CudaDeviceFor(int device, std::optional<MigInstance>* instance);

  CudaOptions options_;
  // Per CUDA device (the runtime's ordinal): what it is, can do, and holds.
  std::vector<DeviceInfo> cuda_devices_;
  std::vector<Capabilities> capabilities_;
  std::vector<std::unique_ptr<cuda::DeviceState>> states_;
  // Per CUDA device (under its state's lock): the managed (mode, direction) pairs warmed.
  std::vector<std::set<std::pair<TransferMode, Direction>>> warmed_;
  // The physical GPUs xferd judges (a MIG GPU is one, over its instances), their shape as
  // last read, and the turn of each MIG GPU's link instances.
  mutable std::mutex shape_mu_;
  std::vector<PhysicalGpu> gpus_;
  std::vector<std::uint64_t> turns_;
};

CudaBackend::CudaBackend(const CudaOptions& options) : options_(options) {
  for (cuda::DiscoveredGpu& gpu : cuda::DiscoverGpus(options_)) {
    states_.push_back(std::make_unique<cuda::DeviceState>(gpu.info.index, gpu.blocks));
    cuda_devices_.push_back(std::move(gpu.info));
    capabilities_.push_back(std::move(gpu.capabilities));
  }
  warmed_.resize(states_.size());
  gpus_ = GroupPhysicalGpus(cuda_devices_, *OpenNvml());
  turns_.assign(gpus_.size(), 0);
  RefreshShape();
}

std::vector<DeviceInfo> CudaBackend::Devices() const {
  std::lock_guard lock(shape_mu_);
  std::vector<DeviceInfo> out;
  for (const PhysicalGpu& gpu : gpus_) out.push_back(gpu.info);
  return out;
}

void CudaBackend::RefreshShape() {
  // Confidential computing for the host, MIG for each GPU, as NVML reports them now; what
  // it cannot read is unknown with the reason (the run log says each GPU's once). The GPUs
  // stay those of the start: CUDA lists its devices once per process.
  const std::shared_ptr<NvmlApi> nvml = OpenNvml();
  const ConfidentialComputing cc = ReadConfidentialComputing(*nvml);
  const std::vector<PhysicalGpu> now = GroupPhysicalGpus(cuda_devices_, *nvml);
  std::lock_guard lock(shape_mu_);
  for (PhysicalGpu& gpu : gpus_) {
    gpu.info.cc = cc;
    for (const PhysicalGpu& read : now) {
      if (read.info.pci_bus_id != gpu.info.pci_bus_id) continue;
      gpu.info.mig = read.info.mig;
      gpu.instance_cuda_devices = read.instance_cuda_devices;
    }
  }
}

int CudaBackend::CudaDeviceFor(int device, std::optional<MigInstance>* instance) {
  std::lock_guard lock(shape_mu_);
  const PhysicalGpu& gpu = gpus_[static_cast<std::size_t>(device)];
  if (!gpu.info.mig.Enabled()) return gpu.cuda_device;
  const std::vector<std::size_t> link = LinkInstances(gpu.info.mig);
  if (link.empty()) return -1;
  const std::size_t i = link[turns_[static_cast<std::size_t>(device)]++ % link.size()];
  *instance = gpu.info.mig.instances[i];
  return i < gpu.instance_cuda_devices.size() ? gpu.instance_cuda_devices[i] : -1;
}

// Each device's state frees what it holds on its own device, in device order, never
// waiting long for a GPU that does not answer (~DeviceState).
CudaBackend::~CudaBackend() {
  for (auto& state : states_) state.reset();
}

Capabilities CudaBackend::GetCapabilities(int device) const {
  std::lock_guard lock(shape_mu_);
  if (device < 0 || device >= static_cast<int>(gpus_.size())) return {};
  const PhysicalGpu& gpu = gpus_[static_cast<std::size_t>(device)];
  // What its CUDA device can do (a MIG GPU's: its first instance CUDA lists), less what
  // its shape takes away.
  int cuda = gpu.cuda_device;
  for (int d : gpu.instance_cuda_devices) {
    if (cuda < 0) cuda = d;
  }
  Capabilities caps = cuda >= 0 ? capabilities_[static_cast<std::size_t>(cuda)] : Capabilities{};
  ShapeCapabilities(gpu.info, caps);
  return caps;
}

LinkPath CudaBackend::ReadLinkPath(int device) const {
  DeviceInfo info;
  {
    std::lock_guard lock(shape_mu_);
    if (device < 0 || device >= static_cast<int>(gpus_.size())) {
      LinkPath path;
      path.note = "no GPU with index " + std::to_string(device);
      return path;
    }
    info = gpus_[static_cast<std::size_t>(device)].info;
  }
  return cuda::LinkPathOf(info, options_.sysfs_root);
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
  const int gpus = static_cast<int>(Devices().size());
  if (device < 0 || device >= gpus) {
    sample.status = ProbeStatus::kError;
    sample.message = "no GPU with index " + std::to_string(device) + " (this host has " +
                     std::to_string(gpus) + ")";
    return sample;
  }
  if (std::string why = GetCapabilities(device).Reason(spec.mode, spec.direction); !why.empty()) {
    sample.status = ProbeStatus::kUnsupported;
    sample.message = std::move(why);
    return sample;
  }
  if (std::string problem = ValidateSpec(spec, options_); !problem.empty()) {
    sample.status = ProbeStatus::kError;
    sample.message = problem;
    return sample;
  }
  // A GPU of a shape that takes no probe (MIG with no instance, CC GPUs not ready) moves
  // no data: the reason said.
  const DeviceInfo info = Devices()[static_cast<std::size_t>(device)];
  if (std::string why = UnjudgeableReason(info.cc, info.mig); !why.empty()) {
    sample.status = ProbeStatus::kUnsupported;
    sample.message = std::move(why);
    return sample;
  }
  // The CUDA device it goes through: its own, or one of its MIG instances.
  const int cuda_device = CudaDeviceFor(device, &sample.instance);
  if (cuda_device < 0) {
    sample.status = ProbeStatus::kUnsupported;
    sample.message = "no CUDA device to probe this GPU through";
    return sample;
  }
  device = cuda_device;
  cuda::DeviceState& state = *states_[static_cast<std::size_t>(device)];
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
