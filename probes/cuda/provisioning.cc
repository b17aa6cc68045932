#include "probes/cuda/provisioning.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/device_identity.h"
#include "probes/cuda/device_state.h"
#include "probes/cuda/host_memory.h"
#include "probes/cuda/probe_abort.h"
#include "xferd/probes/topology.h"

namespace xferd::probes::cuda {
namespace {

std::string Mib(std::uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  char text[32];
  if (mib == static_cast<double>(static_cast<std::uint64_t>(mib)))
    std::snprintf(text, sizeof(text), "%.0f MiB", mib);
  else
    std::snprintf(text, sizeof(text), "%.2f MiB", mib);
  return text;
}

// Buffers and streams the mode needs, allocated on first use and kept.
class Provisioner {
 public:
  Provisioner(DeviceState& s, const CudaOptions& options) : s_(s), options_(options) {}

  void Prepare(const ProbeSpec& spec) {
    if (!s_.ready) Basics();
    const int streams_needed = spec.mode == TransferMode::kPinnedAsync       ? spec.streams
                               : spec.direction == Direction::kBidirectional ? 2
                                                                             : 1;
    while (static_cast<int>(s_.streams.size()) < streams_needed) AddStream();
    const bool h2d = spec.direction != Direction::kD2H;
    const bool d2h = spec.direction != Direction::kH2D;
    switch (spec.mode) {
      case TransferMode::kPageable:
        if (!s_.pageable.memory) Pageable();
        break;
      case TransferMode::kPinned:
      case TransferMode::kPinnedAsync:
        Pinned(s_.pinned, "pinned");
        if (spec.direction == Direction::kBidirectional)
          Pinned(s_.pinned_second, "pinned bidirectional");
        break;
      case TransferMode::kZeroCopy: Pinned(s_.mapped, "zero_copy", cudaHostAllocMapped); break;
      case TransferMode::kManaged:
      case TransferMode::kManagedPrefetch:
        if (!s_.managed) {
          cudaError_t e = cudaSuccess;
          s_.managed = AllocateManaged(options_.max_size_bytes, &e);
          Check(e, "cudaMallocManaged");
        }
        break;
    }
    if (spec.mode != TransferMode::kZeroCopy && spec.mode != TransferMode::kManaged &&
        spec.mode != TransferMode::kManagedPrefetch) {
      if (d2h || spec.mode == TransferMode::kPinnedAsync) Device(s_.device_source);
      if (h2d || spec.mode == TransferMode::kPinnedAsync) Device(s_.device_destination);
    }
  }

 private:
  void Basics() {
    // Context creation happens here, on the first probe; it is not part of any deadline.
    int least = 0, greatest = 0;
    Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    for (Event& e : s_.marks) Check(cudaEventCreate(e.Out()), "cudaEventCreate");
    cudaError_t e = cudaSuccess;
    s_.device_result_memory = AllocateDevice(sizeof(std::uint64_t), &e);
    Check(e, "cudaMalloc");
    s_.host_result_memory = AllocatePinned(sizeof(std::uint64_t), cudaHostAllocDefault, &e);
    Check(e, "cudaMallocHost");
    const LinkPath path = probes::ReadLinkPath(options_.sysfs_root, BusId());
    s_.numa_node = path.numa_node;
    s_.ready = true;
    AddStream();
  }

