// The real backend: CUDA runtime, every mode of docs/probe.md. Declared here without any CUDA
// header; built only when the CUDA toolkit was found (XFERD_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "xferd/probes/backend.h"

namespace xferd::probes {

struct CudaOptions {
  // Most pinned host memory the backend holds per device, all modes together.
  std::uint64_t pinned_cap_bytes = 512ull << 20;
  // Largest transfer a probe may ask for; buffers are sized for it once and reused.
  std::uint64_t max_size_bytes = 64ull << 20;
  std::filesystem::path sysfs_root = "/sys";

  // Test hooks (the GPU tests use them to prove the checks work; leave them off):
  // damage one byte of every transfer, so its correctness check must fail;
  bool corrupt_transfers = false;
  // behave as if the device lacked the capability, so the mode is skipped with a reason.
  bool hide_concurrent_managed_access = false;
  bool hide_can_map_host_memory = false;
};

// True when this build carries the CUDA backend.
bool CudaBackendBuilt();

// Throws NoDeviceError (no driver, no GPU, or a build without CUDA) with a message that
// names the cause and the fix (the commands add how to try the simulated device).
std::unique_ptr<TransferBackend> MakeCudaBackend(const CudaOptions& options);

}  // namespace xferd::probes
