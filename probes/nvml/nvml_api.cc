// NvmlApi on the real library, loaded with dlopen: each call is the NVML function of the
// same name, its results converted to the interface's types and nothing more. What the
// values mean is the readers' business (nvml_gpu_load.cc, link_errors.cc).
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "probes/nvml/nvml_abi.h"
#include "xferd/probes/nvml.h"

namespace xferd::probes {
namespace {

// NVML's types beyond probes/nvml/nvml_abi.h, from the documented C API (nvml.h).
struct NvmlUtilization {
  unsigned int gpu;     // percent of time a kernel ran over the last sample period
  unsigned int memory;  // percent of time device memory was read or written
};
// nvmlValue_t: the value of a field or a sample, its type given next to it.
union NvmlValue {
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  int si;
  unsigned short us;
};
// nvmlFieldValue_t.
struct NvmlFieldValue {
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp_us;  // CPU time the value was read
  long long latency_us;
  int value_type;
  NvmlReturn nvml_return;
  NvmlValue value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");
// nvmlSample_t.
struct NvmlRawSample {
  unsigned long long timestamp_us;
  NvmlValue value;
};
static_assert(sizeof(NvmlRawSample) == 16, "nvmlSample_t is 16 bytes");

// nvmlConfComputeSystemState_t.
struct RawConfComputeState {
  unsigned int environment, cc_feature, devtools_mode;
};
// nvmlSystemConfComputeSettings_v1_t, its version NVML_STRUCT_VERSION(..., 1).
struct RawConfComputeSettings {
  unsigned int version, environment, cc_feature, devtools_mode, multi_gpu_mode;
};
static_assert(sizeof(RawConfComputeSettings) == 20, "nvmlSystemConfComputeSettings_v1_t");
constexpr unsigned int kConfComputeSettingsV1 = sizeof(RawConfComputeSettings) | (1u << 24);
// nvmlGpuInstanceProfileInfo_t (v1) and nvmlGpuInstanceProfileInfo_v2_t.
struct RawProfileInfoV1 {
  unsigned int id, is_p2p_supported, slice_count, instance_count, multiprocessor_count,
      copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
  unsigned long long memory_size_mb;
};
static_assert(sizeof(RawProfileInfoV1) == 48, "nvmlGpuInstanceProfileInfo_t");
struct RawProfileInfoV2 {
  unsigned int version, id, is_p2p_supported, slice_count, instance_count, multiprocessor_count,
      copy_engine_count, decoder_count, encoder_count, jpeg_count, ofa_count;
  unsigned long long memory_size_mb;
  char name[96];  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
};
static_assert(sizeof(RawProfileInfoV2) == 152, "nvmlGpuInstanceProfileInfo_v2_t");
constexpr unsigned int kProfileInfoV2 = sizeof(RawProfileInfoV2) | (2u << 24);
// nvmlGpuInstanceInfo_t: its parent device, id, profile id and placement (start, size).
struct RawGpuInstanceInfo {
  void* device;
  unsigned int id, profile_id, placement_start, placement_size;
};
static_assert(sizeof(RawGpuInstanceInfo) == 24, "nvmlGpuInstanceInfo_t");
// nvmlPciInfo_t.
struct RawPciInfo {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
static_assert(sizeof(RawPciInfo) == 68, "nvmlPciInfo_t");

constexpr int kNvmlPcieUtilTxBytes = 0;          // NVML_PCIE_UTIL_TX_BYTES, KB/s
constexpr int kNvmlPcieUtilRxBytes = 1;          // NVML_PCIE_UTIL_RX_BYTES, KB/s
constexpr unsigned int kFieldPcieTxBytes = 197;  // NVML_FI_DEV_PCIE_COUNT_TX_BYTES
constexpr unsigned int kFieldPcieRxBytes = 198;  // NVML_FI_DEV_PCIE_COUNT_RX_BYTES
constexpr int kSamplesGpuUtilization = 1;        // NVML_GPU_UTILIZATION_SAMPLES
// nvmlValueType_t
constexpr int kValueDouble = 0, kValueUInt = 1, kValueULong = 2, kValueULongLong = 3,
              kValueSLongLong = 4, kValueSInt = 5, kValueUShort = 6;
// The driver keeps at most this many samples per type; the buffer holds them all.
constexpr unsigned int kMaxSamples = 120;

using ErrorStringFn = const char* (*)(NvmlReturn);
using HandleByUuidFn = NvmlReturn (*)(const char*, nvml::Device*);
using UtilizationFn = NvmlReturn (*)(nvml::Device, NvmlUtilization*);
using PcieThroughputFn = NvmlReturn (*)(nvml::Device, int, unsigned int*);
using DriverVersionFn = NvmlReturn (*)(char*, unsigned int);
using FieldValuesFn = NvmlReturn (*)(nvml::Device, int, NvmlFieldValue*);
using SamplesFn = NvmlReturn (*)(nvml::Device, int, unsigned long long, int*, unsigned int*,
                                 NvmlRawSample*);
using ReplayCounterFn = NvmlReturn (*)(nvml::Device, unsigned int*);
using LinkFn = NvmlReturn (*)(nvml::Device, unsigned int*);
using CcStateFn = NvmlReturn (*)(RawConfComputeState*);
using CcSettingsFn = NvmlReturn (*)(RawConfComputeSettings*);
using UIntFn = NvmlReturn (*)(unsigned int*);
using DeviceUIntFn = NvmlReturn (*)(nvml::Device, unsigned int*);
using MigModeFn = NvmlReturn (*)(nvml::Device, unsigned int*, unsigned int*);
using MigByIndexFn = NvmlReturn (*)(nvml::Device, unsigned int, nvml::Device*);
using ParentFn = NvmlReturn (*)(nvml::Device, nvml::Device*);
using GpuInstanceByIdFn = NvmlReturn (*)(nvml::Device, unsigned int, void**);
using GpuInstanceInfoFn = NvmlReturn (*)(void*, RawGpuInstanceInfo*);
using ProfileV1Fn = NvmlReturn (*)(nvml::Device, unsigned int, RawProfileInfoV1*);
using ProfileV2Fn = NvmlReturn (*)(nvml::Device, unsigned int, RawProfileInfoV2*);
using HandleByIndexFn = NvmlReturn (*)(unsigned int, nvml::Device*);
using StringFn = NvmlReturn (*)(nvml::Device, char*, unsigned int);
using PciInfoFn = NvmlReturn (*)(nvml::Device, RawPciInfo*);

double ValueAsDouble(int type, const NvmlValue& v) {
  switch (type) {
    case kValueDouble: return v.d;
    case kValueUInt: return v.ui;
    case kValueULong: return static_cast<double>(v.ul);
    case kValueULongLong: return static_cast<double>(v.ull);
    case kValueSLongLong: return static_cast<double>(v.sll);
    case kValueSInt: return v.si;
    case kValueUShort: return v.us;
  }
  return 0;
}

nvml::Device Raw(NvmlDevice device) {
  return static_cast<nvml::Device>(const_cast<void*>(device));
}

class DlopenNvml final : public NvmlApi {
 public:
  // The functions are looked up as the members are made (below), from the library opened
  // first; none when it could not be opened.
  explicit DlopenNvml(const std::string& library)
      : handle_(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL)),
        open_error_(handle_ == nullptr ? DlError() : std::string()) {
    if (handle_ == nullptr) {
      unavailable_ = fmt::format("{} not loadable ({}); is the NVIDIA driver installed?", library,
                                 open_error_);
      return;
    }
    const DriverVersionFn driver_version = Symbol("nvmlSystemGetDriverVersion");
    if (!init_ || !shutdown_ || !by_pci_ || !by_uuid_ || !utilization_ || !pcie_) {
      unavailable_ = fmt::format("{} lacks the functions xferd needs (an old driver?)", library);
      return;
    }
    const NvmlReturn rc = init_();
    if (rc != kNvmlSuccess) {
      unavailable_ = fmt::format("nvmlInit failed: {}", ErrorText(rc));
      return;
    }
    initialised_ = true;
    char version[96] = {};
    if (driver_version != nullptr && driver_version(version, sizeof version) == kNvmlSuccess) {
      driver_version_ = version;
    }
  }

