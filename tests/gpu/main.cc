// The GPU tests' main: gtest's flags, then --gpu N (or XFERD_TEST_GPU=N) for the GPU the
// single-GPU tests run on.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "test_gpu.h"

namespace xferd::probes {
namespace {
int g_gpu = 0;

bool ParseGpu(const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1023) return false;
  g_gpu = static_cast<int>(value);
  return true;
}
}  // namespace

int TestGpu() {
  return g_gpu;
}
}  // namespace xferd::probes

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);  // takes out gtest's own flags
  const char* chosen = std::getenv("XFERD_TEST_GPU");
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gpu") == 0 && i + 1 < argc) {
      chosen = argv[++i];
    } else if (std::strncmp(argv[i], "--gpu=", 6) == 0) {
      chosen = argv[i] + 6;
    } else {
      std::fprintf(stderr, "xferd_gpu_tests: unknown argument '%s' (use --gpu N and gtest flags)\n",
                   argv[i]);
      return 64;
    }
  }
  if (chosen != nullptr && !xferd::probes::ParseGpu(chosen)) {
    std::fprintf(stderr, "xferd_gpu_tests: '%s' is not a GPU index (--gpu 0, 1, ...)\n", chosen);
    return 64;
  }
  std::printf("testing GPU %d (--gpu N or XFERD_TEST_GPU=N picks another)\n",
              xferd::probes::TestGpu());
  return RUN_ALL_TESTS();
}
