// One probe, measured and judged the same way for every caller. The scheduler (`xferd run`,
// each GPU alone and its concurrent groups), `xferd probe` and `xferd probe --concurrent`
// decide when and which probe; a ProbeRunner runs it: inside its link-traffic window, timed
// on the clock, held to its deadline, watched for a hang, its contention judged, the link
// read while the probe keeps it trained, and what the device spent. JudgeSample and
// JudgeAggregate give the verdict of what came back. The callers keep the rest: the
// scheduler its allowance, counters and logs, the commands their printing. A probe's way
// through it for each command: docs/architecture.md ("How a probe result flows").
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/band.h"
#include "core/busy_detector.h"
#include "core/clock.h"
#include "core/host_groups.h"
#include "core/settings.h"
#include "xferd/probes/backend.h"

namespace xferd::core {

// A probe is hung when it runs this long past its deadline without returning. Generous,
// because a false stall gets the service restarted.
std::chrono::milliseconds HangGrace(std::chrono::milliseconds deadline);

// A probe that has run past its deadline and HangGrace without returning (a hung device
// call).
struct Stall {
  int device = 0;
  probes::ProbeSpec spec;
  std::chrono::milliseconds running_for{0};
  bool first_report = false;  // true the first time this probe is reported
};

// How a runner watches for a hung device call.
enum class HangWatch {
  // The caller's thread makes the call and someone else asks CheckStall: the daemon, where
  // a hung probe stops the watchdog pings so systemd restarts the service.
  kReport,
  // A thread of the runner's own makes the call while the caller's watches it: past
  // deadline + HangGrace the call is asked to stop and its answer is a timeout. One-shot
  // commands: a hung driver call must not hang `xferd probe`.
  kCancel,
};

// One probe as it came back, judged.
struct Measured {
  // Its link traffic and contention judged; past its deadline (or cancelled as hung) it is
  // kTimeout, whatever the backend said.
  probes::ProbeSample sample;
  SteadyTime started{};
  double elapsed_s = 0;  // the call's wall time
  // The device time it cost: what the backend reports, at most the wall time of the call
  // (the call waits for the device; a simulated device faster than real time reports more).
  double cost_s = 0;
  // The device's link path when asked, read while the probe kept the link trained; only
  // for a probe that finished ok.
  std::optional<probes::LinkPath> link;
};

// One concurrent run of a group in one direction, as it came back.
struct MeasuredGroup {
  GroupRun run;                // every member's sample held to the deadline
  std::vector<double> cost_s;  // what each member's device spent, in group order
};

class ProbeRunner {
 public:
  // `backend` and `clock` must outlive the runner.
  ProbeRunner(probes::TransferBackend& backend, Clock& clock, HangWatch watch);

  // One probe on `device`. `window` reads the link around it (BusyDetector::BeginProbe and
  // EndProbe) for the contention judgement with `settings`' threshold; nullptr: not read,
  // contention unknown. `read_link`: read the device's link path while the probe keeps it
  // trained (kCancel: again and again while it runs, keeping the widest reading; kReport:
  // right after it). nullopt when `stop` cut it short: not a result.
  std::optional<Measured> Run(const probes::DeviceInfo& device, const probes::ProbeSpec& spec,
                              BusyDetector* window, const Settings& settings, bool read_link,
                              std::stop_token stop);

  // `spec` on every member of `group` at once. `devices` holds the members (looked up by
  // index); `solo_bytes_per_s` is what each member got alone, in group order (0 unknown).
  // nullopt when `stop` cut it short.
  std::optional<MeasuredGroup> RunGroup(const HostGroup& group,
                                        const std::vector<probes::DeviceInfo>& devices,
                                        const std::vector<double>& solo_bytes_per_s,
                                        const probes::ProbeSpec& spec, std::stop_token stop);

  // The probe in flight when it has run past its deadline + HangGrace; nullopt otherwise.
  // Any thread.
  std::optional<Stall> CheckStall(SteadyTime now);

  // Since when a probe has been running on `device` (alone, or as a member of a group);
  // nullopt when none is. Any thread: the link watch asks it.
  std::optional<SteadyTime> ProbingSince(int device) const;

 private:
  // Marks a call in flight (for CheckStall) until it is destroyed.
  class InFlight;
  template <typename Result, typename Call, typename Poll>
  Result Watched(const probes::ProbeSpec& spec, std::stop_token stop, bool& cancelled, Call call,
                 Poll poll);
  // What `device`'s path carries when healthy (HostLinkRate), the rate its contention
  // threshold scales with: of the path `read` for this probe, else as last read.
  double PathRate(int device, const std::optional<probes::LinkPath>& read);

  probes::TransferBackend& backend_;
  Clock& clock_;
  const HangWatch watch_;

  mutable std::mutex mutex_;          // guards the call in flight and path_rates_
  std::map<int, double> path_rates_;  // PathRate by device index
  bool in_probe_ = false;
  int probe_device_ = 0;
  std::vector<int> probe_devices_;  // every GPU of the call in flight
  probes::ProbeSpec probe_spec_;
  SteadyTime probe_started_{};
  std::uint64_t probe_serial_ = 0, stall_reported_serial_ = 0;
};

// The verdict of one result: what `xferd probe` prints in its verdict column and counts
// toward its exit status, and what `xferd run` counts as a reading below the band.
struct SampleVerdict {
  // The band's verdict (JudgeBand); nullopt unless the probe finished ok, uncontended.
  std::optional<BandVerdict> band;
  bool bad = false;  // it failed (error, timeout) or fell below the band
  // "ok", "below band", "n/a (...)", "contended: REASON", "error: MESSAGE", "timeout",
  // "unsupported: REASON".
  std::string text;
  bool BelowBand() const { return band == BandVerdict::kBelowBand; }
};
SampleVerdict JudgeSample(const probes::ProbeSample& sample, const ExpectedBand& band);

// The verdict of a group's aggregate against its band (GroupBand): "ok", "below expected"
// (bad), "error: a member's probe failed" (bad), or why it is not held to the band ("n/a
// (both ways: not held to the band)", "n/a (no expected band)").
struct AggregateVerdict {
  bool bad = false;
  std::string text;
};
AggregateVerdict JudgeAggregate(const GroupRun& run, const ExpectedBand& band);

}  // namespace xferd::core
