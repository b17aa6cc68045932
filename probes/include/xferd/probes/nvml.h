// NVML, the NVIDIA driver's management library, as xferd calls it: the few calls its readers
// make (busy detection, the link-traffic windows around probes, the PCIe replay counter),
// behind an interface. The readers keep the arithmetic (counter deltas, windows, what a
// value that cannot be right means), so it is tested against a fake (tests/testing/fakes.h);
// the real library is loaded with dlopen at run time, so no NVML header or library is
// needed to build and a machine without the driver simply reads nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::probes {

// nvmlReturn_t: 0 is success; the others xferd tells apart by name.
using NvmlReturn = int;
inline constexpr NvmlReturn kNvmlSuccess = 0;
inline constexpr NvmlReturn kNvmlErrorInvalidArgument = 2;
inline constexpr NvmlReturn kNvmlErrorNotSupported = 3;  // "N/A" in nvidia-smi
inline constexpr NvmlReturn kNvmlErrorNotFound = 6;
inline constexpr NvmlReturn kNvmlErrorFunctionNotFound = 13;  // the driver lacks the call
inline constexpr NvmlReturn kNvmlErrorGpuIsLost = 15;
inline constexpr NvmlReturn kNvmlErrorUnknown = 999;

// An nvmlDevice_t; null = none.
using NvmlDevice = const void*;

// PCIe directions as NVML counts them on the GPU: rx = host to device, tx = device to host.
enum class PcieCounter { kRx, kTx };

// One PCIe byte counter as nvmlDeviceGetFieldValues returns it.
struct NvmlCounterValue {
  NvmlReturn status = kNvmlSuccess;  // the field's own return: kNvmlErrorNotSupported = N/A
  bool is_64_bit = false;            // value type unsigned or signed long long
  std::uint64_t value = 0;           // bytes since the driver started counting
  std::int64_t timestamp_us = 0;     // when the driver read it (CPU time, microseconds)
};

// One of the driver's GPU-utilization samples (nvmlDeviceGetSamples).
struct NvmlSample {
  std::uint64_t timestamp_us = 0;  // Unix time, microseconds
  double value = 0;                // percent
};

// nvmlConfComputeSystemState_t, and nvmlSystemConfComputeSettings_v1_t's fields (nvml.h).
struct NvmlConfComputeState {
  unsigned environment = 0;    // NVML_CC_SYSTEM_ENVIRONMENT_*: 0 unavailable, 1 sim, 2 prod
  unsigned cc_feature = 0;     // NVML_CC_SYSTEM_FEATURE_*: 0 disabled, 1 enabled
  unsigned devtools_mode = 0;  // NVML_CC_SYSTEM_DEVTOOLS_MODE_*: 0 off, 1 on
  // NVML_CC_SYSTEM_MULTIGPU_*: 0 none, 1 protected PCIe, 2 NVLE; nullopt from the older
  // nvmlSystemGetConfComputeState, which has no such field.
  std::optional<unsigned> multi_gpu_mode;
};
inline constexpr unsigned kNvmlCcFeatureEnabled = 1;  // NVML_CC_SYSTEM_FEATURE_ENABLED
inline constexpr unsigned kNvmlCcMultiGpuProtectedPcie =
    1;                                              // NVML_CC_SYSTEM_MULTIGPU_PROTECTED_PCIE
inline constexpr unsigned kNvmlCcMultiGpuNvle = 2;  // NVML_CC_SYSTEM_MULTIGPU_NVLE
inline constexpr unsigned kNvmlMigEnabled = 1;      // NVML_DEVICE_MIG_ENABLE
// NVML_GPU_INSTANCE_PROFILE_COUNT in the header xferd was written against; the reader asks
// profile indexes until NVML_ERROR_INVALID_ARGUMENT, as the header says, up to a bound.
inline constexpr unsigned kNvmlGpuInstanceProfileBound = 64;

// A GPU instance profile (nvmlGpuInstanceProfileInfo_v2_t, or v1's fields without a name).
struct NvmlGpuInstanceProfile {
  unsigned id = 0;  // the profile id a GPU instance names (nvmlGpuInstanceInfo_t::profileId)
  unsigned slice_count = 0;
  unsigned copy_engines = 0;  // copyEngineCount
  unsigned long long memory_mib = 0;
  std::string name;  // "MIG 3g.71gb"; "" from the v1 call
};

class NvmlApi {
 public:
  virtual ~NvmlApi() = default;

