// The probe loop: cycles at the configured interval with random jitter, never overlapping,
// within a per-cycle time budget and a device-time allowance (core/allowance.h), skipping
// GPUs that are busy, re-measuring a reading that would move a verdict within seconds, and
// telling the service how far it got so the systemd watchdog is only fed while it moves.
// The scheduler decides when and which probe; each one is run, timed and judged by the
// ProbeRunner (core/probe_runner.h) as for every other caller. How it all adds up:
// docs/health.md ("Cadence, allowance and fast confirmation").
//
// Each cycle the headline probes (pinned h2d and d2h of every size) always run, from the
// first cycle on. Then the series under watch (degraded, or whose last reading was bad)
// are re-measured, every cycle until they clear, while the whole allowance pays. The
// others rotate, stalest first, each only while its cost fits in the allowance above
// burst_reserve, so rotation can never delay the headline or eat the reserve. The reserve
// pays for fast confirmation: a reading that starts a streak toward a flip (bad on a
// healthy series, good on a degraded one) is re-measured after a few seconds until the
// streak flips the verdict or breaks; the round that can flip it toward degraded also runs
// the probes that name the cause (pinned and pageable h2d, pinned both ways) and re-reads
// the link, and the round that can bring a GPU back re-measures every series of it that is
// degraded. Each GPU's probes follow its link (core::PlanProbes: sizes, device-time
// target). Where the cycle budget runs out, the next cycle starts with the first GPU it
// cut, so no GPU is left unmeasured cycle after cycle.
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
#include <set>
#include <stop_token>
#include <string>
#include <tuple>
#include <vector>

#include "core/allowance.h"
#include "core/busy_detector.h"
#include "core/clock.h"
#include "core/diagnosis.h"
#include "core/freshness.h"
#include "core/host_groups.h"
#include "core/probe_runner.h"
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
  // Each planned series of the GPU after this cycle (cycles only, not confirmation
  // rounds): why it runs, whether the allowance held it back, and when it is expected to
  // run next (Allowance::Forecast; nullopt: not within two hours).
  struct Outlook {
    probes::ProbeSpec spec;
    ProbeClass cls = ProbeClass::kRotating;
    bool held_back = false;
    std::optional<SteadyTime> next_run;
  };
  std::vector<Outlook> outlook;
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
  // When a verdict next lapses as its readings grow old (HealthTracker::NextExpiry), and
  // what to do then: the loop wakes for it between cycles, so a cleared fault or an
  // unmeasured GPU shows when its bound says. Unset: only at cycles.
  std::function<std::optional<SteadyTime>()> next_expiry;
  std::function<void()> on_expiry;
};

