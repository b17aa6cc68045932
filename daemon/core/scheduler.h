// The probe loop: cycles at the configured interval with random jitter, never overlapping,
// within a per-cycle time budget and a device-time allowance, skipping GPUs that are busy,
// watching the link around every probe for another process's traffic, re-measuring a
// reading that would move a verdict within seconds, and telling the service how far it got
// so the systemd watchdog is only fed while it moves. How it all adds up: docs/health.md
// ("Cadence, allowance and fast confirmation").
//
// The allowance (per GPU, a token bucket of device seconds) keeps the GPU time spent
// probing near max_duty_cycle: it refills at max_duty_cycle x wall time and holds at most
// max_duty_cycle x kAllowanceWindow plus burst_reserve. Each cycle the headline probes
// (pinned h2d and d2h of every size) always run, from the first cycle on. The others
// rotate, stalest first, each only while its cost (as last measured, or estimated from its
// bytes at a conservative share of the link) fits in the balance above burst_reserve, so
// rotation can never delay the headline or eat the reserve. The reserve pays for fast
// confirmation: a reading that starts a streak toward a flip (bad on a healthy series,
// good on a degraded one) is re-measured after a few seconds until the streak flips the
// verdict or breaks, and the round that can flip it toward degraded also runs the probes
// that name the cause (pinned and pageable h2d, pinned both ways) and re-reads the link.
//
// One probe thread calls Run(); results come out through the callbacks on that thread.
// Reconfigure, CheckStall and the counters may be used from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <tuple>
#include <vector>

#include "core/busy_detector.h"
#include "core/clock.h"
#include "core/diagnosis.h"
#include "core/host_groups.h"
#include "core/settings.h"
#include "xferd/probes/backend.h"

namespace xferd::core {

// What one cycle did on one GPU.
struct DeviceCycle {
  probes::DeviceInfo device;
  std::vector<probes::ProbeSample> samples;  // every probe that ran, in order
  std::optional<BusyReading> busy;           // the reading taken before probing
  bool skipped_busy = false;                 // busy: none of its probes ran
  probes::LinkPath link_path;                // read right after a probe (link trained)
  bool link_read = false;                    // link_path was read this cycle
  int skipped_budget = 0;                    // probes not started: the budget ran out
  int held_back = 0;       // rotating probes left for a later cycle: the allowance was short
  int contended = 0;       // samples whose window saw foreign traffic
  double allowance_s = 0;  // the device-time allowance left after this cycle (may be < 0)
};

struct CycleReport {
  // The cycle's number, 1 for the first; for a confirmation round, the cycle it follows.
  std::uint64_t number = 0;
  // A fast-confirmation round between cycles (only the re-measured series and the probes
  // that name a cause ran), not a cycle: it does not count as one.
  bool confirmation = false;
  std::chrono::system_clock::time_point started_at;
  double wall_s = 0;    // start to end of the cycle
  double device_s = 0;  // device time of its probes (what the duty cycle counts)
  std::vector<DeviceCycle> devices;
  int ok = 0, errors = 0, timeouts = 0, unsupported = 0, skipped_busy = 0, skipped_budget = 0;
  int contended = 0;  // ok probes whose window saw foreign traffic (also counted in ok)
  int held_back = 0;  // summed over GPUs: not an error, the rotation reaches them later
  bool over_budget = false;
  std::chrono::milliseconds next_in{0};  // until the next cycle starts
  // Concurrent runs of groups that were due (after the GPUs' own probes): one per group and
  // direction. Groups due but not run (a member busy or short of allowance, the budget
  // spent) stay due for the next cycle.
  std::vector<GroupRun> concurrent;
  int concurrent_held_back = 0;  // group runs left for a later cycle
};

// A probe that has run past its deadline without returning (a hung device call).
struct Stall {
  int device = 0;
  probes::ProbeSpec spec;
  std::chrono::milliseconds running_for{0};
  bool first_report = false;  // true the first time this probe is reported
};

struct SchedulerCallbacks {
  // After each probe that ran (not after one cut short by stop).
  std::function<void(const probes::DeviceInfo&, const probes::ProbeSample&)> on_probe;
  // A probe that did not run because its GPU was busy.
  std::function<void(const probes::DeviceInfo&, const probes::ProbeSpec&)> on_skipped_busy;
  // After the link path of a GPU was read this cycle.
  std::function<void(const probes::DeviceInfo&, const probes::LinkPath&)> on_link_path;
  // After each whole cycle or confirmation round (not after one cut short by stop).
  std::function<void(const CycleReport&)> on_cycle;
  // After each reading with its contention judged: what it does to its series' verdict
  // (HealthTracker::ReadingsToFlip). Unset: no fast confirmation.
  std::function<FlipAhead(const probes::DeviceInfo&, const probes::LinkPath&,
                          const probes::ProbeSample&)>
      flip_ahead;
};

// The allowance holds at most max_duty_cycle x this much device time (plus burst_reserve):
// enough to save up for the dearest probe at any sane duty cycle (1.5 s at the default
// 0.0025), little enough that a long idle spell does not buy a burst much over the cap.
inline constexpr std::chrono::minutes kAllowanceWindow{10};

// Fast confirmation waits a random delay in this range before re-measuring (at most half
// the interval): long enough that a dip of a second or two is not confirmed, short enough
// that consecutive_bad readings take well under a minute.
inline constexpr std::chrono::seconds kConfirmDelayMin{5}, kConfirmDelayMax{15};

// An unmeasured probe's cost is estimated at ProfileOf(mode).cost_fraction of the GPU's
// narrowest link; before that link was read, of this rate (PCIe Gen3 x8: conservative).
inline constexpr double kUnknownLinkBytesPerSecond = 7.9e9;

// The allowance's capacity and where it starts: one interval's refill above the reserve,
// so the first cycle runs the headline and what that buys, not every probe at once.
double AllowanceCapacity(const Settings& config);
double InitialAllowance(const Settings& config);

// A probe is stalled when it runs this long past its deadline without returning.
std::chrono::milliseconds StallGrace(std::chrono::milliseconds deadline);

class Scheduler {
 public:
  // `seed` drives the jitter; pass a machine-specific one so a fleet does not probe in step.
  Scheduler(probes::TransferBackend& backend, std::vector<probes::DeviceInfo> devices,
            const Settings& config, std::unique_ptr<BusyDetector> busy, Clock& clock,
            std::uint64_t seed, SchedulerCallbacks callbacks);

