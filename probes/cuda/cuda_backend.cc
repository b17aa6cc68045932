// The CUDA backend: every mode of docs/probe.md on real GPUs. Host logic lives here; the
// kernels it launches are in kernels.cu, and every CUDA resource it holds is owned by a
// wrapper of resources.h.
#include "xferd/probes/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "probes/cuda/device_identity.h"
#include "probes/cuda/host_memory.h"
#include "probes/cuda/kernels.h"
#include "probes/cuda/resources.h"
#include "probes/nvml/nvml_c2c.h"
#include "xferd/probes/stats.h"

namespace xferd::probes {

bool CudaBackendBuilt() {
  return true;
}

namespace {

using cuda::HostChecksum;
using cuda::HostFillPattern;
using cuda::PatternChecksum;
using Clock = std::chrono::steady_clock;

constexpr unsigned char kPoisonByte = 0xA5;
// Pipelined copy + compute rounds of pinned_async's overlap measurement.
constexpr int kOverlapRounds = 3;
constexpr std::uint64_t kStaticSalt = 0;  // the copy modes' buffers keep one pattern

std::string Mib(std::uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  char text[32];
  if (mib == static_cast<double>(static_cast<std::uint64_t>(mib)))
    std::snprintf(text, sizeof(text), "%.0f MiB", mib);
  else
    std::snprintf(text, sizeof(text), "%.2f MiB", mib);
  return text;
}

std::string CudaErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (error " +
         std::to_string(static_cast<int>(e)) + ")";
}

// Ends a probe early; Run turns it into the sample's status and message.
struct ProbeAbort {
  ProbeStatus status;
  std::string message;
};

void Check(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw ProbeAbort{ProbeStatus::kError, std::string(call) + " failed: " + CudaErrorText(e)};
}

// cudaMemPrefetchAsync took a device ordinal until CUDA 13, a cudaMemLocation since.
cudaError_t Prefetch(const void* ptr, std::uint64_t bytes, int device, cudaStream_t stream) {
#if CUDART_VERSION >= 13000
  cudaMemLocation location{};
  if (device == cudaCpuDeviceId) {
    location.type = cudaMemLocationTypeHost;
  } else {
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
  }
  return cudaMemPrefetchAsync(ptr, bytes, location, 0, stream);
#else
  return cudaMemPrefetchAsync(ptr, bytes, device, stream);
#endif
}

// A buffer that is a source in one direction and a destination in the other: it knows
// how many leading bytes hold the static pattern (written, or verified after a copy), so a
// source is refilled only after something else was written into it.
struct HostBuffer {
  cuda::Memory memory;
  void* device_ptr = nullptr;  // mapped buffers: the device's address of it
  std::uint64_t pattern_bytes = 0;
  void* ptr() const { return memory.get(); }  // host address
};

struct DeviceBuffer {
  cuda::Memory memory;
  std::uint64_t pattern_bytes = 0;
  void* ptr() const { return memory.get(); }
};

// Everything one GPU's probes use; allocated on first need, sized for max_size_bytes, kept.
struct DeviceState {
  std::mutex mu;
  int index = 0;
  int blocks = 0;  // grid size for the streaming kernels
  int numa_node = -1;
  std::string placement_note;  // why host buffers could not be put on numa_node, if so
  bool ready = false;
  bool unfinished_work = false;  // a probe timed out or was cancelled with work in flight

  std::vector<cuda::Stream> streams;  // [0]: the probe's own stream
  cuda::Event begin, start, stop, stop_b, end;
  std::vector<cuda::Event> joins;
  cuda::Memory device_result_memory;  // one checksum slot on the device
  cuda::Memory host_result_memory;    // and its pinned copy

  DeviceBuffer device_source, device_destination;
  HostBuffer pinned, pinned_second, pageable, mapped;
  cuda::Memory managed;
  std::uint64_t pinned_bytes = 0;

  std::map<std::uint64_t, std::uint64_t> pattern_checksums;  // size -> static pattern checksum
  std::map<std::uint64_t, int> compute_rounds;               // size -> overlap kernel rounds

  std::uint64_t* device_result() const {
    return static_cast<std::uint64_t*>(device_result_memory.get());
  }
  std::uint64_t* host_result() const {
    return static_cast<std::uint64_t*>(host_result_memory.get());
  }
  // Gives up everything held without a CUDA call: the GPU does not answer, and freeing
  // could hang the shutdown.
  void Leak() {
    for (auto& stream : streams) stream.Leak();
    for (cuda::Event* e : {&begin, &start, &stop, &stop_b, &end}) e->Leak();
    for (auto& join : joins) join.Leak();
    for (cuda::Memory* m : {&device_result_memory, &host_result_memory, &device_source.memory,
                            &device_destination.memory, &pinned.memory, &pinned_second.memory,
                            &pageable.memory, &mapped.memory, &managed}) {
      m->Leak();
    }
  }
};

class CudaBackend final : public TransferBackend {
 public:
  explicit CudaBackend(const CudaOptions& options);
  ~CudaBackend() override;