// How many cycles ahead the outlook looks for a series' next run.
inline constexpr int kOutlookCycles = 120;

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

  // The probe in flight when it has run past deadline + HangGrace; nullopt otherwise.
  std::optional<Stall> CheckStall(SteadyTime now);
  // Since when a probe has kept `device`'s link busy (ProbeRunner::ProbingSince). Any thread.
  std::optional<SteadyTime> ProbingSince(int device) const { return runner_.ProbingSince(device); }

  std::uint64_t CyclesCompleted() const { return cycles_completed_.load(); }
  // When the last whole cycle ended (steady clock); nullopt before the first.
  std::optional<SteadyTime> LastCycleEnd() const;

  // The device-time allowance of GPU `device` in seconds, as of its last refill (at each
  // cycle's start and end); nullopt for a GPU this scheduler does not probe.
  std::optional<double> Allowance(int device) const;

  // The probes of one cycle on GPU `device` under `config`: PlanProbes on its link (the
  // rate read when the scheduler started), so its sizes follow the link.
  std::vector<probes::ProbeSpec> PlanOf(const Settings& config, int device) const;

 private:
  // A series waiting to be re-measured (fast confirmation).
  struct Pending {
    probes::ProbeSpec spec;
    FlipAhead flip;
    SteadyTime due{};
  };
  // What the last reading of a series said of it (FlipAhead): under watch, degraded.
  struct Watch {
    bool watch = false;
    bool degraded = false;
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
  // One GPU's probes of a cycle into `dc`, in the allowance's order.
  void RunDevice(Round& round, DeviceCycle& dc, const std::vector<probes::ProbeSpec>& plan);
  // The series of `device` under watch now.
  std::set<ProbeKey> Watched(int device) const;
  // Each device's outlook once the next cycle's start is known.
  void Forecast(const Settings& config, SteadyTime next_cycle, CycleReport& report);
  CycleReport RunConfirmations(const Settings& config, BusyDetector* busy, std::stop_token stop);
  // The series of `device` due for confirmation now, with the probes that name a cause.
  std::vector<probes::ProbeSpec> DueConfirmations(const probes::DeviceInfo& device,
                                                  const std::vector<probes::ProbeSpec>& plan);
  // Sets a pending confirmation of `device` to be tried again after another delay.
  void Postpone(const Settings& config, int device, const probes::ProbeSpec& spec);
  // Runs one probe on the device of `dc` (ProbeRunner::Run) and books it; false when it was
  // cut short by stop or by the budget.
  bool RunOne(Round& round, DeviceCycle& dc, const probes::ProbeSpec& spec, bool headline);
  // What a probe that ran costs the allowance and adds to the report and the log.
  void Book(Round& round, DeviceCycle& dc, const Measured& measured, bool headline);
  // What the reading does to its series' verdict: pending confirmation or not.
  void Confirm(const Settings& config, const probes::DeviceInfo& device,
               const probes::LinkPath& path, const probes::ProbeSample& sample);
  // Concurrent groups (scheduler_concurrent.cc): the groups due this cycle, each direction
  // at once on all members, charged to each member's allowance above the reserve.
  struct GroupRecord {
    std::optional<SteadyTime> last_run;
    std::map<std::pair<int, probes::Direction>, double> cost_s;  // per member and direction
    // Due cycles in a row whose own probes left no time in the cycle budget for the group,
    // and whether the log has said so since it last ran.
    int budget_misses = 0;
    bool budget_said = false;
  };
  void RunGroups(const Settings& config, SteadyTime cycle_start, std::stop_token stop,
                 CycleReport& report);
  // The group was due but the cycle's own probes used its whole budget (`used`): counted,
  // and said once in the log when it keeps happening.
  void NoteBudgetMiss(const HostGroup& group, GroupRecord& record, const Settings& config,
                      SteadyTime::duration used);
  // Whether every member's allowance has room above the reserve for its last cost here.
  bool GroupFits(const HostGroup& group, const probes::ProbeSpec& spec, const GroupRecord& record,
                 const Settings& config);
  std::optional<GroupRun> RunGroup(const HostGroup& group, const probes::ProbeSpec& spec,
                                   GroupRecord& record, std::stop_token stop, CycleReport& report);
  // Reads the device's link path into `dc`; BookLink takes one already read.
  void ReadLink(DeviceCycle& dc);
  void BookLink(DeviceCycle& dc, probes::LinkPath path);
  // The busy check before a device's probes; true when they must be skipped.
  bool SkipBusy(Round& round, DeviceCycle& dc, const std::vector<probes::ProbeSpec>& specs);
  SteadyTime NextStart(const Settings& config, SteadyTime cycle_start);
  // The earliest time a pending confirmation is due; nullopt when none is.
  std::optional<SteadyTime> NextConfirmation() const;
  SteadyTime ConfirmationDue(const Settings& config, SteadyTime now);

  probes::TransferBackend& backend_;
  std::vector<probes::DeviceInfo> devices_;
  Clock& clock_;
  SchedulerCallbacks callbacks_;
  std::mt19937_64 rng_;
  ProbeRunner runner_;  // runs, times and judges each probe; knows the one in flight

  mutable std::mutex mutex_;  // guards everything below
  Settings config_;
  std::shared_ptr<BusyDetector> busy_;  // shared: a cycle keeps its own across a reload
  bool regrid_ = true;                  // (re)anchor the cycle grid at the next start
  SteadyTime grid_origin_{};
  std::int64_t grid_slot_ = 0;
  std::optional<SteadyTime> last_cycle_end_;
  std::map<int, core::Allowance> allowances_;           // per GPU index
  std::map<int, std::map<ProbeKey, Pending>> pending_;  // per GPU index
  std::map<int, std::map<ProbeKey, Watch>> watch_;      // per GPU index
  std::map<int, double> plan_rate_;      // per GPU: the link rate its plan follows (HostLinkRate)
  std::size_t first_device_ = 0;         // where in devices_ the next cycle starts
  bool overdraw_warned_ = false;         // the headline-overdraw warning is said once
  std::map<int, bool> unreadable_said_;  // per GPU: "link traffic not readable" said

  // Probe thread only: what the concurrent groups are formed and judged from.
  std::map<std::string, GroupRecord> groups_;
  std::map<int, probes::LinkPath> paths_;  // each GPU's last path read
  std::map<std::tuple<int, probes::Direction, std::uint64_t>, double> solo_;  // last ok pinned

  std::atomic<std::uint64_t> cycles_completed_{0};
};

}  // namespace xferd::core
