// What xferd's probes cost and how steady they are, through the probes library exactly as
// the daemon calls it:
//   - `--sets` sets of `--cycles` back-to-back pinned h2d probes (the default size and
//     iterations): the coefficient of variation of their medians, per set;
//   - `--full-cycles` default cycles (every mode both ways plus pinned bidirectional): the
//     GPU time of one (sum of device_time_s) and the duty cycle at `--interval-s`;
//   - the device memory the backend holds (cudaMemGetInfo before it ran and after);
//   - what the default config costs per minute under the scheduler's device-time allowance
//     (`--max-duty-cycle`, default 0.0025), worked out from the measured per-probe costs
//     (running the real scheduler for many real minutes would be too slow):
//       headline H = pinned h2d + d2h (run every cycle), full cycle F, interval I, duty d.
//       H <= d x I: each cycle spends H plus what the allowance refilled, d x I - H, on the
//         rotation, so min(F, d x I) per interval; a full rotation of the rest takes
//         (F - H) / (d x I - H) intervals.
//       H > d x I: the headline overdraws, cycles are spaced H / d apart: d x 60 s a minute.
// Prints one JSON document on stdout and "default cycle GPU time per minute: X ms" on stderr.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "xferd/probes/cuda_backend.h"
#include "xferd/probes/stats.h"

using namespace xferd::probes;