  std::string BusId() {
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), s_.index) != cudaSuccess) return "";
    return NormalizeBusId(bus);
  }

  void AddStream() {
    // Lowest priority and non-blocking: a probe yields to any work an application runs.
    int least = 0, greatest = 0;
    Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    Stream stream;
    Check(cudaStreamCreateWithPriority(stream.Out(), cudaStreamNonBlocking, least),
          "cudaStreamCreateWithPriority");
    s_.streams.push_back(std::move(stream));
    Event join;
    Check(cudaEventCreateWithFlags(join.Out(), cudaEventDisableTiming), "cudaEventCreate");
    s_.joins.push_back(std::move(join));
  }

  void Device(DeviceBuffer& b) {
    if (b.memory) return;
    cudaError_t e = cudaSuccess;
    b.memory = AllocateDevice(options_.max_size_bytes, &e);
    if (e != cudaSuccess) {
      std::size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      throw ProbeAbort{ProbeStatus::kError,
                       "cudaMalloc of " + Mib(options_.max_size_bytes) +
                           " for the probe buffers failed: " + CudaErrorText(e) + " (the GPU has " +
                           Mib(free_bytes) + " free): lower the largest probe size"};
    }
  }

  void Pageable() {
    const std::uint64_t bytes = options_.max_size_bytes;
    ScopedMemoryPolicy policy(s_.numa_node);
    Memory memory = AllocatePageable(bytes);
    if (!memory) {
      throw ProbeAbort{ProbeStatus::kError,
                       "out of host memory allocating " + Mib(bytes) + " for the pageable probe"};
    }
    std::memset(memory.get(), 0, bytes);  // first touch: the pages land on the policy's node now
    s_.pageable.memory = std::move(memory);
    if (!policy.note().empty()) s_.placement_note = policy.note();
  }

  void Pinned(HostBuffer& b, const char* what, unsigned flags = cudaHostAllocDefault) {
    if (b.memory) return;
    const std::uint64_t bytes = options_.max_size_bytes;
    if (s_.pinned_bytes + bytes > options_.pinned_cap_bytes) {
      throw ProbeAbort{ProbeStatus::kError,
                       std::string("the ") + what + " probe needs " + Mib(bytes) +
                           " more pinned host memory, over the cap of " +
                           Mib(options_.pinned_cap_bytes) + " (" + Mib(s_.pinned_bytes) +
                           " already held; " + MemlockLimitText() +
                           "): raise probe.pinned_cap to at least " + Mib(s_.pinned_bytes + bytes) +
                           " or lower the largest probe size"};
    }
    ScopedMemoryPolicy policy(s_.numa_node);
    cudaError_t e = cudaSuccess;
    b.memory = AllocatePinned(bytes, flags, &e);
    if (e != cudaSuccess) {
      throw ProbeAbort{ProbeStatus::kError,
                       std::string("pinning ") + Mib(bytes) + " of host memory for the " + what +
                           " probe failed: " + CudaErrorText(e) + "; " + MemlockLimitText() +
                           ": raise it (LimitMEMLOCK= in the systemd unit, ulimit -l) or lower "
                           "probe.pinned_cap and the probe sizes"};
    }
    s_.pinned_bytes += bytes;
    std::memset(b.ptr(), 0, bytes);
    if (!policy.note().empty()) s_.placement_note = policy.note();
    if (flags & cudaHostAllocMapped)
      Check(cudaHostGetDevicePointer(&b.device_ptr, b.ptr(), 0), "cudaHostGetDevicePointer");
  }

  DeviceState& s_;
  const CudaOptions& options_;
};

// The host buffer a mode copies to and from, touched by now. Managed memory has none that
// stays put: asking the kernel about it would fault a migrated page back to the host.
const void* HostBufferOf(const DeviceState& s, TransferMode mode) {
  switch (mode) {
    case TransferMode::kPageable: return s.pageable.ptr();
    case TransferMode::kPinned:
    case TransferMode::kPinnedAsync: return s.pinned.ptr();
    case TransferMode::kZeroCopy: return s.mapped.ptr();
    case TransferMode::kManaged:
    case TransferMode::kManagedPrefetch: return nullptr;
  }
  return nullptr;
}

}  // namespace

void Provision(DeviceState& state, const CudaOptions& options, const ProbeSpec& spec) {
  Provisioner(state, options).Prepare(spec);
}

void ReportPlacement(const DeviceState& state, TransferMode mode, ProbeSample& sample) {
  sample.host_numa_node = NumaNodeOf(HostBufferOf(state, mode));
  // Buffers off the GPU's node: say why when the policy was refused; the kernel may also
  // have had no room there (or a cpuset forbids the node).
  const bool elsewhere = sample.host_numa_node >= 0 ? sample.host_numa_node != state.numa_node
                                                    : !state.placement_note.empty();
  if (state.numa_node >= 0 && HostBufferOf(state, mode) != nullptr && elsewhere) {
    sample.host_placement = !state.placement_note.empty()
                                ? state.placement_note
                                : "the kernel placed them elsewhere (the node's memory full, or "
                                  "a cpuset or memory policy of the process excludes it)";
  }
}

}  // namespace xferd::probes::cuda
