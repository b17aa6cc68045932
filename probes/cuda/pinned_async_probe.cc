// pinned_async: pinned copies in chunks over several streams, each way, and how much of
// such a copy a kernel on the same chunks hides (the overlap ratio).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/event_timed_probe.h"
#include "probes/cuda/kernels.h"
#include "xferd/probes/stats.h"

namespace xferd::probes::cuda {
namespace {

// Pipelined copy + compute rounds of the overlap measurement.
constexpr int kOverlapRounds = 3;

// The chunked copies of one probe, each way, and their overlap with compute.
class ChunkedCopies {
 public:
  explicit ChunkedCopies(ProbeRun& run)
      : run_(run), timer_(run.timer()), h2d_(run.spec().direction == Direction::kH2D) {}

  // Chunks of chunk_bytes, chunk i on stream i % streams, all streams starting at kStart
  // and joined back into the probe stream; with compute_rounds > 0 each chunk's compute
  // follows (h2d) or precedes (d2h) its copy on the same stream: the pipelined case.
  void EnqueueChunkedCopies(void* dst, const void* src, cudaMemcpyKind kind, int compute_rounds);

  // After the last transfer: the overlap of copies with compute.
  int Finish(ProbeSample& sample) {
    sample.overlap_ratio = OverlapRatio(Median(sample.durations_s));
    return kOverlapRounds;  // the pipelined copies of the overlap measurement
  }

 private:
  // The compute alone over the chunks, as the copies spread them: its device time.
  double TimeChunkedCompute(void* data, int rounds);
  // Copy alone, kernel alone (calibrated once per size to take about as long as the copy),
  // then both pipelined chunk by chunk. 1 = fully hidden, 0 = serialized.
  double OverlapRatio(double copy_s);

  ProbeRun& run_;
  ProbeTimer& timer_;
  const bool h2d_;
};

void ChunkedCopies::EnqueueChunkedCopies(void* dst, const void* src, cudaMemcpyKind kind,
                                         int compute_rounds) {
  const ProbeSpec& spec = run_.spec();
  const std::uint64_t n = run_.size();
  const int streams = spec.streams;
  const int blocks = run_.state().blocks;
  timer_.Fork(streams);
  const bool to_device = kind == cudaMemcpyHostToDevice;
  std::uint64_t chunk = 0;
  for (std::uint64_t offset = 0; offset < n; offset += spec.chunk_bytes, ++chunk) {
    const std::uint64_t len = std::min<std::uint64_t>(spec.chunk_bytes, n - offset);
    cudaStream_t stream = run_.Stream(static_cast<int>(chunk % streams));
    void* device_chunk = static_cast<char*>(to_device ? dst : const_cast<void*>(src)) + offset;
    if (compute_rounds > 0 && !to_device)
      Check(LaunchCompute(device_chunk, len, compute_rounds, blocks, stream), "compute kernel");
    Check(cudaMemcpyAsync(static_cast<char*>(dst) + offset, static_cast<const char*>(src) + offset,
                          len, kind, stream),
          "cudaMemcpyAsync");
    if (compute_rounds > 0 && to_device)
      Check(LaunchCompute(device_chunk, len, compute_rounds, blocks, stream), "compute kernel");
  }
  timer_.Join(streams);
}

double ChunkedCopies::TimeChunkedCompute(void* data, int rounds) {
  const ProbeSpec& spec = run_.spec();
  const std::uint64_t n = run_.size();
  timer_.Record(Mark::kStart);
  const int streams = spec.streams;
  timer_.Fork(streams);
  std::uint64_t chunk = 0;
  for (std::uint64_t offset = 0; offset < n; offset += spec.chunk_bytes, ++chunk) {
    const std::uint64_t len = std::min<std::uint64_t>(spec.chunk_bytes, n - offset);
    Check(LaunchCompute(static_cast<char*>(data) + offset, len, rounds, run_.state().blocks,
                        run_.Stream(static_cast<int>(chunk % streams))),
          "compute kernel");
  }
  timer_.Join(streams);
  timer_.Record(Mark::kStop);
  timer_.Await(Mark::kStop, Wait::kSleep);
  const double t = timer_.Seconds(Mark::kStart, Mark::kStop);
  run_.AddComputeOnlyTime(t);  // the kernels alone: the link idle
  return t;
}

double ChunkedCopies::OverlapRatio(double copy_s) {
  DeviceState& s = run_.state();
  const std::uint64_t n = run_.size();
  // The kernels rewrite the device buffer they run on: it no longer holds the pattern.
  DeviceBuffer& dev = h2d_ ? s.device_destination : s.device_source;
  dev.pattern_bytes = 0;
  auto [it, fresh] = s.compute_rounds.try_emplace(n, 16);
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
    timer_.Record(Mark::kStart);
    if (h2d_)
      EnqueueChunkedCopies(dev.ptr(), s.pinned.ptr(), cudaMemcpyHostToDevice, rounds);
    else
      EnqueueChunkedCopies(s.pinned.ptr(), dev.ptr(), cudaMemcpyDeviceToHost, rounds);
    timer_.Record(Mark::kStop);
    timer_.Await(Mark::kStop, Wait::kSleep);
    pipelined.push_back(timer_.Seconds(Mark::kStart, Mark::kStop));
    run_.AddDeviceTime(pipelined.back());
  }
  if (!h2d_) s.pinned.pattern_bytes = 0;
  const double k = Median(kernel), p = Median(pipelined);
  const double shorter = std::min(copy_s, k);
  if (shorter <= 0) return 0;
  return std::clamp((copy_s + k - p) / shorter, 0.0, 1.0);
}

}  // namespace

// Timed by events (event_timed_probe.h): host to device in chunks, the device checksums what
// arrived; device to host in chunks, the host checks it.
std::unique_ptr<TransferProbe> MakePinnedAsyncProbe(ProbeRun& run) {
  auto chunks = std::make_shared<ChunkedCopies>(run);
  FinishWork finish = [chunks](ProbeSample& sample) { return chunks->Finish(sample); };
  DeviceState& s = run.state();
  if (run.spec().direction == Direction::kH2D) {
    void* const dst = s.device_destination.ptr();
    return MakeEventTimedProbe(
        run, LandsOnDevice{s.pinned, dst, "the device copy"},
        [chunks, dst, &s] {
          chunks->EnqueueChunkedCopies(dst, s.pinned.ptr(), cudaMemcpyHostToDevice, 0);
        },
        std::move(finish));
  }
  return MakeEventTimedProbe(
      run, LandsOnHost{&s.device_source, s.pinned, "the host copy"},
      [chunks, &s] {
        chunks->EnqueueChunkedCopies(s.pinned.ptr(), s.device_source.ptr(), cudaMemcpyDeviceToHost,
                                     0);
      },
      std::move(finish));
}

}  // namespace xferd::probes::cuda
