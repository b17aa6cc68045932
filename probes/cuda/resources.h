// Owners of CUDA resources: each frees what it holds when it goes, so no path of the
// backend frees by hand. Leak() gives a resource up without touching the device: for a GPU
// that does not answer, where a free could hang the shutdown. Names CUDA runtime types:
// private to probes/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace xferd::probes::cuda {

// An event or a stream. Converts to its handle, which is what every CUDA call takes.
template <typename Handle, cudaError_t (*Destroy)(Handle)>
class Owned {
 public:
  Owned() = default;
  ~Owned() { Reset(); }
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  // For the create call: cudaEventCreate(event.Out()).
  Handle* Out() {
    Reset();
    return &handle_;
  }
  operator Handle() const { return handle_; }  // NOLINT(google-explicit-constructor)
  void Leak() { handle_ = nullptr; }

 private:
  void Reset() {
    if (handle_ != nullptr) Destroy(std::exchange(handle_, nullptr));
  }
  Handle handle_ = nullptr;
};

using Event = Owned<cudaEvent_t, cudaEventDestroy>;
using Stream = Owned<cudaStream_t, cudaStreamDestroy>;

// Memory and the call that frees it: device and managed (cudaFree), pinned and mapped
// (cudaFreeHost) or pageable (std::free) alike.
class Memory {
 public:
  using Release = void (*)(void*);
  Memory() = default;
  Memory(void* ptr, Release release) : ptr_(ptr), release_(release) {}
  ~Memory() { Reset(); }
  Memory(Memory&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), release_(other.release_) {}
  Memory& operator=(Memory&& other) noexcept {
    if (this != &other) {
      Reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      release_ = other.release_;
    }
    return *this;
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  void* get() const { return ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void Leak() { ptr_ = nullptr; }

 private:
  void Reset() {
    if (ptr_ != nullptr) release_(std::exchange(ptr_, nullptr));
  }
  void* ptr_ = nullptr;
  Release release_ = nullptr;
};

// Each allocation with its release. On failure the Memory is empty and *error says why.
Memory AllocateDevice(std::size_t bytes, cudaError_t* error);
Memory AllocateManaged(std::size_t bytes, cudaError_t* error);
Memory AllocatePinned(std::size_t bytes, unsigned flags, cudaError_t* error);
// Page-aligned pageable memory; empty when the host is out of memory.
Memory AllocatePageable(std::size_t bytes);

}  // namespace xferd::probes::cuda
