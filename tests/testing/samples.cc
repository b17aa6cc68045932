#include "testing/samples.h"

#include <string>

namespace xferd::samples {

core::DeviceHealth HealthOf(int gpu) {
  core::DeviceHealth health;
  health.gpu = gpu;
  health.uuid = "GPU-" + std::to_string(gpu);
  return health;
}

core::LinkWatchState FlappingLinkWatch() {
  core::LinkWatchState w;
  w.watching = true;
  w.source = "sysfs";
  w.transitions = 17;
  w.reduced_s = 42.5;
  w.window_s = 600;
  w.window_transitions = 6;
  w.window_reduced_s = 12;
  w.flapping = true;
  w.last_seen = "0000:00:01.0-0000:01:00.0 Gen4 x8 -> Gen4 x16 (max Gen4 x16)";
  return w;
}

}  // namespace xferd::samples
