// What the core layer is told to do: the probe plan, busy detection and health settings.
// config/ fills these from the TOML file ([probe], [busy], [health], [metrics]); core reads no file
// and knows nothing of TOML. Defaults here are the documented defaults (deploy/xferd.toml).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::core {

// An expected band given for one GPU (an index "0" or a UUID, any case), bytes/s.
struct BandOverride {
  std::string gpu;
  double lower_bytes_per_s = 0;
  double upper_bytes_per_s = 0;
};

struct Settings {
  // [probe]
  std::chrono::milliseconds interval{60000};
  double jitter = 0.1;  // each cycle starts up to jitter x interval late, at random
  std::vector<probes::TransferMode> modes{probes::kAllModes.begin(), probes::kAllModes.end()};
  bool bidirectional = true;  // the pinned both-ways probe
  std::vector<std::uint64_t> sizes{64ull << 20};
  // Each probe's transfer size follows its GPU's link (core::PlannedSize): a size over
  // 4 MiB is scaled down on links slower than Gen4 x16, so a transfer takes as long there.
  bool sizes_follow_link = true;
  int iterations = 20;  // timed transfers: the most, with a device-time target
  int warmup = 2;
  // The device time each probe aims for (ProbeSpec::target_device_s): its timed transfers
  // stop once it is reached, at least min_iterations and at most iterations of them, so a
  // probe costs about as much on a slow link as on a fast one. 0 = exactly `iterations`.
  std::chrono::milliseconds probe_time{25};
  int min_iterations = 5;
  std::chrono::milliseconds probe_deadline{5000};  // one probe
  std::chrono::milliseconds cycle_budget{30000};   // one cycle, all GPUs
  double max_duty_cycle = 0.0025;  // device time / wall time: the per-GPU allowance's refill
  // Device seconds of the allowance kept for fast confirmation: the rotating probes never
  // spend it. 1 s pays for re-measuring both headline probes twice and for the probes that
  // name a cause (pageable h2d, pinned both ways) on an H200 whose link lost half its
  // bandwidth (each probe then takes twice as long): ~0.77 s.
  double burst_reserve_s = 1.0;
  int streams = 4;
  std::uint64_t chunk_bytes = 1ull << 20;
  std::uint64_t pinned_cap_bytes = 512ull << 20;
  std::vector<std::string> gpus;  // indices or UUIDs (any case); empty = every GPU
  // Concurrent groups (core/host_groups.h): every GPU of a group probed at once, pinned,
  // at most once per concurrent_interval, within each member's allowance.
  bool concurrent = true;
  std::chrono::milliseconds concurrent_interval{15 * 60 * 1000};
  // Which probes keep a duration histogram: every one, or only the headline (pinned h2d and
  // d2h), to hold the series per host down on large fleets; the gauges stay either way.
  enum class Histograms { kAll, kHeadline };
  Histograms histograms = Histograms::kAll;

  // [metrics] profile: which series the exporter publishes. kFull: every series (the
  // single-host view: histograms, every mode's gauges); kFleet: at most ~60 a GPU, what a
  // fleet's alerts, dashboards and joins read (docs/metrics.md, "Profiles"). core only
  // carries it, as it carries `histograms`, so that one Settings reaches the exporter and
  // the series budget on start and reload alike.
  enum class MetricsProfile { kFull, kFleet };
  MetricsProfile metrics_profile = MetricsProfile::kFull;

  // [busy]
  bool busy_detection = true;
  double busy_gpu_utilization_percent = 50;
  double busy_pcie_bytes_per_s = 2e9;  // rx + tx seen by NVML

  // [health]
  int consecutive_bad = 3;      // cycles in a row before a verdict flips
  int baseline_window = 20;     // cycles the baseline is taken over
  double drift_fraction = 0.8;  // below this x baseline is a bad cycle
  double band_lower_fraction = 0.63;
  double band_upper_fraction = 0.83;
  std::vector<BandOverride> bands;
  // The link watch (core/link_watch.h): every link on each GPU's path read this often
  // between probes (0 = off), and a link that flaps: link_flap_transitions transitions, or a
  // tenth of the window below capability, within link_flap_window.
  std::chrono::milliseconds link_watch_interval{2000};
  std::chrono::milliseconds link_flap_window{10 * 60 * 1000};
  int link_flap_transitions = 4;
};

}  // namespace xferd::core
