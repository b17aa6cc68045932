// The vocabulary of a probe: what is measured (ProbeSpec), on what (DeviceInfo,
// Capabilities) and what came back (ProbeSample). No CUDA header is needed here.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xferd::probes {

// The memory paths xferd measures (docs/probe.md): how the host side is allocated and how
// bytes cross the link.
enum class TransferMode {
  kPageable,         // malloc + cudaMemcpy: implicit staging through a pinned bounce buffer
  kPinned,           // cudaMallocHost + cudaMemcpy
  kPinnedAsync,      // pinned, chunks over N non-default streams, cudaMemcpyAsync
  kZeroCopy,         // mapped pinned memory, a kernel reads/writes it over the link
  kManaged,          // cudaMallocManaged, page-fault migration on first touch
  kManagedPrefetch,  // cudaMallocManaged + cudaMemPrefetchAsync, then touch
};

enum class Direction {
  kH2D,
  kD2H,
  kBidirectional,  // both directions at once (pinned only); bytes counted in both
};

inline constexpr std::array<TransferMode, 6> kAllModes = {
    TransferMode::kPageable, TransferMode::kPinned,  TransferMode::kPinnedAsync,
    TransferMode::kZeroCopy, TransferMode::kManaged, TransferMode::kManagedPrefetch};

// The 13 (mode, direction) pairs a full probe covers: every mode both ways, plus pinned
// bidirectional.
std::vector<std::pair<TransferMode, Direction>> AllModeDirections();

std::string_view ToString(TransferMode mode);    // "pageable", "pinned_async", ...
std::string_view ToString(Direction direction);  // "h2d", "d2h", "bidir"
std::optional<TransferMode> ParseMode(std::string_view text);
std::string AllModeNames();  // "pageable, pinned, ...": for messages that list the choices
std::optional<Direction> ParseDirection(std::string_view text);
bool IsValidPair(TransferMode mode, Direction direction);

// Modes whose bandwidth is bounded by the PCIe link and so held against the expected
// band; pageable and managed (first touch) are bounded by staging and page faults.
bool IsLinkBound(TransferMode mode);
// The same per direction: managed_prefetch device->host is bounded by the host populating
// the pages it migrates back (9-12 GB/s on the H200 test machine, against 55 GB/s for
// pinned copies on the same link), so only its host->device half is held to the band.
bool IsLinkBound(TransferMode mode, Direction direction);

// "64MiB", "4KiB", "1GiB", "512B" <-> bytes. Parse accepts KiB/MiB/GiB (and K/M/G as
// binary), B or a bare number; nullopt on anything else.
std::string FormatSize(std::uint64_t bytes);
std::optional<std::uint64_t> ParseSize(std::string_view text);

// Confidential computing (CC) as the driver reports it for the system (NVML): with it on,
// every host<->device copy goes through encrypted bounce buffers, far below what the link
// carries. docs/health.md ("Confidential computing") says what xferd holds a GPU to then.
enum class CcState { kUnknown, kOff, kOn };
std::string_view ToString(CcState state);  // "unknown", "off", "on"

struct ConfidentialComputing {
  CcState state = CcState::kOff;
  // With CC on: whether the GPUs accept work yet (nvmlSystemGetConfComputeGpusReadyState;
  // a CC GPU takes none until attestation sets it ready); nullopt = not read.
  std::optional<bool> gpus_ready;
  std::string detail;   // what else the driver said: "production, protected PCIe"
  std::string problem;  // why the state is unknown ("" when read)
  bool On() const { return state == CcState::kOn; }
  // On, and the driver says the GPUs take no work yet: nothing can be judged.
  bool NotReady() const { return On() && gpus_ready == false; }
};

// MIG (Multi-Instance GPU) mode of one physical GPU and its instances as the driver lists
// them. A MIG-enabled GPU is probed through its instances (CUDA sees one device per
// instance, none for a GPU with no instance); its link and verdict stay the GPU's.
enum class MigMode { kUnknown, kDisabled, kEnabled };
std::string_view ToString(MigMode mode);  // "unknown", "disabled", "enabled"

struct MigInstance {
  std::string uuid;              // "MIG-..." as nvidia-smi -L lists it
  int gpu_instance_id = -1;      // dcgm-exporter's GPU_I_ID
  int compute_instance_id = -1;  // its compute instance within the GPU instance
  std::string profile;           // dcgm-exporter's GPU_I_PROFILE: "3g.71gb"
  int copy_engines = 0;          // its profile's copyEngineCount; 0 = unknown
  // This process can probe through it: CUDA enumerated it when the process started (an
  // instance created later is listed, and reached only after a restart).
  bool reachable = true;
};