  ~DlopenNvml() override {
    if (initialised_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  std::string Unavailable() const override { return unavailable_; }
  std::string DriverVersion() const override { return driver_version_; }

  std::string ErrorText(NvmlReturn rc) const override {
    if (error_string_ != nullptr) {
      if (const char* s = error_string_(rc)) return s;
    }
    return fmt::format("NVML error {}", rc);
  }

  NvmlReturn DeviceByPciBusId(const std::string& bus_id, NvmlDevice* device) override {
    if (!initialised_) return kNvmlErrorUnknown;
    nvml::Device raw = nullptr;
    const NvmlReturn rc = by_pci_(bus_id.c_str(), &raw);
    *device = raw;
    return rc;
  }

  NvmlReturn DeviceByUuid(const std::string& uuid, NvmlDevice* device) override {
    if (!initialised_) return kNvmlErrorUnknown;
    nvml::Device raw = nullptr;
    const NvmlReturn rc = by_uuid_(uuid.c_str(), &raw);
    *device = raw;
    return rc;
  }

  NvmlReturn GpuUtilization(NvmlDevice device, unsigned* percent) override {
    if (!initialised_) return kNvmlErrorUnknown;
    NvmlUtilization util{};
    const NvmlReturn rc = utilization_(Raw(device), &util);
    *percent = util.gpu;
    return rc;
  }

  NvmlReturn PcieThroughput(NvmlDevice device, PcieCounter counter, unsigned* kib_per_s) override {
    if (!initialised_) return kNvmlErrorUnknown;
    return pcie_(Raw(device),
                 counter == PcieCounter::kRx ? kNvmlPcieUtilRxBytes : kNvmlPcieUtilTxBytes,
                 kib_per_s);
  }

  bool HasPcieByteCounters() const override { return initialised_ && field_values_ != nullptr; }

  NvmlReturn PcieByteCounters(NvmlDevice device, NvmlCounterValue* rx,
                              NvmlCounterValue* tx) override {
    if (!HasPcieByteCounters()) return kNvmlErrorNotSupported;
    NvmlFieldValue values[2] = {};
    values[0].field_id = kFieldPcieRxBytes;
    values[1].field_id = kFieldPcieTxBytes;
    const NvmlReturn rc = field_values_(Raw(device), 2, values);
    if (rc != kNvmlSuccess) return rc;
    const auto convert = [](const NvmlFieldValue& v, NvmlCounterValue* out) {
      out->status = v.nvml_return;
      out->is_64_bit = v.value_type == kValueULongLong || v.value_type == kValueSLongLong;
      // 64-bit types as they are (the bits of a signed counter are its count); the others
      // widened, so that a reader can still tell them apart by is_64_bit.
      out->value = out->is_64_bit
                       ? v.value.ull
                       : static_cast<std::uint64_t>(ValueAsDouble(v.value_type, v.value));
      out->timestamp_us = v.timestamp_us;
    };
    convert(values[0], rx);
    convert(values[1], tx);
    return kNvmlSuccess;
  }

  bool HasUtilizationSamples() const override { return initialised_ && samples_ != nullptr; }

  NvmlReturn UtilizationSamples(NvmlDevice device, std::uint64_t since_us,
                                std::vector<NvmlSample>* samples) override {
    samples->clear();
    if (!HasUtilizationSamples()) return kNvmlErrorNotSupported;
    NvmlRawSample buffer[kMaxSamples] = {};
    unsigned int count = kMaxSamples;
    int type = kValueUInt;
    const NvmlReturn rc =
        samples_(Raw(device), kSamplesGpuUtilization, since_us, &type, &count, buffer);
    if (rc != kNvmlSuccess) return rc;
    for (unsigned int i = 0; i < std::min(count, kMaxSamples); ++i) {
      samples->push_back({buffer[i].timestamp_us, ValueAsDouble(type, buffer[i].value)});
    }
    return kNvmlSuccess;
  }

  NvmlReturn PcieReplayCounter(NvmlDevice device, unsigned* replays) override {
    if (!initialised_) return kNvmlErrorUnknown;
    if (replays_ == nullptr) return kNvmlErrorNotSupported;
    return replays_(Raw(device), replays);
  }

  NvmlReturn CurrentPcieLink(NvmlDevice device, unsigned* generation, unsigned* width) override {
    return Link(current_gen_, current_width_, device, generation, width);
  }

  NvmlReturn MaxPcieLink(NvmlDevice device, unsigned* generation, unsigned* width) override {
    return Link(max_gen_, max_width_, device, generation, width);
  }

  NvmlReturn ConfComputeSettings(NvmlConfComputeState* state) override {
    if (!initialised_) return kNvmlErrorUnknown;
    if (cc_settings_ == nullptr) return kNvmlErrorFunctionNotFound;
    RawConfComputeSettings raw{};
    raw.version = kConfComputeSettingsV1;
    const NvmlReturn rc = cc_settings_(&raw);
    if (rc == kNvmlSuccess) {
      *state = {raw.environment, raw.cc_feature, raw.devtools_mode, raw.multi_gpu_mode};
    }
    return rc;
  }
  NvmlReturn ConfComputeState(NvmlConfComputeState* state) override {
    if (!initialised_) return kNvmlErrorUnknown;
    if (cc_state_ == nullptr) return kNvmlErrorFunctionNotFound;
    RawConfComputeState raw{};
    const NvmlReturn rc = cc_state_(&raw);
    if (rc == kNvmlSuccess) *state = {raw.environment, raw.cc_feature, raw.devtools_mode, {}};
    return rc;
  }
  NvmlReturn ConfComputeGpusReady(unsigned* accepting_work) override {
    return Call(cc_ready_, accepting_work);
  }
  NvmlReturn MigMode(NvmlDevice device, unsigned* current, unsigned* pending) override {
    return Call(mig_mode_, Raw(device), current, pending);
  }
  NvmlReturn MaxMigDeviceCount(NvmlDevice device, unsigned* count) override {
    return Call(max_mig_, Raw(device), count);
  }
  NvmlReturn MigDeviceByIndex(NvmlDevice device, unsigned index, NvmlDevice* mig) override {
    nvml::Device raw = nullptr;
    const NvmlReturn rc = Call(mig_by_index_, Raw(device), index, &raw);
    *mig = raw;
    return rc;
  }
  NvmlReturn ParentOfMigDevice(NvmlDevice mig, NvmlDevice* parent) override {
    nvml::Device raw = nullptr;
    const NvmlReturn rc = Call(parent_, Raw(mig), &raw);
    *parent = raw;
    return rc;
  }
  NvmlReturn GpuInstanceId(NvmlDevice mig, unsigned* id) override {
    return Call(gi_id_, Raw(mig), id);
  }
  NvmlReturn ComputeInstanceId(NvmlDevice mig, unsigned* id) override {
    return Call(ci_id_, Raw(mig), id);
  }
  NvmlReturn GpuInstanceProfileId(NvmlDevice device, unsigned gpu_instance_id,
                                  unsigned* profile_id) override {
    void* instance = nullptr;
    NvmlReturn rc = Call(gi_by_id_, Raw(device), gpu_instance_id, &instance);
    if (rc != kNvmlSuccess) return rc;
    RawGpuInstanceInfo info{};
    rc = Call(gi_info_, instance, &info);
    if (rc == kNvmlSuccess) *profile_id = info.profile_id;
    return rc;
  }
  NvmlReturn GpuInstanceProfileInfo(NvmlDevice device, unsigned profile_index,
                                    NvmlGpuInstanceProfile* profile) override {
    if (!initialised_) return kNvmlErrorUnknown;
    if (profile_v2_ != nullptr) {
      RawProfileInfoV2 raw{};
      raw.version = kProfileInfoV2;
      const NvmlReturn rc = profile_v2_(Raw(device), profile_index, &raw);
      if (rc == kNvmlSuccess) {
        raw.name[sizeof raw.name - 1] = '\0';
        *profile = {raw.id, raw.slice_count, raw.copy_engine_count, raw.memory_size_mb, raw.name};
      }
      return rc;
    }
    RawProfileInfoV1 raw{};
    const NvmlReturn rc = Call(profile_v1_, Raw(device), profile_index, &raw);
    if (rc == kNvmlSuccess) {
      *profile = {raw.id, raw.slice_count, raw.copy_engine_count, raw.memory_size_mb, ""};
    }
    return rc;
  }
  NvmlReturn DeviceCount(unsigned* count) override { return Call(count_, count); }
  NvmlReturn DeviceByIndex(unsigned index, NvmlDevice* device) override {
    nvml::Device raw = nullptr;
    const NvmlReturn rc = Call(by_index_, index, &raw);
    *device = raw;
    return rc;
  }
  NvmlReturn Uuid(NvmlDevice device, std::string* uuid) override {
    return Text(uuid_, device, uuid);
  }
  NvmlReturn Name(NvmlDevice device, std::string* name) override {
    return Text(name_, device, name);
  }
  NvmlReturn PciBusId(NvmlDevice device, std::string* bus_id) override {
    RawPciInfo raw{};
    const NvmlReturn rc = Call(pci_info_, Raw(device), &raw);
    if (rc == kNvmlSuccess) {
      raw.bus_id[sizeof raw.bus_id - 1] = '\0';
      *bus_id = raw.bus_id;
    }
    return rc;
  }

 private:
  NvmlReturn Link(LinkFn gen_fn, LinkFn width_fn, NvmlDevice device, unsigned* generation,
                  unsigned* width) {
    if (!initialised_) return kNvmlErrorUnknown;
    if (gen_fn == nullptr || width_fn == nullptr) return kNvmlErrorNotSupported;
    const NvmlReturn rc = gen_fn(Raw(device), generation);
    return rc != kNvmlSuccess ? rc : width_fn(Raw(device), width);
  }

  // An optional call: unknown before init, "function not found" on a driver without it.
  template <typename Fn, typename... Args>
  NvmlReturn Call(Fn fn, Args... args) const {
    if (!initialised_) return kNvmlErrorUnknown;
    if (fn == nullptr) return kNvmlErrorFunctionNotFound;
    return fn(args...);
  }
  NvmlReturn Text(StringFn fn, NvmlDevice device, std::string* out) const {
    char buffer[96] = {};  // NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE
    const NvmlReturn rc = Call(fn, Raw(device), buffer, static_cast<unsigned int>(sizeof buffer));
    if (rc == kNvmlSuccess) {
      buffer[sizeof buffer - 1] = '\0';
      *out = buffer;
    }
    return rc;
  }

  static std::string DlError() {
    const char* err = dlerror();
    return err ? err : "unknown error";
  }

  // A function of the library, converted to the type of what it initialises; nullptr where
  // the library lacks it or none is open.
  struct Lookup {
    void* handle;
    const char* name;
    template <typename Fn>
    operator Fn() const {  // NOLINT(google-explicit-constructor): the member's type picks Fn
      return handle == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(handle, name));
    }
  };
  Lookup Symbol(const char* name) const { return {handle_, name}; }

  // Declared first: the functions below are looked up from it as they are made.
  void* handle_ = nullptr;
  std::string open_error_;
  nvml::InitFn init_ = Symbol("nvmlInit_v2");
  nvml::ShutdownFn shutdown_ = Symbol("nvmlShutdown");
  ErrorStringFn error_string_ = Symbol("nvmlErrorString");
  nvml::HandleByPciFn by_pci_ = Symbol("nvmlDeviceGetHandleByPciBusId_v2");
  HandleByUuidFn by_uuid_ = Symbol("nvmlDeviceGetHandleByUUID");
  UtilizationFn utilization_ = Symbol("nvmlDeviceGetUtilizationRates");
  PcieThroughputFn pcie_ = Symbol("nvmlDeviceGetPcieThroughput");
  // Optional: older drivers lack them, and the readers then do without.
  FieldValuesFn field_values_ = Symbol("nvmlDeviceGetFieldValues");
  SamplesFn samples_ = Symbol("nvmlDeviceGetSamples");
  ReplayCounterFn replays_ = Symbol("nvmlDeviceGetPcieReplayCounter");
  LinkFn current_gen_ = Symbol("nvmlDeviceGetCurrPcieLinkGeneration");
  LinkFn current_width_ = Symbol("nvmlDeviceGetCurrPcieLinkWidth");
  LinkFn max_gen_ = Symbol("nvmlDeviceGetMaxPcieLinkGeneration");
  LinkFn max_width_ = Symbol("nvmlDeviceGetMaxPcieLinkWidth");
  // Confidential computing and MIG: present from R470 (MIG) and R535 (CC settings) on.
  CcSettingsFn cc_settings_ = Symbol("nvmlSystemGetConfComputeSettings");
  CcStateFn cc_state_ = Symbol("nvmlSystemGetConfComputeState");
  UIntFn cc_ready_ = Symbol("nvmlSystemGetConfComputeGpusReadyState");
  MigModeFn mig_mode_ = Symbol("nvmlDeviceGetMigMode");
  DeviceUIntFn max_mig_ = Symbol("nvmlDeviceGetMaxMigDeviceCount");
  MigByIndexFn mig_by_index_ = Symbol("nvmlDeviceGetMigDeviceHandleByIndex");
  ParentFn parent_ = Symbol("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
  DeviceUIntFn gi_id_ = Symbol("nvmlDeviceGetGpuInstanceId");
  DeviceUIntFn ci_id_ = Symbol("nvmlDeviceGetComputeInstanceId");
  GpuInstanceByIdFn gi_by_id_ = Symbol("nvmlDeviceGetGpuInstanceById");
  GpuInstanceInfoFn gi_info_ = Symbol("nvmlGpuInstanceGetInfo");
  ProfileV1Fn profile_v1_ = Symbol("nvmlDeviceGetGpuInstanceProfileInfo");
  ProfileV2Fn profile_v2_ = Symbol("nvmlDeviceGetGpuInstanceProfileInfoV");
  UIntFn count_ = Symbol("nvmlDeviceGetCount_v2");
  HandleByIndexFn by_index_ = Symbol("nvmlDeviceGetHandleByIndex_v2");
  StringFn uuid_ = Symbol("nvmlDeviceGetUUID");
  StringFn name_ = Symbol("nvmlDeviceGetName");
  PciInfoFn pci_info_ = Symbol("nvmlDeviceGetPciInfo_v3");
  bool initialised_ = false;
  std::string unavailable_, driver_version_;
};

}  // namespace

std::shared_ptr<NvmlApi> OpenNvml(const std::string& library) {
  // One per library while anyone holds it: nvmlInit and nvmlShutdown pair up per instance.
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<NvmlApi>> open;
  std::lock_guard lock(mutex);
  if (auto held = open[library].lock()) return held;
  auto made = std::make_shared<DlopenNvml>(library);
  open[library] = made;
  return made;
}

NvmlReturn FindNvmlDevice(NvmlApi& nvml, const DeviceInfo& device, NvmlDevice* out) {
  *out = nullptr;
  NvmlReturn rc = kNvmlErrorNotFound;
  if (!device.pci_bus_id.empty()) rc = nvml.DeviceByPciBusId(device.pci_bus_id, out);
  if (rc != kNvmlSuccess && !device.uuid.empty()) rc = nvml.DeviceByUuid(device.uuid, out);
  if (rc != kNvmlSuccess) *out = nullptr;
  return rc;
}

}  // namespace xferd::probes
