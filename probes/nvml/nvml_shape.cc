// Confidential computing and MIG as NVML reports them: the readers over NvmlApi, so the
// decisions (what counts as CC on, which MIG device is which instance of which profile) are
// tested against the fake (tests/testing/fakes.h). Each unreadable answer is "unknown" with
// the reason, never a guess.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "xferd/probes/nvml.h"

namespace xferd::probes {

// Calls a driver lacks: the readers then say what they could not read.
NvmlReturn NvmlApi::ConfComputeSettings(NvmlConfComputeState*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::ConfComputeState(NvmlConfComputeState*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::ConfComputeGpusReady(unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::MigMode(NvmlDevice, unsigned*, unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::MaxMigDeviceCount(NvmlDevice, unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::MigDeviceByIndex(NvmlDevice, unsigned, NvmlDevice*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::ParentOfMigDevice(NvmlDevice, NvmlDevice*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::GpuInstanceId(NvmlDevice, unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::ComputeInstanceId(NvmlDevice, unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::GpuInstanceProfileId(NvmlDevice, unsigned, unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::GpuInstanceProfileInfo(NvmlDevice, unsigned, NvmlGpuInstanceProfile*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::DeviceCount(unsigned*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::DeviceByIndex(unsigned, NvmlDevice*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::Uuid(NvmlDevice, std::string*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::Name(NvmlDevice, std::string*) {
  return kNvmlErrorFunctionNotFound;
}
NvmlReturn NvmlApi::PciBusId(NvmlDevice, std::string*) {
  return kNvmlErrorFunctionNotFound;
}

namespace {

std::string Environment(unsigned environment) {
  switch (environment) {
    case 1: return "simulation environment";
    case 2: return "production";
  }
  return "";
}

std::string JoinDetail(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + ", " + b;
}

// "MIG 3g.71gb" -> "3g.71gb", as dcgm-exporter's GPU_I_PROFILE and nvidia-smi write it; a
// v1 profile (no name): from its slices and memory.
std::string ProfileName(const NvmlGpuInstanceProfile& p) {
  std::string name = p.name;
  if (name.rfind("MIG ", 0) == 0) name = name.substr(4);
  if (!name.empty()) return name;
  if (p.slice_count == 0) return "";
  return fmt::format("{}g.{}gb", p.slice_count, (p.memory_mib + 512) / 1024);
}

}  // namespace

ConfidentialComputing ReadConfidentialComputing(NvmlApi& nvml) {
  ConfidentialComputing out;
  if (std::string why = nvml.Unavailable(); !why.empty()) {
    out.state = CcState::kUnknown;
    out.problem = "NVML not usable: " + why;
    return out;
  }
  NvmlConfComputeState state;
  NvmlReturn rc = nvml.ConfComputeSettings(&state);
  if (rc != kNvmlSuccess) {
    const NvmlReturn settings_rc = rc;
    state = {};
    rc = nvml.ConfComputeState(&state);
    if (rc != kNvmlSuccess) {
      out.state = CcState::kUnknown;
      out.problem = fmt::format(
          "nvmlSystemGetConfComputeSettings: {}; nvmlSystemGetConfComputeState: {} (a driver "
          "before R535 has neither)",
          nvml.ErrorText(settings_rc), nvml.ErrorText(rc));
      return out;
    }
  }
  // Protected PCIe runs the CC software path even where the feature field reads 0; NVLE
  // (encrypted NVLink) alone leaves host copies as they are.
  const bool ppcie = state.multi_gpu_mode == kNvmlCcMultiGpuProtectedPcie;
  const bool on = state.cc_feature == kNvmlCcFeatureEnabled || ppcie;
  out.state = on ? CcState::kOn : CcState::kOff;
  std::string detail = Environment(state.environment);
  if (ppcie) detail = JoinDetail(detail, "protected PCIe");
  if (state.multi_gpu_mode == kNvmlCcMultiGpuNvle) detail = JoinDetail(detail, "NVLE");
  if (state.devtools_mode != 0) detail = JoinDetail(detail, "devtools mode");
  if (on) {
    unsigned accepting = 0;
    rc = nvml.ConfComputeGpusReady(&accepting);
    if (rc == kNvmlSuccess) {
      out.gpus_ready = accepting != 0;
    } else {
      detail = JoinDetail(detail, "ready state not readable: " + nvml.ErrorText(rc));
    }
  }
  out.detail = detail;
  return out;
}

MigState ReadMig(NvmlApi& nvml, NvmlDevice device) {
  MigState out;
  unsigned current = 0, pending = 0;
  NvmlReturn rc = nvml.MigMode(device, &current, &pending);
  if (rc == kNvmlErrorNotSupported) return out;  // a GPU without MIG: disabled
  if (rc != kNvmlSuccess) {
    out.mode = MigMode::kUnknown;
    out.problem = "nvmlDeviceGetMigMode: " + nvml.ErrorText(rc);
    return out;
  }
  if (current != kNvmlMigEnabled) return out;
  out.mode = MigMode::kEnabled;
  // The profiles, by id: copy engines and names; the whole GPU's is the one with the most.
  std::vector<NvmlGpuInstanceProfile> profiles;
  for (unsigned i = 0; i < kNvmlGpuInstanceProfileBound; ++i) {
    NvmlGpuInstanceProfile p;
    rc = nvml.GpuInstanceProfileInfo(device, i, &p);
    if (rc == kNvmlErrorInvalidArgument) break;  // past the last profile
    if (rc != kNvmlSuccess) continue;            // not supported on this GPU
    profiles.push_back(p);
    out.whole_gpu_copy_engines =
        std::max(out.whole_gpu_copy_engines, static_cast<int>(p.copy_engines));
  }
  if (profiles.empty()) out.problem = "no GPU instance profile readable";
  unsigned count = 0;
  rc = nvml.MaxMigDeviceCount(device, &count);
  if (rc != kNvmlSuccess) {
    out.problem = JoinDetail(out.problem, "nvmlDeviceGetMaxMigDeviceCount: " + nvml.ErrorText(rc));
    return out;
  }
  for (unsigned i = 0; i < std::min(count, kNvmlGpuInstanceProfileBound); ++i) {
    NvmlDevice mig = nullptr;
    rc = nvml.MigDeviceByIndex(device, i, &mig);
    if (rc == kNvmlErrorNotFound) continue;  // no MIG device at this index
    if (rc != kNvmlSuccess) {
      out.problem =
          JoinDetail(out.problem, fmt::format("MIG device {}: {}", i, nvml.ErrorText(rc)));
      continue;
    }
    MigInstance instance;
    std::string uuid;
    if (nvml.Uuid(mig, &uuid) == kNvmlSuccess) instance.uuid = uuid;
    unsigned id = 0;
    if (nvml.GpuInstanceId(mig, &id) == kNvmlSuccess)
      instance.gpu_instance_id = static_cast<int>(id);
    if (nvml.ComputeInstanceId(mig, &id) == kNvmlSuccess) {
      instance.compute_instance_id = static_cast<int>(id);
    }
    unsigned profile_id = 0;
    if (instance.gpu_instance_id >= 0 &&
        nvml.GpuInstanceProfileId(device, static_cast<unsigned>(instance.gpu_instance_id),
                                  &profile_id) == kNvmlSuccess) {
      for (const NvmlGpuInstanceProfile& p : profiles) {
        if (p.id != profile_id) continue;
        instance.profile = ProfileName(p);
        instance.copy_engines = static_cast<int>(p.copy_engines);
      }
    }
    if (instance.profile.empty()) {
      out.problem = JoinDetail(
          out.problem, fmt::format("the profile of MIG device {} is not readable "
                                   "(its copy engines unknown: baseline only)",
                                   instance.uuid.empty() ? std::to_string(i) : instance.uuid));
    }
    out.instances.push_back(std::move(instance));
  }
  std::sort(out.instances.begin(), out.instances.end(),
            [](const MigInstance& a, const MigInstance& b) {
              return std::tie(a.gpu_instance_id, a.compute_instance_id) <
                     std::tie(b.gpu_instance_id, b.compute_instance_id);
            });
  return out;
}

std::vector<NvmlGpu> ListNvmlGpus(NvmlApi& nvml) {
  std::vector<NvmlGpu> out;
  if (!nvml.Unavailable().empty()) return out;
  unsigned count = 0;
  if (nvml.DeviceCount(&count) != kNvmlSuccess) return out;
  for (unsigned i = 0; i < std::min(count, 1024u); ++i) {
    NvmlGpu gpu;
    if (nvml.DeviceByIndex(i, &gpu.handle) != kNvmlSuccess) continue;
    nvml.Uuid(gpu.handle, &gpu.uuid);
    nvml.Name(gpu.handle, &gpu.name);
    std::string bus;
    if (nvml.PciBusId(gpu.handle, &bus) == kNvmlSuccess) {
      // NVML's "00000000:3B:00.0" in sysfs's form, "0000:3b:00.0".
      std::string lower;
      for (char c : bus) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const auto colon = lower.find(':');
      if (colon != std::string::npos && colon > 4) lower = lower.substr(colon - 4);
      gpu.pci_bus_id = lower;
    }
    out.push_back(std::move(gpu));
  }
  return out;
}

namespace {

// The hex digits of a UUID after its prefix: "GPU-1a2b..." and "MIG-1a2b..." name the same
// 16 bytes (CUDA formats a MIG device's bytes as a GPU UUID).
std::string UuidDigits(std::string_view uuid) {
  const auto dash = uuid.find('-');
  std::string out;
  for (char c : uuid.substr(dash == std::string_view::npos ? 0 : dash + 1)) {
    if (std::isxdigit(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

}  // namespace

std::vector<PhysicalGpu> GroupPhysicalGpus(const std::vector<DeviceInfo>& cuda_devices,
                                           NvmlApi& nvml) {
  std::vector<PhysicalGpu> out;
  const bool usable = nvml.Unavailable().empty();
  // By bus id, in the order CUDA lists them: the MIG GPUs already placed.
  std::map<std::string, std::size_t> mig_gpus;
  for (const DeviceInfo& cuda : cuda_devices) {
    NvmlDevice handle = nullptr;
    MigState mig;
    std::string uuid, name;
    if (!usable) {
      mig.mode = MigMode::kUnknown;
      mig.problem = "NVML not usable: " + nvml.Unavailable();
    } else if (const NvmlReturn rc = FindNvmlDevice(nvml, cuda, &handle); rc != kNvmlSuccess) {
      mig.mode = MigMode::kUnknown;
      mig.problem = "NVML does not know the GPU at " + cuda.pci_bus_id + ": " + nvml.ErrorText(rc);
    } else {
      // A MIG device's bus id names its GPU: the parent is what NVML finds there.
      mig = ReadMig(nvml, handle);
      nvml.Uuid(handle, &uuid);
      nvml.Name(handle, &name);
    }
    if (!mig.Enabled()) {
      PhysicalGpu gpu;
      gpu.info = cuda;
      gpu.info.mig = mig;
      gpu.cuda_device = cuda.index;
      gpu.info.index = static_cast<int>(out.size());
      out.push_back(std::move(gpu));
      continue;
    }
    auto [it, first] = mig_gpus.try_emplace(cuda.pci_bus_id, out.size());
    if (first) {
      PhysicalGpu gpu;
      gpu.info = cuda;
      gpu.info.index = static_cast<int>(out.size());
      if (!uuid.empty()) gpu.info.uuid = uuid;
      if (!name.empty()) gpu.info.name = name;
      gpu.info.mig = mig;
      gpu.instance_cuda_devices.assign(mig.instances.size(), -1);
      out.push_back(std::move(gpu));
    }
    PhysicalGpu& gpu = out[it->second];
    // This CUDA device is the instance of the same UUID; else the first not yet matched
    // whose UUID is in an older form ("MIG-GPU-.../gi/ci").
    std::size_t match = gpu.info.mig.instances.size();
    for (std::size_t i = 0; i < gpu.info.mig.instances.size(); ++i) {
      if (UuidDigits(gpu.info.mig.instances[i].uuid) == UuidDigits(cuda.uuid)) match = i;
    }
    for (std::size_t i = 0;
         match == gpu.info.mig.instances.size() && i < gpu.instance_cuda_devices.size(); ++i) {
      if (gpu.instance_cuda_devices[i] < 0 &&
          UuidDigits(gpu.info.mig.instances[i].uuid).size() != 32) {
        match = i;
      }
    }
    if (match < gpu.instance_cuda_devices.size()) gpu.instance_cuda_devices[match] = cuda.index;
  }
  for (PhysicalGpu& gpu : out) {
    for (std::size_t i = 0; i < gpu.instance_cuda_devices.size(); ++i) {
      gpu.info.mig.instances[i].reachable = gpu.instance_cuda_devices[i] >= 0;
    }
  }
  // MIG GPUs CUDA lists nothing of: no instance (or none this process can see).
  if (usable) {
    for (NvmlGpu& listed : ListNvmlGpus(nvml)) {
      if (listed.pci_bus_id.empty() || mig_gpus.contains(listed.pci_bus_id)) continue;
      const bool seen = std::any_of(out.begin(), out.end(), [&](const PhysicalGpu& g) {
        return g.info.pci_bus_id == listed.pci_bus_id;
      });
      if (seen) continue;
      MigState mig = ReadMig(nvml, listed.handle);
      if (!mig.Enabled()) continue;  // a GPU CUDA does not show for another reason
      PhysicalGpu gpu;
      gpu.info.index = static_cast<int>(out.size());
      gpu.info.uuid = listed.uuid;
      gpu.info.name = listed.name;
      gpu.info.pci_bus_id = listed.pci_bus_id;
      gpu.info.driver_version = nvml.DriverVersion();
      for (MigInstance& instance : mig.instances) instance.reachable = false;
      gpu.instance_cuda_devices.assign(mig.instances.size(), -1);
      gpu.info.mig = std::move(mig);
      out.push_back(std::move(gpu));
    }
  }
  return out;
}

}  // namespace xferd::probes