  // Run cycles until `stop`: the first at once, the next after the interval. Returns when
  // stopped (mid-cycle too: the backend gets `stop` and gives up early).
  void Run(std::stop_token stop);

  // A new config (SIGHUP) and busy detector, applied from the next cycle on.
  void Reconfigure(const Settings& config, std::unique_ptr<BusyDetector> busy);

  // The probe in flight when it has run past deadline + StallGrace; nullopt otherwise.
  std::optional<Stall> CheckStall(SteadyTime now);

  std::uint64_t CyclesCompleted() const { return cycles_completed_.load(); }
  // When the last whole cycle ended (steady clock); nullopt before the first.
  std::optional<SteadyTime> LastCycleEnd() const;

  // The device-time allowance of GPU `device` in seconds, as of its last refill (at each
  // cycle's start and end); nullopt for a GPU this scheduler does not probe.
  std::optional<double> Allowance(int device) const;

 private:
  // What the rotation knows about one probe of one GPU.
  struct ProbeRecord {
    std::optional<SteadyTime> last_run;  // when it last ran (any outcome); never = stalest
    double cost_s = 0;                   // device time it took then
  };
  using ProbeKey = std::tuple<probes::TransferMode, probes::Direction, std::uint64_t>;
  // A series waiting to be re-measured (fast confirmation).
  struct Pending {
    probes::ProbeSpec spec;
    FlipAhead flip;
    SteadyTime due{};
  };
  struct DeviceAllowance {
    double balance_s = 0;
    SteadyTime refilled_at{};
    std::map<ProbeKey, ProbeRecord> probes;
    double headline_s = 0;        // device time of the headline probes in the last cycle
    double link_bytes_per_s = 0;  // the narrowest link's current rate, as last read
    std::map<ProbeKey, Pending> pending;
  };
  // Where a cycle or round is while it runs.
  struct Round {
    const Settings& config;
    BusyDetector* busy;
    std::stop_token stop;
    SteadyTime start;
    CycleReport& report;
  };

