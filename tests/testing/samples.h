// States of core that several tests hand to the views (the status document, the page, the
// health report) and that mean the same in each: built here once, so the tests that read
// them back agree on what they were given.
#pragma once

#include "core/health_tracker.h"
#include "core/link_watch.h"

namespace xferd::samples {

// The health of GPU `gpu` (uuid "GPU-<gpu>") with nothing judged in it yet: no band, no
// series, no cause.
core::DeviceHealth HealthOf(int gpu);

// A link watched through sysfs that changed 6 times in its last 600 s (17 in all) and ran
// reduced 12 s of them (42.5 s in all): flapping, last seen retraining from Gen4 x8.
core::LinkWatchState FlappingLinkWatch();

}  // namespace xferd::samples