  // "" when NVML can be used; else why not ("libnvidia-ml.so.1 not loadable (...); is the
  // NVIDIA driver installed?", "nvmlInit failed: ..."): every call below then fails.
  virtual std::string Unavailable() const = 0;
  virtual std::string DriverVersion() const = 0;  // "580.82.07"; "" when unknown
  virtual std::string ErrorText(NvmlReturn rc) const = 0;

  virtual NvmlReturn DeviceByPciBusId(const std::string& bus_id, NvmlDevice* device) = 0;
  virtual NvmlReturn DeviceByUuid(const std::string& uuid, NvmlDevice* device) = 0;

  // nvmlDeviceGetUtilizationRates: percent of the last sample period a kernel ran.
  virtual NvmlReturn GpuUtilization(NvmlDevice device, unsigned* percent) = 0;
  // nvmlDeviceGetPcieThroughput: KiB/s over a ~20 ms sample the call itself takes.
  virtual NvmlReturn PcieThroughput(NvmlDevice device, PcieCounter counter,
                                    unsigned* kib_per_s) = 0;
  // nvmlDeviceGetFieldValues for the PCIe byte counters (NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
  // _TX_BYTES), both in one call. false from HasPcieByteCounters: the driver has no
  // nvmlDeviceGetFieldValues.
  virtual bool HasPcieByteCounters() const = 0;
  virtual NvmlReturn PcieByteCounters(NvmlDevice device, NvmlCounterValue* rx,
                                      NvmlCounterValue* tx) = 0;
  // nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES) taken after `since_us`; false from
  // HasUtilizationSamples: the driver has no nvmlDeviceGetSamples.
  virtual bool HasUtilizationSamples() const = 0;
  virtual NvmlReturn UtilizationSamples(NvmlDevice device, std::uint64_t since_us,
                                        std::vector<NvmlSample>* samples) = 0;
  // nvmlDeviceGetPcieReplayCounter: link-level retransmissions the GPU counted on its own
  // link since the driver loaded (32 bits).
  virtual NvmlReturn PcieReplayCounter(NvmlDevice device, unsigned* replays) = 0;
  // nvmlDeviceGetCurrPcieLinkGeneration and nvmlDeviceGetCurrPcieLinkWidth: the GPU's own
  // link as it runs now (the link watch reads them where sysfs cannot show the link).
  // nvmlDeviceGetMaxPcieLinkGeneration and nvmlDeviceGetMaxPcieLinkWidth: the most it can
  // train to in this system, the lower of the GPU's and its slot's maxima. Drivers without
  // them answer kNvmlErrorNotSupported.
  virtual NvmlReturn CurrentPcieLink(NvmlDevice device, unsigned* generation, unsigned* width) {
    (void)device, (void)generation, (void)width;
    return kNvmlErrorNotSupported;
  }
  virtual NvmlReturn MaxPcieLink(NvmlDevice device, unsigned* generation, unsigned* width) {
    (void)device, (void)generation, (void)width;
    return kNvmlErrorNotSupported;
  }

  // The shapes of the GPUs (probes/nvml/nvml_shape.cc reads them). Each is the NVML call of
  // the comment; a driver without it returns kNvmlErrorFunctionNotFound.
  // nvmlSystemGetConfComputeSettings (R535+: the multi-GPU mode too), and the older
  // nvmlSystemGetConfComputeState.
  virtual NvmlReturn ConfComputeSettings(NvmlConfComputeState* state);
  virtual NvmlReturn ConfComputeState(NvmlConfComputeState* state);
  // nvmlSystemGetConfComputeGpusReadyState: 1 = the GPUs accept work.
  virtual NvmlReturn ConfComputeGpusReady(unsigned* accepting_work);
  // nvmlDeviceGetMigMode: kNvmlMigEnabled or 0, now and after the next reset.
  virtual NvmlReturn MigMode(NvmlDevice device, unsigned* current, unsigned* pending);
  // nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex (kNvmlErrorNotFound:
  // no MIG device at that index), nvmlDeviceGetDeviceHandleFromMigDeviceHandle.
  virtual NvmlReturn MaxMigDeviceCount(NvmlDevice device, unsigned* count);
  virtual NvmlReturn MigDeviceByIndex(NvmlDevice device, unsigned index, NvmlDevice* mig);
  virtual NvmlReturn ParentOfMigDevice(NvmlDevice mig, NvmlDevice* parent);
  // nvmlDeviceGetGpuInstanceId, nvmlDeviceGetComputeInstanceId of a MIG device.
  virtual NvmlReturn GpuInstanceId(NvmlDevice mig, unsigned* id);
  virtual NvmlReturn ComputeInstanceId(NvmlDevice mig, unsigned* id);
  // The profile id of GPU instance `gpu_instance_id` of `device` (nvmlDeviceGetGpuInstanceById,
  // then nvmlGpuInstanceGetInfo's profileId).
  virtual NvmlReturn GpuInstanceProfileId(NvmlDevice device, unsigned gpu_instance_id,
                                          unsigned* profile_id);
  // Profile `profile_index` (NVML_GPU_INSTANCE_PROFILE_*) of `device`:
  // nvmlDeviceGetGpuInstanceProfileInfoV (v2, with the name), else
  // nvmlDeviceGetGpuInstanceProfileInfo. kNvmlErrorInvalidArgument past the last profile.
  virtual NvmlReturn GpuInstanceProfileInfo(NvmlDevice device, unsigned profile_index,
                                            NvmlGpuInstanceProfile* profile);
  // nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2: every GPU the driver has, MIG
  // GPUs with no instance (which CUDA does not list) too.
  virtual NvmlReturn DeviceCount(unsigned* count);
  virtual NvmlReturn DeviceByIndex(unsigned index, NvmlDevice* device);
  // nvmlDeviceGetUUID ("GPU-...", "MIG-..."), nvmlDeviceGetName, nvmlDeviceGetPciInfo_v3's
  // busId ("00000000:3B:00.0").
  virtual NvmlReturn Uuid(NvmlDevice device, std::string* uuid);
  virtual NvmlReturn Name(NvmlDevice device, std::string* name);
  virtual NvmlReturn PciBusId(NvmlDevice device, std::string* bus_id);
};