struct MigState {
  MigMode mode = MigMode::kDisabled;
  std::vector<MigInstance> instances;  // by GPU instance id
  // The copy engines of the GPU's largest instance profile (the whole GPU as one
  // instance); 0 = unknown. The link band is held only where an instance owns as many.
  int whole_gpu_copy_engines = 0;
  std::string problem;  // why the mode or an instance could not be read ("" when read)
  bool Enabled() const { return mode == MigMode::kEnabled; }
};

// The instances of a MIG-enabled GPU the link is probed through: the reachable ones that
// own the most copy engines (by GPU instance id), so their readings compare with each
// other. Indexes into state.instances; empty when there is none (or MIG is off).
std::vector<std::size_t> LinkInstances(const MigState& state);

// Why a GPU of this shape cannot be judged at all ("MIG enabled, no GPU instance to probe
// through", "confidential computing on, GPUs not ready for work"); "" when it can.
std::string UnjudgeableReason(const ConfidentialComputing& cc, const MigState& mig);

struct ProbeSpec {
  TransferMode mode = TransferMode::kPinned;
  Direction direction = Direction::kH2D;
  std::uint64_t size_bytes = 64ull << 20;
  int iterations = 20;  // timed transfers, each kept as a sample (the most, with a target)
  int warmup = 2;       // untimed transfers before them
  // A device-time target, as nvbench's min-time: timed transfers stop once there are at
  // least min_iterations of them and the probe's device time, warm-up included, reaches
  // target_device_s (never more than `iterations`), so a probe costs about the same on a
  // slow link as on a fast one. 0 = exactly `iterations` (IsLastTransfer).
  double target_device_s = 0;
  int min_iterations = 1;  // at most `iterations` count (IsLastTransfer)
  // The whole probe (warm-up included) must finish by this; past it the result is kTimeout.
  std::chrono::milliseconds deadline{5000};
  // pinned_async only: chunks of chunk_bytes (>= kMinChunkBytes) over `streams` streams.
  int streams = 4;
  std::uint64_t chunk_bytes = 1ull << 20;
};

// pinned_async limits: smaller chunks measure launch overhead, not the link; more streams
// do not add overlap and each costs events per chunk.
inline constexpr std::uint64_t kMinChunkBytes = 256ull << 10;
inline constexpr int kMaxStreams = 32;

// Whether transfer `index` (0-based, the warm-ups first) is the probe's last, the one rule
// both backends run their transfers by: `elapsed_s` is the device time of the transfers
// before it, `previous_s` the duration of the one just before (0 for the first). With a
// target, the last is the first timed transfer from min_iterations on after which the
// device time, predicted from the transfer before it, reaches the target; never past
// warmup + iterations. Decided before the transfer runs, so a backend can check the last
// one in full.
bool IsLastTransfer(const ProbeSpec& spec, int index, double elapsed_s, double previous_s);
// How many transfers (warm-ups included) IsLastTransfer runs when each takes `transfer_s`:
// what a probe of `spec` costs, for an estimate before it ran.
int ExpectedTransfers(const ProbeSpec& spec, double transfer_s);

// What makes `spec` unrunnable on any backend, as a sentence that names the fix; "" when
// it is fine. Both backends refuse such a spec with this message; config checks the same
// limits when it reads them.
std::string SpecProblem(const ProbeSpec& spec);

enum class ProbeStatus { kOk, kError, kTimeout, kUnsupported };
std::string_view ToString(ProbeStatus status);  // "ok", "error", "timeout", "unsupported"

// What the driver counted on a GPU's link around one probe (NVML's PCIe byte counters or
// throughput samples; the simulated device's own): the raw material of the contention
// judgement (core/contention.h). rx = host to device, tx = device to host, as the GPU sees
// them; counts include the link's protocol overhead.
struct LinkTraffic {
  std::string source;   // "nvml counters", "nvml throughput", "simulated"
  double window_s = 0;  // from the reading just before the probe to the one just after
  double rx_bytes = 0, tx_bytes = 0;  // counted in that window
  int samples = 0;                    // readings the window rests on
  // The bytes are sampled rates x window_s, not counted: the samples were taken while the
  // probe kept the link busy, so they overstate a window with idle moments in it.
  bool sampled_rates = false;
  double after_s = 0;  // the reading taken right after the probe ended
  double after_rx_bytes = 0, after_tx_bytes = 0;
  // GPU utilization of the driver's samples taken after the probe ended (copies count too);
  // nullopt when none was taken yet.
  std::optional<double> after_utilization_percent;
};