int main(int argc, char** argv) {
  int cycles = 30, sets = 3, full_cycles = 3, iterations = 20, warmup = 2;
  std::uint64_t size = 64ull << 20;
  double interval_s = 60;
  double max_duty_cycle = 0.0025;  // the daemon's default
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--cycles")
      cycles = std::atoi(argv[i + 1]);
    else if (flag == "--sets")
      sets = std::atoi(argv[i + 1]);
    else if (flag == "--full-cycles")
      full_cycles = std::atoi(argv[i + 1]);
    else if (flag == "--iterations")
      iterations = std::atoi(argv[i + 1]);
    else if (flag == "--warmup")
      warmup = std::atoi(argv[i + 1]);
    else if (flag == "--size")
      size = ParseSize(argv[i + 1]).value_or(0);
    else if (flag == "--interval-s")
      interval_s = std::atof(argv[i + 1]);
    else if (flag == "--max-duty-cycle")
      max_duty_cycle = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--cycles N] [--full-cycles N] [--size 64MiB] "
                   "[--iterations N] [--warmup N] [--interval-s S] [--max-duty-cycle D]\n",
                   argv[0]);
      return 64;
    }
  }
  if (size == 0 || cycles < 2 || sets < 1 || full_cycles < 1 || iterations < 1 ||
      !(interval_s > 0) || !(max_duty_cycle > 0) || max_duty_cycle > 1) {
    std::fprintf(stderr,
                 "xferd_probe_cycles: need a size, >= 2 cycles, >= 1 full cycle, an interval "
                 "> 0 and 0 < max duty cycle <= 1\n");
    return 64;
  }

  // The context alone costs device memory; measure from after it exists.
  std::size_t free_before = 0, free_after = 0, total = 0;
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess ||
      cudaMemGetInfo(&free_before, &total) != cudaSuccess) {
    std::fprintf(stderr, "xferd_probe_cycles: no usable GPU\n");
    return 69;
  }
  CudaOptions options;
  options.max_size_bytes = size;
  std::unique_ptr<TransferBackend> backend;
  try {
    backend = MakeCudaBackend(options);
  } catch (const NoDeviceError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 69;
  }

  auto spec_for = [&](TransferMode mode, Direction direction) {
    ProbeSpec spec;
    spec.mode = mode;
    spec.direction = direction;
    spec.size_bytes = size;
    spec.iterations = iterations;
    spec.warmup = warmup;
    return spec;
  };
  nlohmann::json out;
  out["device"] = backend->Devices()[0].name;
  out["size_bytes"] = size;
  out["iterations"] = iterations;
  out["warmup"] = warmup;

  std::vector<double> cycle_device_s;
  std::map<std::string, std::vector<double>> medians, device_times;
  bool all_ok = true;
  for (int c = 0; c < full_cycles; ++c) {
    double device_s = 0;
    for (const auto& [mode, direction] : AllModeDirections()) {
      const ProbeSample s = backend->Run(0, spec_for(mode, direction));
      const std::string key = std::string(ToString(mode)) + " " + std::string(ToString(direction));
      device_s += s.device_time_s;
      device_times[key].push_back(s.device_time_s);
      if (s.status != ProbeStatus::kOk) {
        all_ok = false;
        out["errors"].push_back(key + ": " + std::string(ToString(s.status)) + ": " + s.message);
        continue;
      }
      medians[key].push_back(s.MedianBandwidth());
      if (s.overlap_ratio) out["overlap_ratio"][key].push_back(*s.overlap_ratio);
    }
    cycle_device_s.push_back(device_s);
    if (c == 0) cudaMemGetInfo(&free_after, &total);
  }
  out["default_cycle"]["device_time_s"] = cycle_device_s;
  out["default_cycle"]["device_time_s_median"] = Median(cycle_device_s);
  out["default_cycle"]["interval_s"] = interval_s;
  out["default_cycle"]["duty_cycle"] = Median(cycle_device_s) / interval_s;
  for (auto& [key, values] : medians) {
    out["modes"][key] = {{"median_bytes_per_s", Median(values)},
                         {"device_time_s_median", Median(device_times[key])}};
  }
  {
    // The steady state under the allowance (see the top of this file for the arithmetic).
    const double full = Median(cycle_device_s);
    const double headline = Median(device_times["pinned h2d"]) + Median(device_times["pinned d2h"]);
    const double refill = max_duty_cycle * interval_s;  // allowance earned per interval
    auto& sched = out["scheduled"];
    sched["max_duty_cycle"] = max_duty_cycle;
    sched["interval_s"] = interval_s;
    sched["headline_device_time_s"] = headline;
    sched["full_cycle_device_time_s"] = full;
    double per_minute_s = 0;
    if (headline >= refill) {
      per_minute_s = max_duty_cycle * 60;
      sched["cycles_spaced_s"] = headline / max_duty_cycle;
    } else {
      per_minute_s = std::min(full, refill) * 60 / interval_s;
      sched["full_rotation_minutes"] =
          refill >= full ? interval_s / 60
                         : (full - headline) / (refill - headline) * interval_s / 60;
    }
    sched["device_time_per_minute_s"] = per_minute_s;
    std::fprintf(stderr, "default cycle GPU time per minute: %.1f ms (max_duty_cycle %g, "
                 "interval %g s: headline %.1f ms every cycle, full cycle %.1f ms)\n",
                 per_minute_s * 1e3, max_duty_cycle, interval_s, headline * 1e3, full * 1e3);
  }
  out["device_memory_held_bytes"] =
      static_cast<long long>(free_before) - static_cast<long long>(free_after);

  for (int set = 0; set < sets; ++set) {
    std::vector<double> pinned_h2d, pinned_device_s;
    for (int c = 0; c < cycles; ++c) {
      const ProbeSample s = backend->Run(0, spec_for(TransferMode::kPinned, Direction::kH2D));
      if (s.status != ProbeStatus::kOk) {
        all_ok = false;
        out["errors"].push_back("pinned h2d cycle " + std::to_string(c) + ": " + s.message);
        continue;
      }
      pinned_h2d.push_back(s.MedianBandwidth());
      pinned_device_s.push_back(s.device_time_s);
    }
    if (pinned_h2d.empty()) continue;
    out["pinned_h2d_cycles"].push_back(
        {{"medians_bytes_per_s", pinned_h2d},
         {"mean_bytes_per_s", Mean(pinned_h2d)},
         {"cv", CoefficientOfVariation(pinned_h2d)},
         {"min_bytes_per_s", *std::min_element(pinned_h2d.begin(), pinned_h2d.end())},
         {"max_bytes_per_s", *std::max_element(pinned_h2d.begin(), pinned_h2d.end())},
         {"device_time_s_median", Median(pinned_device_s)}});
  }
  std::printf("%s\n", out.dump(2).c_str());
  return all_ok ? 0 : 1;
}
