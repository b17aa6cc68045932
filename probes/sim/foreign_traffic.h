// Another process's traffic on a simulated GPU's link, and the link's byte counters: what
// lets the simulated device exercise contention detection. Bursts of a fixed rate begin at
// random (seeded) moments, mid-probe too, and are on for `duty` of the time; while one is
// on it takes its share of the link from a probe moving data the same way, and the
// counters (NVML's PCIe byte counters, in place) see both.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <utility>

#include "xferd/probes/sim_backend.h"
#include "xferd/probes/types.h"

namespace xferd::probes {

// Counters count payload plus protocol overhead (headers, framing, flow control), as the
// hardware counters do: ~7 % on a PCIe Gen5 x16 H200, where 55 GB/s of copies read as
// ~59 GB/s; and a little traffic the other way (read requests, acknowledgements).
inline constexpr double kSimCounterOverhead = 1.07;
inline constexpr double kSimCounterReverse = 0.04;
// Bursts last 1-7 s (uniform): a workload's copy phase, long against a probe.
inline constexpr double kSimBurstMinS = 1.0, kSimBurstMaxS = 7.0;

// Times are seconds on the simulated device's timeline (since the backend was made).
// Not thread-safe: the backend serialises each device's calls.
class SimLinkTraffic {
 public:
  SimLinkTraffic(const ForeignTrafficOptions& options, std::uint64_t seed);

  // How long one transfer takes that alone would take `alone_s` from `start_s`, moving
  // `own_bytes_per_s` per direction in `direction`, on a link that carries at most
  // `capacity_bytes_per_s` per direction: stretched by the share foreign bursts in the same
  // direction take while they overlap it.
  double Stretch(double start_s, double alone_s, Direction direction, double own_bytes_per_s,
                 double capacity_bytes_per_s);

  // A probe's own bytes, counted from now on (the backend books them as the probe ends).
  void Book(double h2d_bytes, double d2h_bytes);

  // The counters at `at_s`: {rx, tx} bytes since the start of the timeline, rx = host to
  // device. Own bytes count once booked; foreign bytes as they flow. Never earlier than
  // ten minutes before the latest time asked about (older bursts are folded into a total).
  std::pair<double, double> Counters(double at_s);

  // The foreign rate at `at_s`: {h2d, d2h} bytes/s.
  std::pair<double, double> ForeignRate(double at_s);

 private:
  struct Burst {
    double start_s, end_s;
  };
  // Extends the burst list to cover `until_s`; folds bursts ending before the horizon.
  void Generate(double until_s);
  // Seconds of [a, b) a burst is on.
  double ActiveSeconds(double a, double b);
  std::pair<double, double> PerDirection(double bytes) const;  // {h2d, d2h} of foreign bytes

  ForeignTrafficOptions options_;
  std::mt19937_64 rng_;
  std::deque<Burst> bursts_;
  double generated_until_s_ = 0;
  double folded_until_s_ = 0;  // bursts before this are in folded_active_s_
  double folded_active_s_ = 0;
  double own_rx_ = 0, own_tx_ = 0;  // booked, overhead included
};

}  // namespace xferd::probes