// NVML from `library` through dlopen; one instance per library for the whole process (the
// busy detector and the link-error reader share its nvmlInit), shut down when the last user
// lets go. Never null: an unusable NVML says why in Unavailable().
std::shared_ptr<NvmlApi> OpenNvml(const std::string& library = "libnvidia-ml.so.1");

// The device NVML knows as `device`: by its PCI bus id, else its UUID (CUDA and NVML number
// GPUs differently; the bus id or UUID names the same one).
NvmlReturn FindNvmlDevice(NvmlApi& nvml, const DeviceInfo& device, NvmlDevice* out);

// Confidential computing as NVML reports it: on when the CC feature is enabled or the
// system runs in protected-PCIe mode (which takes the CC path even with the feature field
// 0); NVLE alone is not CC. Whether the GPUs accept work, when on. Unknown, with the reason,
// when neither call answers (a driver before R535, no NVML).
ConfidentialComputing ReadConfidentialComputing(NvmlApi& nvml);

// The MIG mode of `device` (a physical GPU) and its instances: each MIG device's UUID, GPU
// and compute instance ids, profile name and copy engines; and the most copy engines any
// of its profiles owns. kDisabled when the GPU has no MIG (not supported is disabled);
// unknown, with the reason, when the mode cannot be read.
MigState ReadMig(NvmlApi& nvml, NvmlDevice device);

// Every physical GPU NVML lists, in its order, with its UUID, bus id ("0000:3b:00.0") and
// name: how a MIG GPU with no instance, which CUDA does not list, is found.
struct NvmlGpu {
  std::string uuid, pci_bus_id, name;
  NvmlDevice handle = nullptr;
};
std::vector<NvmlGpu> ListNvmlGpus(NvmlApi& nvml);

// One physical GPU as xferd judges it, over the devices CUDA lists: a GPU without MIG is its
// one CUDA device; a MIG-enabled GPU is all the CUDA devices on its PCI bus id (its compute
// instances, each matched to its MIG instance by UUID), identified by the GPU's own UUID and
// name, and a MIG GPU CUDA lists nothing of (no instance) is there too, from NVML.
struct PhysicalGpu {
  DeviceInfo info;       // index: its place in the list; mig filled for a MIG GPU
  int cuda_device = -1;  // the CUDA device of a GPU without MIG; -1 for a MIG GPU
  // For a MIG GPU, per info.mig.instances: the CUDA device of each (-1: not listed by CUDA
  // in this process; the instance is then not reachable).
  std::vector<int> instance_cuda_devices;
};
// `cuda_devices` as the CUDA runtime lists them (index = CUDA ordinal; a MIG device's bus id
// is its GPU's). Without NVML every CUDA device stays a GPU of its own, MIG unknown.
std::vector<PhysicalGpu> GroupPhysicalGpus(const std::vector<DeviceInfo>& cuda_devices,
                                           NvmlApi& nvml);

}  // namespace xferd::probes