  std::string Name() const override { return "cuda"; }
  std::vector<DeviceInfo> Devices() const override { return devices_; }
  Capabilities GetCapabilities(int device) const override;
  LinkPath ReadLinkPath(int device) const override;
  ProbeSample Run(int device, const ProbeSpec& spec, std::stop_token stop) override;

 private:
  CudaOptions options_;
  std::vector<DeviceInfo> devices_;
  std::vector<Capabilities> capabilities_;
  std::vector<std::unique_ptr<DeviceState>> states_;
};

// One probe in progress: the spec, its deadline and the sample being filled.
class ProbeRun {
 public:
  ProbeRun(DeviceState& state, const CudaOptions& options, const ProbeSpec& spec,
           std::stop_token stop, ProbeSample& sample)
      : s_(state),
        options_(options),
        spec_(spec),
        stop_(std::move(stop)),
        sample_(sample),
        n_(spec.size_bytes) {}

  void Execute();

 private:
  // One transfer: returns its duration in seconds and adds to the device time.
  double Transfer(int round, bool last);
  double CopyH2D(int round);
  double CopyD2H(int round, bool last);
  double Bidirectional(int round, bool last);
  double ChunkedH2D(int round);
  double ChunkedD2H(int round, bool last);
  double ZeroCopyH2D(int round);
  double ZeroCopyD2H(int round, bool last);
  double ManagedH2D(int round, bool prefetch);
  double ManagedD2H(int round, bool prefetch);
  double OverlapRatio(double copy_s);

  void EnqueueChunkedCopies(void* dst, const void* src, cudaMemcpyKind kind, int compute_rounds);
  double TimeChunkedCompute(void* data, int rounds);

  void Await(cudaEvent_t event, bool spin);
  double Elapsed(cudaEvent_t from, cudaEvent_t to);
  void Record(cudaEvent_t event, int stream = 0) {
    Check(cudaEventRecord(event, s_.streams[stream]), "cudaEventRecord");
  }
  cudaStream_t Stream(int i = 0) const { return s_.streams[i]; }
  void PoisonDevice(void* ptr) {
    Check(cudaMemsetAsync(ptr, kPoisonByte, n_, Stream()), "cudaMemsetAsync (poison)");
  }
  void PoisonHost(void* ptr, int round, bool last) {
    // The last transfer is checked in full, so all of it is poisoned; the others sparsely.
    if (last)
      std::memset(ptr, kPoisonByte, n_);
    else
      cuda::SparsePoison(ptr, n_, kStaticSalt, round);
  }
  void EnsureHostPattern(HostBuffer& b) {
    if (b.pattern_bytes >= n_) return;
    HostFillPattern(b.ptr(), options_.max_size_bytes, kStaticSalt);
    b.pattern_bytes = options_.max_size_bytes;
  }
  // The buffer is about to be written: remember what held the pattern before.
  std::uint64_t StartWriting(HostBuffer& b) { return std::exchange(b.pattern_bytes, 0); }
  void EnsureDevicePattern(DeviceBuffer& b);
  void EnqueueDeviceCheck(void* data, bool uncached);
  // Copy the device checksum back and wait until the stream has reached it (s_.end).
  void FetchChecksum();
  void ExpectDeviceChecksum(std::uint64_t expected, const char* where, int round);
  void CheckHostDestination(HostBuffer& b, std::uint64_t held_before, int round, bool last,
                            const char* where);
  std::uint64_t StaticChecksum();
  [[noreturn]] void Corrupted(const char* where, int round, const std::string& detail);

