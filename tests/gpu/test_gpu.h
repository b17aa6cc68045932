// The GPU the single-GPU tests run on: `xferd_gpu_tests --gpu N` or XFERD_TEST_GPU=N
// (default 0), so a multi-GPU host can test each of its GPUs.
#pragma once

namespace xferd::probes {
int TestGpu();
}
