#include "probes/cuda/device_state.h"

#include <chrono>
#include <thread>

#include "probes/cuda/cuda_check.h"
#include "probes/cuda/probe_abort.h"

namespace xferd::probes::cuda {

DeviceState::~DeviceState() {
  using Clock = std::chrono::steady_clock;
  // The resources are freed on their own device, once it is idle.
  bool idle = cudaSetDevice(index) == cudaSuccess;
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  for (bool busy = idle; busy && idle;) {
    busy = false;
    for (const Stream& stream : streams) {
      if (cudaStreamQuery(stream) == cudaErrorNotReady) busy = true;
    }
    if (!busy) break;
    if (Clock::now() >= give_up) idle = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!idle) Leak();
  // The members free the rest as they go.
}

void DeviceState::DrainUnfinishedWork(const ProbeSpec& spec, const std::stop_token& stop) {
  using Clock = std::chrono::steady_clock;
  if (!unfinished_work) return;
  const auto deadline = Clock::now() + spec.deadline;
  for (;;) {
    bool idle = true;
    for (const Stream& stream : streams) {
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
  unfinished_work = false;
}

void DeviceState::Leak() {
  for (auto& stream : streams) stream.Leak();
  for (Event& e : marks) e.Leak();
  for (auto& join : joins) join.Leak();
  for (Memory* m : {&device_result_memory, &host_result_memory, &device_source.memory,
                    &device_destination.memory, &pinned.memory, &pinned_second.memory,
                    &pageable.memory, &mapped.memory, &managed}) {
    m->Leak();
  }
}

}  // namespace xferd::probes::cuda