  DeviceState& s_;
  const CudaOptions& options_;
  const ProbeSpec& spec_;
  std::stop_token stop_;
  ProbeSample& sample_;
  std::uint64_t n_;
  Clock::time_point deadline_;
  int done_ = 0;
};

void ProbeRun::Await(cudaEvent_t event, bool spin) {
  for (;;) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) Check(e, "cudaEventQuery");
    if (stop_.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    if (Clock::now() > deadline_) {
      throw ProbeAbort{ProbeStatus::kTimeout,
                       "did not finish within its " + std::to_string(spec_.deadline.count()) +
                           " ms deadline (" + std::to_string(done_) + " of " +
                           std::to_string(spec_.warmup + spec_.iterations) + " transfers done)"};
    }
    // Spin where the wall clock is the measurement; otherwise events carry the timing
    // and a short sleep keeps the probe off the CPU.
    if (spin)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

double ProbeRun::Elapsed(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
  return static_cast<double>(ms) / 1e3;
}

std::uint64_t ProbeRun::StaticChecksum() {
  auto [it, inserted] = s_.pattern_checksums.try_emplace(n_, 0);
  if (inserted) it->second = PatternChecksum(n_, kStaticSalt);
  return it->second;
}

void ProbeRun::EnsureDevicePattern(DeviceBuffer& b) {
  if (b.pattern_bytes >= n_) return;
  Check(
      cuda::LaunchFill(b.ptr(), options_.max_size_bytes, kStaticSalt, nullptr, s_.blocks, Stream()),
      "fill kernel");
  b.pattern_bytes = options_.max_size_bytes;  // stream order puts the fill before any copy
}

void ProbeRun::EnqueueDeviceCheck(void* data, bool uncached) {
  Check(cuda::LaunchChecksum(data, n_, uncached, s_.device_result(), s_.blocks, Stream()),
        "checksum kernel");
}

void ProbeRun::Corrupted(const char* where, int round, const std::string& detail) {
  throw ProbeAbort{ProbeStatus::kError,
                   std::string("corrupted transfer: ") + where + " of transfer " +
                       std::to_string(round + 1) + " " + detail +
                       " (a copy that moves wrong bytes is a failure, not a fast result: check "
                       "dmesg for Xid/AER errors, the PCIe link and the driver)"};
}

void ProbeRun::FetchChecksum() {
  Check(cudaMemcpyAsync(s_.host_result(), s_.device_result(), sizeof(std::uint64_t),
                        cudaMemcpyDeviceToHost, Stream()),
        "cudaMemcpyAsync (checksum)");
  Record(s_.end);
  Await(s_.end, false);
}

void ProbeRun::ExpectDeviceChecksum(std::uint64_t expected, const char* where, int round) {
  if (*s_.host_result() != expected) {
    char detail[96];
    std::snprintf(detail, sizeof(detail), "has checksum %016llx, expected %016llx",
                  static_cast<unsigned long long>(*s_.host_result()),
                  static_cast<unsigned long long>(expected));
    Corrupted(where, round, detail);
  }
}

void ProbeRun::CheckHostDestination(HostBuffer& b, std::uint64_t held_before, int round, bool last,
                                    const char* where) {
  if (options_.corrupt_transfers) static_cast<unsigned char*>(b.ptr())[n_ / 2] ^= 0xFF;
  if (!cuda::SparseCheck(b.ptr(), n_, kStaticSalt, round))
    Corrupted(where, round, "does not hold the pattern at a sampled word");
  if (last) {
    const std::uint64_t sum = HostChecksum(b.ptr(), n_);
    if (sum != StaticChecksum()) Corrupted(where, round, "fails its full checksum");
    b.pattern_bytes = std::max(held_before, n_);
  }
}

double ProbeRun::Transfer(int round, bool last) {
  const bool h2d = spec_.direction == Direction::kH2D;
  switch (spec_.mode) {
    case TransferMode::kPageable:
    case TransferMode::kPinned:
      if (spec_.direction == Direction::kBidirectional) return Bidirectional(round, last);
      return h2d ? CopyH2D(round) : CopyD2H(round, last);
    case TransferMode::kPinnedAsync: return h2d ? ChunkedH2D(round) : ChunkedD2H(round, last);
    case TransferMode::kZeroCopy: return h2d ? ZeroCopyH2D(round) : ZeroCopyD2H(round, last);
    case TransferMode::kManaged: return h2d ? ManagedH2D(round, false) : ManagedD2H(round, false);
    case TransferMode::kManagedPrefetch:
      return h2d ? ManagedH2D(round, true) : ManagedD2H(round, true);
  }
  throw ProbeAbort{ProbeStatus::kError, "unknown mode"};
}

// pageable and pinned, host to device. pageable is plain cudaMemcpy timed by the wall
// clock: the call is synchronous for pageable memory (the runtime stages it through its own
// pinned buffer), so call-to-data-on-the-device is what an application waits for, and
// events would miss the CPU copy into the staging buffer. It runs on the legacy default
// stream, which the probe's non-blocking streams never wait for. pinned is
// cudaMemcpyAsync on the probe stream, timed by events.
double ProbeRun::CopyH2D(int round) {
  const bool pageable = spec_.mode == TransferMode::kPageable;
  HostBuffer& src = pageable ? s_.pageable : s_.pinned;
  EnsureHostPattern(src);
  void* dst = s_.device_destination.ptr();
  Record(s_.begin);
  PoisonDevice(dst);
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
  Record(s_.start);
  double duration = 0;
  if (pageable) {
    Await(s_.start, true);  // the poison is done: the copy is timed alone
    const auto t0 = Clock::now();
    Check(cudaMemcpy(dst, src.ptr(), n_, cudaMemcpyHostToDevice), "cudaMemcpy");
    // cudaMemcpy may return with the last staged chunk still in flight: wait for it.
    Check(cudaEventRecord(s_.stop, cudaStreamLegacy), "cudaEventRecord");
    Await(s_.stop, true);
    duration = std::chrono::duration<double>(Clock::now() - t0).count();
    Check(cudaStreamWaitEvent(Stream(), s_.stop, 0), "cudaStreamWaitEvent");
  } else {
    Check(cudaMemcpyAsync(dst, src.ptr(), n_, cudaMemcpyHostToDevice, Stream()), "cudaMemcpyAsync");
    Record(s_.stop);
  }
  if (options_.corrupt_transfers) Check(cuda::LaunchFlipByte(dst, n_ / 2, Stream()), "flip kernel");
  EnqueueDeviceCheck(dst, false);
  FetchChecksum();
  if (!pageable) duration = Elapsed(s_.start, s_.stop);
  sample_.device_time_s += Elapsed(s_.begin, s_.end);
  ExpectDeviceChecksum(StaticChecksum(), "the device copy", round);
  return duration;
}

double ProbeRun::CopyD2H(int round, bool last) {
  const bool pageable = spec_.mode == TransferMode::kPageable;
  HostBuffer& dst = pageable ? s_.pageable : s_.pinned;
  EnsureDevicePattern(s_.device_source);
  const std::uint64_t held = StartWriting(dst);
  PoisonHost(dst.ptr(), round, last);
  Record(s_.begin);
  Record(s_.start);
  double duration = 0;
  if (pageable) {
    Await(s_.start, true);  // the source is ready: the copy is timed alone
    const auto t0 = Clock::now();
    Check(cudaMemcpy(dst.ptr(), s_.device_source.ptr(), n_, cudaMemcpyDeviceToHost), "cudaMemcpy");
    duration = std::chrono::duration<double>(Clock::now() - t0).count();
    sample_.device_time_s += Elapsed(s_.begin, s_.start) + duration;
  } else {
    Check(cudaMemcpyAsync(dst.ptr(), s_.device_source.ptr(), n_, cudaMemcpyDeviceToHost, Stream()),
          "cudaMemcpyAsync");
    Record(s_.stop);
    Await(s_.stop, false);
    duration = Elapsed(s_.start, s_.stop);
    sample_.device_time_s += Elapsed(s_.begin, s_.stop);
  }
  CheckHostDestination(dst, held, round, last, "the host copy");
  return duration;
}

// pinned both ways at once: host->device on the probe stream, device->host on a second;
// the transfer lasts until both are done, and moves 2 x size bytes.
double ProbeRun::Bidirectional(int round, bool last) {
  EnsureHostPattern(s_.pinned);
  EnsureDevicePattern(s_.device_source);
  HostBuffer& host_dst = s_.pinned_second;
  const std::uint64_t held = StartWriting(host_dst);
  PoisonHost(host_dst.ptr(), round, last);
  void* dev_dst = s_.device_destination.ptr();
  Record(s_.begin);
  PoisonDevice(dev_dst);
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
  Record(s_.start);
  Check(cudaStreamWaitEvent(Stream(1), s_.start, 0), "cudaStreamWaitEvent");
  Check(cudaMemcpyAsync(dev_dst, s_.pinned.ptr(), n_, cudaMemcpyHostToDevice, Stream(0)),
        "cudaMemcpyAsync (h2d)");
  Check(cudaMemcpyAsync(host_dst.ptr(), s_.device_source.ptr(), n_, cudaMemcpyDeviceToHost,
                        Stream(1)),
        "cudaMemcpyAsync (d2h)");
  Record(s_.stop, 0);
  Record(s_.stop_b, 1);
  Check(cudaStreamWaitEvent(Stream(0), s_.stop_b, 0), "cudaStreamWaitEvent");
  if (options_.corrupt_transfers)
    Check(cuda::LaunchFlipByte(dev_dst, n_ / 2, Stream()), "flip kernel");
  EnqueueDeviceCheck(dev_dst, false);
  FetchChecksum();
  const double duration = std::max(Elapsed(s_.start, s_.stop), Elapsed(s_.start, s_.stop_b));
  sample_.device_time_s += Elapsed(s_.begin, s_.end);
  ExpectDeviceChecksum(StaticChecksum(), "the device copy (host->device half)", round);
  CheckHostDestination(host_dst, held, round, last, "the host copy (device->host half)");
  return duration;
}

// Chunks of chunk_bytes, chunk i on stream i % streams, all streams starting at `start`
// and joined back into the probe stream; with compute_rounds > 0 each chunk's compute
// follows (h2d) or precedes (d2h) its copy on the same stream: the pipelined case.
void ProbeRun::EnqueueChunkedCopies(void* dst, const void* src, cudaMemcpyKind kind,
                                    int compute_rounds) {
  const int streams = spec_.streams;
  for (int k = 1; k < streams; ++k)
    Check(cudaStreamWaitEvent(Stream(k), s_.start, 0), "cudaStreamWaitEvent");
  const bool to_device = kind == cudaMemcpyHostToDevice;
  std::uint64_t chunk = 0;
  for (std::uint64_t offset = 0; offset < n_; offset += spec_.chunk_bytes, ++chunk) {
    const std::uint64_t len = std::min<std::uint64_t>(spec_.chunk_bytes, n_ - offset);
    cudaStream_t stream = Stream(static_cast<int>(chunk % streams));
    void* device_chunk = static_cast<char*>(to_device ? dst : const_cast<void*>(src)) + offset;
    if (compute_rounds > 0 && !to_device)
      Check(cuda::LaunchCompute(device_chunk, len, compute_rounds, s_.blocks, stream),
            "compute kernel");
    Check(cudaMemcpyAsync(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset,
                          len, kind, stream),
          "cudaMemcpyAsync");
    if (compute_rounds > 0 && to_device)
      Check(cuda::LaunchCompute(device_chunk, len, compute_rounds, s_.blocks, stream),
            "compute kernel");
  }
  for (int k = 1; k < streams; ++k) {
    Record(s_.joins[k], k);
    Check(cudaStreamWaitEvent(Stream(0), s_.joins[k], 0), "cudaStreamWaitEvent");
  }
}

double ProbeRun::ChunkedH2D(int round) {
  EnsureHostPattern(s_.pinned);
  void* dst = s_.device_destination.ptr();
  Record(s_.begin);
  PoisonDevice(dst);
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
  Record(s_.start);
  EnqueueChunkedCopies(dst, s_.pinned.ptr(), cudaMemcpyHostToDevice, 0);
  Record(s_.stop);
  if (options_.corrupt_transfers) Check(cuda::LaunchFlipByte(dst, n_ / 2, Stream()), "flip kernel");
  EnqueueDeviceCheck(dst, false);
  FetchChecksum();
  sample_.device_time_s += Elapsed(s_.begin, s_.end);
  ExpectDeviceChecksum(StaticChecksum(), "the device copy", round);
  return Elapsed(s_.start, s_.stop);
}

double ProbeRun::ChunkedD2H(int round, bool last) {
  EnsureDevicePattern(s_.device_source);
  HostBuffer& dst = s_.pinned;
  const std::uint64_t held = StartWriting(dst);
  PoisonHost(dst.ptr(), round, last);
  Record(s_.begin);
  Record(s_.start);
  EnqueueChunkedCopies(dst.ptr(), s_.device_source.ptr(), cudaMemcpyDeviceToHost, 0);
  Record(s_.stop);
  Await(s_.stop, false);
  sample_.device_time_s += Elapsed(s_.begin, s_.stop);
  CheckHostDestination(dst, held, round, last, "the host copy");
  return Elapsed(s_.start, s_.stop);
}

// zero_copy: the transfer is a kernel reading mapped host memory with 16-byte loads; the
// checksum it computes on the way is the correctness check.
double ProbeRun::ZeroCopyH2D(int round) {
  HostBuffer& src = s_.mapped;
  EnsureHostPattern(src);
  if (options_.corrupt_transfers) {
    static_cast<unsigned char*>(src.ptr())[n_ / 2] ^= 0xFF;
    src.pattern_bytes = 0;
  }
  Record(s_.begin);
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
  Record(s_.start);
  EnqueueDeviceCheck(src.device_ptr, true);
  Record(s_.stop);
  FetchChecksum();
  sample_.device_time_s += Elapsed(s_.begin, s_.end);
  ExpectDeviceChecksum(StaticChecksum(), "what the kernel read", round);
  return Elapsed(s_.start, s_.stop);
}

double ProbeRun::ZeroCopyD2H(int round, bool last) {
  HostBuffer& dst = s_.mapped;
  const std::uint64_t held = StartWriting(dst);
  PoisonHost(dst.ptr(), round, last);
  Record(s_.begin);
  Record(s_.start);
  Check(cuda::LaunchFill(dst.device_ptr, n_, kStaticSalt, nullptr, s_.blocks, Stream()),
        "fill kernel");
  Record(s_.stop);
  Await(s_.stop, false);
  sample_.device_time_s += Elapsed(s_.begin, s_.stop);
  CheckHostDestination(dst, held, round, last, "what the kernel wrote");
  return Elapsed(s_.start, s_.stop);
}

// managed: the CPU writes the buffer last (a fresh pattern each transfer, so stale pages
// cannot pass), then a kernel touches all of it: its pages migrate by page fault. With
// prefetch, cudaMemPrefetchAsync moves them first, inside the timed span.
double ProbeRun::ManagedH2D(int round, bool prefetch) {
  const std::uint64_t salt = static_cast<std::uint64_t>(round) + 1;
  void* buf = s_.managed.get();
  const int device = s_.index;
  Record(s_.begin);
  // Bring the pages home cheaply before the CPU writes them (untimed setup).
  Check(Prefetch(buf, n_, cudaCpuDeviceId, Stream()), "cudaMemPrefetchAsync (to host)");
  Record(s_.stop_b);
  Await(s_.stop_b, false);
  const std::uint64_t expected = HostFillPattern(buf, n_, salt);
  if (options_.corrupt_transfers) static_cast<unsigned char*>(buf)[n_ / 2] ^= 0xFF;
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
  Record(s_.start);
  if (prefetch) Check(Prefetch(buf, n_, device, Stream()), "cudaMemPrefetchAsync (to device)");
  EnqueueDeviceCheck(buf, false);
  Record(s_.stop);
  FetchChecksum();
  sample_.device_time_s += Elapsed(s_.begin, s_.stop_b) + Elapsed(s_.start, s_.end);
  ExpectDeviceChecksum(expected, "what the kernel read", round);
  return Elapsed(s_.start, s_.stop);
}

// managed, device to host: a kernel writes the buffer (its pages now live on the GPU),
// then the CPU reads all of it, faulting the pages back, timed by the wall clock as an
// application would feel it. With prefetch, the timed part is cudaMemPrefetchAsync to the
// host (events); the CPU read that follows finds local pages and is the check.
double ProbeRun::ManagedD2H(int round, bool prefetch) {
  const std::uint64_t salt = static_cast<std::uint64_t>(round) + 1;
  void* buf = s_.managed.get();
  Record(s_.begin);
  // Move the pages to the GPU before it writes them: setup, cheaper than faulting them.
  Check(Prefetch(buf, n_, s_.index, Stream()), "cudaMemPrefetchAsync (to device)");
  Check(cudaMemsetAsync(s_.device_result(), 0, sizeof(std::uint64_t), Stream()), "cudaMemsetAsync");
  Check(cuda::LaunchFill(buf, n_, salt, s_.device_result(), s_.blocks, Stream()), "fill kernel");
  if (options_.corrupt_transfers) Check(cuda::LaunchFlipByte(buf, n_ / 2, Stream()), "flip kernel");
  Check(cudaMemcpyAsync(s_.host_result(), s_.device_result(), sizeof(std::uint64_t),
                        cudaMemcpyDeviceToHost, Stream()),
        "cudaMemcpyAsync (checksum)");
  Record(s_.start);
  Await(s_.start, false);
  sample_.device_time_s += Elapsed(s_.begin, s_.start);
  const std::uint64_t expected = *s_.host_result();
  double duration = 0;
  std::uint64_t sum = 0;
  if (prefetch) {
    Record(s_.stop_b);
    Check(Prefetch(buf, n_, cudaCpuDeviceId, Stream()), "cudaMemPrefetchAsync (to host)");
    Record(s_.stop);
    Await(s_.stop, false);
    duration = Elapsed(s_.stop_b, s_.stop);
    sample_.device_time_s += duration;
    sum = HostChecksum(buf, n_);
  } else {
    const auto t0 = Clock::now();
    sum = HostChecksum(buf, n_);
    duration = std::chrono::duration<double>(Clock::now() - t0).count();
    // The CPU's faults keep the copy engines busy throughout: count all of it.
    sample_.device_time_s += duration;
  }
  if (sum != expected) {
    char detail[96];
    std::snprintf(detail, sizeof(detail), "has checksum %016llx, expected %016llx",
                  static_cast<unsigned long long>(sum), static_cast<unsigned long long>(expected));
    Corrupted("what the CPU read", round, detail);
  }
  return duration;
}

double ProbeRun::TimeChunkedCompute(void* data, int rounds) {
  Record(s_.start);
  const int streams = spec_.streams;
  for (int k = 1; k < streams; ++k)
    Check(cudaStreamWaitEvent(Stream(k), s_.start, 0), "cudaStreamWaitEvent");
  std::uint64_t chunk = 0;
  for (std::uint64_t offset = 0; offset < n_; offset += spec_.chunk_bytes, ++chunk) {
    const std::uint64_t len = std::min<std::uint64_t>(spec_.chunk_bytes, n_ - offset);
    Check(cuda::LaunchCompute(static_cast<char*>(data) + offset, len, rounds, s_.blocks,
                              Stream(static_cast<int>(chunk % streams))),
          "compute kernel");
  }
  for (int k = 1; k < streams; ++k) {
    Record(s_.joins[k], k);
    Check(cudaStreamWaitEvent(Stream(0), s_.joins[k], 0), "cudaStreamWaitEvent");
  }
  Record(s_.stop);
  Await(s_.stop, false);
  const double t = Elapsed(s_.start, s_.stop);
  sample_.device_time_s += t;
  return t;
}

// How much of the copy a kernel on the same chunks hides: copy alone, kernel alone
// (calibrated once per size to take about as long as the copy), then both pipelined chunk
// by chunk. 1 = fully hidden, 0 = serialized.
double ProbeRun::OverlapRatio(double copy_s) {
  const bool h2d = spec_.direction == Direction::kH2D;
  // The kernels rewrite the device buffer they run on: it no longer holds the pattern.
  DeviceBuffer& dev = h2d ? s_.device_destination : s_.device_source;
  dev.pattern_bytes = 0;
  auto [it, fresh] = s_.compute_rounds.try_emplace(n_, 16);
  // Short kernels are bound by memory, long ones by arithmetic: scale a few times.
  for (int step = 0; fresh && step < 4; ++step) {
    const double t = TimeChunkedCompute(dev.ptr(), it->second);
    if (t > 0.8 * copy_s && t < 1.25 * copy_s) break;
    const double scaled = t > 0 ? it->second * copy_s / t : it->second * 16.0;
    it->second = static_cast<int>(std::clamp(scaled, 1.0, 1e6));
  }
  const int rounds = it->second;
  std::vector<double> kernel, pipelined;
  for (int rep = 0; rep < kOverlapRounds; ++rep) {
    kernel.push_back(TimeChunkedCompute(dev.ptr(), rounds));
    Record(s_.start);
    if (h2d)
      EnqueueChunkedCopies(dev.ptr(), s_.pinned.ptr(), cudaMemcpyHostToDevice, rounds);
    else
      EnqueueChunkedCopies(s_.pinned.ptr(), dev.ptr(), cudaMemcpyDeviceToHost, rounds);
    Record(s_.stop);
    Await(s_.stop, false);
    pipelined.push_back(Elapsed(s_.start, s_.stop));
    sample_.device_time_s += pipelined.back();
  }
  if (!h2d) s_.pinned.pattern_bytes = 0;
  const double k = Median(kernel), p = Median(pipelined);
  const double shorter = std::min(copy_s, k);
  if (shorter <= 0) return 0;
  return std::clamp((copy_s + k - p) / shorter, 0.0, 1.0);
}

void ProbeRun::Execute() {
  deadline_ = Clock::now() + spec_.deadline;
  const int total = spec_.warmup + spec_.iterations;
  sample_.durations_s.reserve(spec_.iterations);
  for (int i = 0; i < total; ++i) {
    if (stop_.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    const double d = Transfer(i, i == total - 1);
    ++done_;
    if (i >= spec_.warmup) sample_.durations_s.push_back(d);
  }
  int copies = total;
  if (spec_.mode == TransferMode::kPinnedAsync) {
    sample_.overlap_ratio = OverlapRatio(Median(sample_.durations_s));
    copies += kOverlapRounds;  // the pipelined copies of the overlap measurement
  }
  // What crossed the link, for the contention judgement: managed memory migrates its pages
  // both ways each transfer (home first, then where the transfer takes them).
  const bool both = spec_.direction == Direction::kBidirectional ||
                    spec_.mode == TransferMode::kManaged ||
                    spec_.mode == TransferMode::kManagedPrefetch;
  const std::uint64_t bytes = n_ * static_cast<std::uint64_t>(copies);
  sample_.link_h2d_bytes = both || spec_.direction == Direction::kH2D ? bytes : 0;
  sample_.link_d2h_bytes = both || spec_.direction == Direction::kD2H ? bytes : 0;
}

// ---------------------------------------------------------------------------------------

[[noreturn]] void ThrowNoDevice(cudaError_t e) {
  throw NoDeviceError("no NVIDIA driver / GPU found (CUDA runtime: " + CudaErrorText(e) +
                      "): check that the NVIDIA driver is loaded (nvidia-smi) and that "
                      "/dev/nvidia* is accessible to this user; use --simulate to try the "
                      "simulated device");
}

CudaBackend::CudaBackend(const CudaOptions& options) : options_(options) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) ThrowNoDevice(e);
  if (count == 0) ThrowNoDevice(cudaErrorNoDevice);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  const std::string driver_version = cuda::DriverVersion(driver);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaError_t e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
      throw NoDeviceError("cannot read the properties of GPU " + std::to_string(i) + ": " +
                          CudaErrorText(e) + "; check nvidia-smi and dmesg");
    }
    DeviceInfo info;
    info.index = i;
    info.name = prop.name;
    unsigned char uuid[16];
    std::memcpy(uuid, prop.uuid.bytes, 16);
    info.uuid = cuda::FormatGpuUuid(uuid);
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess)
      info.pci_bus_id = cuda::NormalizeBusId(bus);
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.driver_version = driver_version;
    info.memory_bytes = prop.totalGlobalMem;
    info.integrated = prop.integrated != 0;
    // Grace Hopper: copies go over NVLink-C2C, whatever PCIe link sysfs shows.
    info.c2c = !info.integrated && HasC2cHostLink(info.pci_bus_id, info.name);
    devices_.push_back(info);

