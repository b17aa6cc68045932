#include "probes/cuda/probe_timer.h"

#include <string>
#include <thread>
#include <utility>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/device_state.h"
#include "probes/cuda/probe_abort.h"

namespace xferd::probes::cuda {

ProbeTimer::ProbeTimer(DeviceState& state, const ProbeSpec& spec, std::stop_token stop,
                       const Progress& progress)
    : state_(state),
      spec_(spec),
      stop_(std::move(stop)),
      progress_(progress),
      deadline_(Clock::now() + spec.deadline) {}

void ProbeTimer::Record(Mark mark, int stream) {
  Check(cudaEventRecord(state_.mark(mark), state_.streams[stream]), "cudaEventRecord");
}

void ProbeTimer::RecordOnLegacyStream(Mark mark) {
  Check(cudaEventRecord(state_.mark(mark), cudaStreamLegacy), "cudaEventRecord");
}

void ProbeTimer::StreamWaits(int stream, Mark mark) {
  Check(cudaStreamWaitEvent(state_.streams[stream], state_.mark(mark), 0), "cudaStreamWaitEvent");
}

void ProbeTimer::Fork(int streams) {
  for (int k = 1; k < streams; ++k) StreamWaits(k, Mark::kStart);
}

void ProbeTimer::Join(int streams) {
  for (int k = 1; k < streams; ++k) {
    Check(cudaEventRecord(state_.joins[k], state_.streams[k]), "cudaEventRecord");
    Check(cudaStreamWaitEvent(state_.streams[0], state_.joins[k], 0), "cudaStreamWaitEvent");
  }
}

void ProbeTimer::Await(Mark mark, Wait wait) {
  for (;;) {
    const cudaError_t e = cudaEventQuery(state_.mark(mark));
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) Check(e, "cudaEventQuery");
    if (stop_.stop_requested()) throw ProbeAbort{ProbeStatus::kError, "cancelled"};
    if (Clock::now() > deadline_) {
      throw ProbeAbort{ProbeStatus::kTimeout,
                       "did not finish within its " + std::to_string(spec_.deadline.count()) +
                           " ms deadline (" + std::to_string(progress_.done) + " of " +
                           std::to_string(spec_.warmup + spec_.iterations) + " transfers done)"};
    }
    if (wait == Wait::kSpin)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

double ProbeTimer::Seconds(Mark from, Mark to) {
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, state_.mark(from), state_.mark(to)), "cudaEventElapsedTime");
  return static_cast<double>(ms) / 1e3;
}

}  // namespace xferd::probes::cuda