// Did another process move data over the link while the probe ran? Judged by core.
enum class ContentionState {
  kUnknown,    // the link could not be read: judged as before (busy check only)
  kClear,      // no foreign traffic above the thresholds
  kContended,  // foreign traffic: the reading is neither judged nor learned
};
std::string_view ToString(ContentionState state);  // "unknown", "clear", "contended"

struct Contention {
  ContentionState state = ContentionState::kUnknown;
  // Foreign traffic per direction over the probe's window (and right after it); 0 when
  // none or unknown.
  double foreign_h2d_bytes_per_s = 0, foreign_d2h_bytes_per_s = 0;
  std::string reason;  // why unknown, or what made it contended; short, for logs
};

struct ProbeSample {
  ProbeSpec spec;
  ProbeStatus status = ProbeStatus::kError;
  std::string message;  // why, when not kOk; empty otherwise
  // One duration per timed transfer, in seconds, in the order they ran.
  std::vector<double> durations_s;
  // Bytes one timed transfer moves (size for h2d/d2h, 2 x size for bidirectional).
  std::uint64_t bytes_per_transfer = 0;
  // pinned_async only: 1 = copies fully hidden behind compute, 0 = serialized.
  std::optional<double> overlap_ratio;
  // Time the device spent on this probe, warm-up included: what the probe cost.
  double device_time_s = 0.0;
  // Of device_time_s, the time the device computed while none of the probe's copies ran
  // (pinned_async's kernel-alone timing for its overlap ratio): the link sat idle then, so
  // the link-traffic judgement leaves it out of the time the probe kept the link busy.
  double compute_only_s = 0.0;
  // The NUMA node the host buffer's pages are on (get_mempolicy MPOL_F_NODE|MPOL_F_ADDR);
  // -1 = unknown. Health compares it with the GPU's node (diagnosis numa_remote).
  int host_numa_node = -1;
  // Why the host buffers could not be placed on the GPU's NUMA node ("set_mempolicy ...
  // failed: Operation not permitted"); empty when they were, or when the node is unknown.
  std::string host_placement;
  // Bytes the probe moved over the link per direction, warm-up, page migrations and extra
  // rounds included: what the link counters see of it. 0 both = the backend does not say
  // (OwnLinkBytes falls back to the timed transfers).
  std::uint64_t link_h2d_bytes = 0, link_d2h_bytes = 0;
  // The link around the probe as the driver counted it (nullopt: not readable), and what
  // core made of it.
  std::optional<LinkTraffic> traffic;
  Contention contention;

  // bytes_per_transfer / median(durations); 0 when there are no durations.
  double MedianBandwidth() const;
  bool Contended() const { return contention.state == ContentionState::kContended; }
  // link_h2d_bytes / link_d2h_bytes, or when the backend left them at 0 the warm-up and
  // timed transfers of the spec in its direction(s).
  std::pair<double, double> OwnLinkBytes() const;
  // The MIG instance the probe went through (a MIG-enabled GPU); nullopt otherwise.
  std::optional<MigInstance> instance;
};

struct DeviceInfo {
  int index = 0;
  std::string uuid;        // "GPU-xxxxxxxx-..." ; "SIM-..." for simulated devices
  std::string name;        // "NVIDIA H200"
  std::string pci_bus_id;  // "0000:00:06.0" (lower case, domain included); empty if none
  int minor = -1;          // /dev/nvidia<minor>, as the driver numbers it; -1 unknown
  int cc_major = 0, cc_minor = 0;
  std::string driver_version;  // "580.159.04"; "sim" for simulated devices
  std::uint64_t memory_bytes = 0;
  bool integrated = false;  // shares DRAM with the host (Jetson, IGX iGPU)
  bool c2c = false;         // reaches host memory over NVLink-C2C (Grace Hopper), not PCIe
  bool simulated = false;   // always true for the simulated backend
  // The shape the driver reports: confidential computing (the system's) and MIG (this
  // physical GPU's). A MIG-enabled GPU is one device here whatever its instances.
  ConfidentialComputing cc;
  MigState mig;
};

// What a device can do; an unsupported mode (or one direction of it) carries the reason it
// is skipped.
struct Capabilities {
  std::map<TransferMode, std::string> unsupported;  // mode -> reason
  std::map<std::pair<TransferMode, Direction>, std::string> unsupported_pairs;
  bool Supports(TransferMode mode) const { return !unsupported.contains(mode); }
  // Why (mode, direction) is skipped; "" when the device can do it.
  std::string Reason(TransferMode mode, Direction direction) const;
};

// What a GPU's shape takes away (device.cc, device.mig): with confidential computing on,
// the modes it forbids or makes meaningless, each with the reason; the one rule both
// backends apply.
void ShapeCapabilities(const DeviceInfo& device, Capabilities& capabilities);

}  // namespace xferd::probes