    Capabilities caps;
    if (!prop.canMapHostMemory || options_.hide_can_map_host_memory) {
      caps.unsupported[TransferMode::kZeroCopy] =
          "the device cannot map host memory (canMapHostMemory = 0)";
    }
    std::string managed_reason;
    if (!prop.managedMemory) {
      managed_reason = "the device has no managed memory (managedMemory = 0)";
    } else if (!prop.concurrentManagedAccess || options_.hide_concurrent_managed_access) {
      managed_reason =
          "the device lacks concurrentManagedAccess: managed memory moves whole at kernel "
          "launch, not by page faults, so there is no migration to measure";
    }
    if (!managed_reason.empty()) {
      caps.unsupported[TransferMode::kManaged] = managed_reason;
      caps.unsupported[TransferMode::kManagedPrefetch] = managed_reason;
    }
    capabilities_.push_back(std::move(caps));

    auto state = std::make_unique<DeviceState>();
    state->index = i;
    state->blocks = std::max(1, prop.multiProcessorCount) * 8;
    states_.push_back(std::move(state));
  }
}

// Release what each device holds, but never wait long for a GPU that does not answer:
// leaking its buffers at exit beats hanging the shutdown.
CudaBackend::~CudaBackend() {
  for (auto& state : states_) {
    DeviceState& s = *state;
    // The resources are freed on their own device, once it is idle.
    bool idle = cudaSetDevice(s.index) == cudaSuccess;
    const auto give_up = Clock::now() + std::chrono::seconds(2);
    for (bool busy = idle; busy && idle;) {
      busy = false;
      for (const cuda::Stream& stream : s.streams) {
        if (cudaStreamQuery(stream) == cudaErrorNotReady) busy = true;
      }
      if (!busy) break;
      if (Clock::now() >= give_up) idle = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!idle) s.Leak();
    state.reset();
  }
}