  CycleReport RunCycle(const Settings& config, BusyDetector* busy, std::stop_token stop);
  CycleReport RunConfirmations(const Settings& config, BusyDetector* busy, std::stop_token stop);
  // Runs one probe on the device of `dc` and books it (allowance, counters, callbacks, the
  // link path, what is pending); false when it was cut short by stop or by the budget.
  bool RunOne(Round& round, DeviceCycle& dc, const probes::ProbeSpec& spec, bool headline);
  // Concurrent groups (scheduler_concurrent.cc): the groups due this cycle, each direction
  // at once on all members, charged to each member's allowance above the reserve.
  struct GroupRecord {
    std::optional<SteadyTime> last_run;
    std::map<std::pair<int, probes::Direction>, double> cost_s;  // per member and direction
  };
  void RunGroups(const Settings& config, SteadyTime cycle_start, std::stop_token stop,
                 CycleReport& report);
  // Whether every member's allowance has room above the reserve for its last cost here.
  bool GroupFits(const HostGroup& group, const probes::ProbeSpec& spec, const GroupRecord& record,
                 const Settings& config);
  std::optional<GroupRun> RunGroup(const HostGroup& group, const probes::ProbeSpec& spec,
                                   GroupRecord& record, std::stop_token stop, CycleReport& report);
  // Reads the device's link path into `dc` (and the rate cost estimates use).
  void ReadLink(DeviceCycle& dc);
  // The busy check before a device's probes; true when they must be skipped.
  bool SkipBusy(Round& round, DeviceCycle& dc, const std::vector<probes::ProbeSpec>& specs);
  SteadyTime NextStart(const Settings& config, SteadyTime cycle_start);
  // The earliest time a pending confirmation is due; nullopt when none is.
  std::optional<SteadyTime> NextConfirmation() const;
  SteadyTime ConfirmationDue(const Settings& config, SteadyTime now);
  // Adds max_duty_cycle x the time since the last refill, up to the capacity.
  void Refill(DeviceAllowance& allowance, const Settings& config, SteadyTime now) const;
  // A probe's device time: as last measured, else estimated from its bytes.
  double Cost(const DeviceAllowance& allowance, const probes::ProbeSpec& spec) const;
  // The cycle's probes for one GPU: headline first, then the rest stalest first.
  std::vector<probes::ProbeSpec> Order(const std::vector<probes::ProbeSpec>& plan,
                                       const Settings& config,
                                       const DeviceAllowance& allowance) const;

  probes::TransferBackend& backend_;
  std::vector<probes::DeviceInfo> devices_;
  Clock& clock_;
  SchedulerCallbacks callbacks_;
  std::mt19937_64 rng_;

  mutable std::mutex mutex_;  // guards everything below
  Settings config_;
  std::shared_ptr<BusyDetector> busy_;  // shared: a cycle keeps its own across a reload
  bool regrid_ = true;                  // (re)anchor the cycle grid at the next start
  SteadyTime grid_origin_{};
  std::int64_t grid_slot_ = 0;
  // The probe in flight.
  bool in_probe_ = false;
  int probe_device_ = 0;
  probes::ProbeSpec probe_spec_;
  SteadyTime probe_started_{};
  std::uint64_t probe_serial_ = 0, stall_reported_serial_ = 0;
  std::optional<SteadyTime> last_cycle_end_;
  std::map<int, DeviceAllowance> allowances_;  // per GPU index
  bool overdraw_warned_ = false;               // the headline-overdraw warning is said once
  std::map<int, bool> unreadable_said_;        // per GPU: "link traffic not readable" said

  // Probe thread only: what the concurrent groups are formed and judged from.
  std::map<std::string, GroupRecord> groups_;
  std::map<int, probes::LinkPath> paths_;  // each GPU's last path read
  std::map<std::tuple<int, probes::Direction, std::uint64_t>, double> solo_;  // last ok pinned

  std::atomic<std::uint64_t> cycles_completed_{0};
};

}  // namespace xferd::core
