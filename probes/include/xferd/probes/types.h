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
};

// What a device can do; an unsupported mode carries the reason it is skipped.
struct Capabilities {
  std::map<TransferMode, std::string> unsupported;  // mode -> reason
  bool Supports(TransferMode mode) const { return !unsupported.contains(mode); }
};

}  // namespace xferd::probes