Capabilities CudaBackend::GetCapabilities(int device) const {
  if (device < 0 || device >= static_cast<int>(capabilities_.size())) return {};
  return capabilities_[device];
}

LinkPath CudaBackend::ReadLinkPath(int device) const {
  LinkPath path;
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    path.note = "no GPU with index " + std::to_string(device);
    return path;
  }
  const DeviceInfo& info = devices_[device];
  if (info.integrated || info.pci_bus_id.empty()) {
    path.pcie = false;
    path.note = info.integrated ? "integrated GPU: it shares DRAM with the host, no PCIe link"
                                : "the CUDA runtime reports no PCI bus id";
    return path;
  }
  path = probes::ReadLinkPath(options_.sysfs_root, info.pci_bus_id);
  path.c2c = info.c2c;
  return path;
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
          s_.managed = cuda::AllocateManaged(options_.max_size_bytes, &e);
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
    for (cuda::Event* e : {&s_.begin, &s_.start, &s_.stop, &s_.stop_b, &s_.end})
      Check(cudaEventCreate(e->Out()), "cudaEventCreate");
    cudaError_t e = cudaSuccess;
    s_.device_result_memory = cuda::AllocateDevice(sizeof(std::uint64_t), &e);
    Check(e, "cudaMalloc");
    s_.host_result_memory = cuda::AllocatePinned(sizeof(std::uint64_t), cudaHostAllocDefault, &e);
    Check(e, "cudaMallocHost");
    const LinkPath path = probes::ReadLinkPath(options_.sysfs_root, BusId());
    s_.numa_node = path.numa_node;
    s_.ready = true;
    AddStream();
  }

  std::string BusId() {
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), s_.index) != cudaSuccess) return "";
    return cuda::NormalizeBusId(bus);
  }

  void AddStream() {
    // Lowest priority and non-blocking: a probe yields to any work an application runs.
    int least = 0, greatest = 0;
    Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    cuda::Stream stream;
    Check(cudaStreamCreateWithPriority(stream.Out(), cudaStreamNonBlocking, least),
          "cudaStreamCreateWithPriority");
    s_.streams.push_back(std::move(stream));
    cuda::Event join;
    Check(cudaEventCreateWithFlags(join.Out(), cudaEventDisableTiming), "cudaEventCreate");
    s_.joins.push_back(std::move(join));
  }

  void Device(DeviceBuffer& b) {
    if (b.memory) return;
    cudaError_t e = cudaSuccess;
    b.memory = cuda::AllocateDevice(options_.max_size_bytes, &e);
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
    cuda::ScopedMemoryPolicy policy(s_.numa_node);
    cuda::Memory memory = cuda::AllocatePageable(bytes);
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
                           " already held; " + cuda::MemlockLimitText() +
                           "): raise probe.pinned_cap to at least " + Mib(s_.pinned_bytes + bytes) +
                           " or lower the largest probe size"};
    }
    cuda::ScopedMemoryPolicy policy(s_.numa_node);
    cudaError_t e = cudaSuccess;
    b.memory = cuda::AllocatePinned(bytes, flags, &e);
    if (e != cudaSuccess) {
      throw ProbeAbort{ProbeStatus::kError,
                       std::string("pinning ") + Mib(bytes) + " of host memory for the " + what +
                           " probe failed: " + CudaErrorText(e) + "; " + cuda::MemlockLimitText() +
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

// Wait, up to the deadline, for work an earlier probe left behind when it timed out.
void DrainUnfinishedWork(DeviceState& s, const ProbeSpec& spec, std::stop_token stop) {
  if (!s.unfinished_work) return;
  const auto deadline = Clock::now() + spec.deadline;
  for (;;) {
    bool idle = true;
    for (const cuda::Stream& stream : s.streams) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaErrorNotReady)
        idle = false;
      else
        Check(e, "cudaStreamQuery");
    }
    if (idle) break;
    if (stop.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    if (Clock::now() > deadline) {
      throw ProbeAbort{ProbeStatus::kTimeout,
                       "the GPU is still busy with a probe that timed out earlier (a hung GPU? "
                       "look for Xid errors in dmesg and at nvidia-smi)"};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  s.unfinished_work = false;
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
  if (auto it = capabilities_[device].unsupported.find(spec.mode);
      it != capabilities_[device].unsupported.end()) {
    sample.status = ProbeStatus::kUnsupported;
    sample.message = it->second;
    return sample;
  }
  if (std::string problem = ValidateSpec(spec, options_); !problem.empty()) {
    sample.status = ProbeStatus::kError;
    sample.message = problem;
    return sample;
  }
  DeviceState& state = *states_[device];
  std::lock_guard lock(state.mu);
  try {
    Check(cudaSetDevice(device), "cudaSetDevice");
    DrainUnfinishedWork(state, spec, stop);  // before allocating: a hung GPU stops here
    Provisioner(state, options_).Prepare(spec);
    ProbeRun(state, options_, spec, stop, sample).Execute();
    sample.status = ProbeStatus::kOk;
    sample.host_numa_node = cuda::NumaNodeOf(HostBufferOf(state, spec.mode));
    // Buffers off the GPU's node: say why when the policy was refused; the kernel may also
    // have had no room there (or a cpuset forbids the node).
    const bool elsewhere = sample.host_numa_node >= 0 ? sample.host_numa_node != state.numa_node
                                                      : !state.placement_note.empty();
    if (state.numa_node >= 0 && HostBufferOf(state, spec.mode) != nullptr && elsewhere) {
      sample.host_placement = !state.placement_note.empty()
                                  ? state.placement_note
                                  : "the kernel placed them elsewhere (the node's memory full, or "
                                    "a cpuset or memory policy of the process excludes it)";
    }
  } catch (const ProbeAbort& abort) {
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
