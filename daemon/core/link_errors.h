// Link errors on a GPU's path, judged across readings (probes/link_errors.h reads them): how
// much each counter grew since the last reading, whether each source can be trusted (a
// missing or odd file cannot, nor a counter that went backwards, until it reads sanely
// again), and a log line when a source's state changes, never one per cycle. What grew
// around a low reading names the link_errors cause (core/diagnosis.h); how the thresholds
// were chosen: docs/health.md, "Link errors".
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "xferd/probes/link_errors.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// One device of the path after judging.
struct LinkErrorDevice {
  probes::AerCounters read;                  // as read: what the exporter publishes
  bool readable = false;                     // every AER file read, and no count went backwards
  std::string problem;                       // why not; "" when readable
  std::array<std::uint64_t, 3> grown{};      // per AerClass since the last good reading
  std::vector<probes::AerKind> kinds_grown;  // the error kinds that grew, by how much
};

// One GPU's path at one moment, judged.
struct LinkErrorReading {
  std::vector<LinkErrorDevice> aer;      // in the path's order, the GPU first
  std::optional<std::uint64_t> replays;  // NVML's replay counter as read
  bool replays_readable = false;
  std::string replays_problem;
  std::uint64_t replays_grown = 0;
  double interval_s = 0;  // since the previous reading; 0 at the first
};

// DCGM's health watch flags a GPU whose PCIe replays grow faster than this ("8 replays per
// minute is the maximum recommended by RM", dcgm's hardware limits): xferd holds correctable
// AER errors to the same rate. Uncorrectable errors count from the first.
inline constexpr double kLinkErrorsPerMinute = 8;
// Growth is weighed over the last readings: the interval that held the cycle's probes and
// the one before it ("around" a low reading).
inline constexpr std::size_t kLinkErrorReadings = 2;

// What grew on one GPU's path over its recent readings.
struct LinkErrorGrowth {
  double window_s = 0;  // the span counted over; 0: nothing to compare with yet
  std::uint64_t replays = 0;
  std::array<std::uint64_t, 3> aer{};  // per AerClass, summed over the path's devices
  // The device where the most errors grew, where on the path it sits ("the GPU", "the port
  // above the GPU", "a switch port", "the root port") and its kinds that grew.
  std::string worst_bdf, worst_where;
  std::vector<probes::AerKind> worst_kinds;
  // At least kLinkErrorsPerMinute replays or correctable errors per minute of the window
  // (at least a minute counted), or any uncorrectable error.
  bool Significant() const;
};

// A reading in one line, for the log and `xferd probe`: "PCIe replays 12 (NVML);
// 0000:ba:00.0 (the GPU) AER 0 correctable, 0 nonfatal, 0 fatal; 0000:00:06.0 (the GPU)
// AER not readable: no AER counters in sysfs ...".
std::string DescribeLinkErrors(const LinkErrorReading& reading);

class LinkErrorTracker {
 public:
  // Judges `read` against the GPU's previous reading at `now`; logs what changed.
  LinkErrorReading Observe(const probes::DeviceInfo& device, const probes::LinkErrors& read,
                           SteadyTime now);
  // What grew on the GPU's path over its last kLinkErrorReadings readings.
  LinkErrorGrowth Growth(const std::string& uuid) const;

 private:
  // What a source last said in the log, so that it speaks when its state changes (a problem,
  // then that it reads again), and at most twice per kLinkErrorLogQuiet when it keeps
  // changing (a file that flips every cycle).
  struct SourceLog {
    std::string state;  // "" = readable; else the problem ("missing", "backwards", the text)
    std::optional<SteadyTime> window_start;
    int lines_in_window = 0;
    int unsaid = 0;  // changes not logged yet
  };
  struct Device {
    std::array<std::optional<std::uint64_t>, 3> device, rootport;  // last good counts
    std::map<std::pair<probes::AerClass, std::string>, std::uint64_t> kinds;
    // The last reading went back: the next one only sets the base again, so that a file
    // flipping between two values never reads as errors growing.
    bool rebase = false;
    SourceLog log;
  };
  struct Interval {
    double seconds = 0;
    std::uint64_t replays = 0;
    std::map<std::string, std::array<std::uint64_t, 3>> aer;  // per device
    std::map<std::string, std::vector<probes::AerKind>> kinds;
  };
  struct Gpu {
    std::optional<SteadyTime> last;
    std::vector<std::string> path;  // the bdfs, in order; the last one's root_port flag
    bool top_is_root_port = false;
    std::map<std::string, Device> devices;  // by bdf
    std::optional<std::uint64_t> replays;
    bool replays_rebase = false;  // as Device::rebase
    SourceLog replay_log;
    std::deque<Interval> recent;  // newest last, at most kLinkErrorReadings
  };
  void Say(SourceLog& log, const std::string& state, const std::string& line, bool expected,
           SteadyTime now);
  // Observe's parts, under mutex_: one device of the path against its last counts, and
  // NVML's replay counter against the GPU's last one.
  LinkErrorDevice ObserveDevice(const probes::DeviceInfo& device, const probes::AerCounters& c,
                                const std::string& where, Device& d, SteadyTime now);
  void ObserveReplays(const probes::DeviceInfo& device, const probes::ReplayCounter& replays,
                      Gpu& gpu, LinkErrorReading& out, SteadyTime now);

  mutable std::mutex mutex_;
  std::map<std::string, Gpu> gpus_;  // by UUID
};

// The log is quiet this long about a source that keeps changing state.
inline constexpr std::chrono::minutes kLinkErrorLogQuiet{10};

}  // namespace xferd::core
