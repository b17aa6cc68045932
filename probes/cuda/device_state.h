// Everything one GPU's probes share: streams, events, buffers, the checksum slot, and what
// the buffers hold. Allocated on first need (provisioning.h), sized for the largest probe,
// kept. Names CUDA runtime types (resources.h): private to probes/cuda.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "probes/cuda/probe_timer.h"
#include "probes/cuda/resources.h"
#include "xferd/probes/types.h"

namespace xferd::probes::cuda {

// A buffer that is a source in one direction and a destination in the other: it knows
// how many leading bytes hold the static pattern (written, or verified after a copy), so a
// source is refilled only after something else was written into it.
struct HostBuffer {
  Memory memory;
  void* device_ptr = nullptr;  // mapped buffers: the device's address of it
  std::uint64_t pattern_bytes = 0;
  void* ptr() const { return memory.get(); }  // host address
};

struct DeviceBuffer {
  Memory memory;
  std::uint64_t pattern_bytes = 0;
  void* ptr() const { return memory.get(); }
};

struct DeviceState {
  DeviceState(int index, int blocks) : index(index), blocks(blocks) {}
  // Frees what it holds on its own device once that is idle; a GPU that does not answer
  // within 2 s has it leaked instead: leaking its buffers at exit beats hanging the shutdown.
  ~DeviceState();
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  std::mutex mu;
  int index = 0;
  int blocks = 0;  // grid size for the streaming kernels
  int numa_node = -1;
  std::string placement_note;  // why host buffers could not be put on numa_node, if so
  bool ready = false;
  bool unfinished_work = false;  // a probe timed out or was cancelled with work in flight

  std::vector<Stream> streams;  // [0]: the probe's own stream
  Event marks[kMarkCount];      // by Mark: what the timer records
  std::vector<Event> joins;     // [k]: stream k's work joined back into stream 0
  Memory device_result_memory;  // one checksum slot on the device
  Memory host_result_memory;    // and its pinned copy

  DeviceBuffer device_source, device_destination;
  HostBuffer pinned, pinned_second, pageable, mapped;
  Memory managed;
  std::uint64_t pinned_bytes = 0;

  std::map<std::uint64_t, std::uint64_t> pattern_checksums;  // size -> static pattern checksum
  std::map<std::uint64_t, int> compute_rounds;               // size -> overlap kernel rounds

  cudaEvent_t mark(Mark m) const { return marks[static_cast<int>(m)]; }
  std::uint64_t* device_result() const {
    return static_cast<std::uint64_t*>(device_result_memory.get());
  }
  std::uint64_t* host_result() const {
    return static_cast<std::uint64_t*>(host_result_memory.get());
  }

  // Waits, up to the spec's deadline, for work an earlier probe left behind when it timed
  // out or was cancelled; a GPU still busy then is reported as hung (ProbeAbort kTimeout).
  void DrainUnfinishedWork(const ProbeSpec& spec, const std::stop_token& stop);

  // Gives up everything held without a CUDA call: the GPU does not answer, and freeing
  // could hang the shutdown.
  void Leak();
};

}  // namespace xferd::probes::cuda
