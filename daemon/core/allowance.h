// The device-time allowance of one GPU: a token bucket of device seconds that keeps the GPU
// time spent probing near max_duty_cycle. It refills at max_duty_cycle x wall time and holds
// at most max_duty_cycle x kAllowanceWindow plus burst_reserve. The scheduler asks it which
// probes of a cycle may run and in what order, and books what each one cost; how it all adds
// up: docs/health.md ("Cadence, allowance and fast confirmation").
//
// Who may spend what: the headline probes (pinned h2d and d2h of every size) always run;
// then the series under watch (degraded, or whose last reading was bad: re-measured every
// cycle until they clear) while their cost fits above half the reserve;
// the rotating ones (stalest first) only while their cost fits above burst_reserve, and so
// do concurrent group runs; fast confirmation may spend the reserve too. Not thread-safe:
// the scheduler guards it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/clock.h"
#include "core/plan.h"
#include "core/settings.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// The allowance holds at most max_duty_cycle x this much device time (plus burst_reserve):
// enough to save up for the dearest probe at any sane duty cycle (1.5 s at the default
// 0.0025), little enough that a long idle spell does not buy a burst much over the cap.
inline constexpr std::chrono::minutes kAllowanceWindow{10};

// An unmeasured probe's cost is estimated at ProfileOf(mode).cost_fraction of the GPU's
// link: the rate its pinned h2d reads over kPinnedLinkShare once measured, else its
// narrowest link's, else this rate (PCIe Gen3 x8: conservative).
inline constexpr double kUnknownLinkBytesPerSecond = 7.9e9;
// What pinned copies reach of a healthy link (the H200: 0.87 of Gen5 x16), the share the
// cost fractions are taken against.
inline constexpr double kPinnedLinkShare = 0.87;

// The allowance's capacity and where it starts: one interval's refill above the reserve,
// so the first cycle runs the headline and what that buys, not every probe at once.
double AllowanceCapacity(const Settings& config);
double InitialAllowance(const Settings& config);

// A rotating probe whose reading was set aside as contended keeps its place at the front of
// the rotation for this many more tries in a row (one each cycle, as its class allows), so
// a passing neighbour does not cost the series a whole rotation; after that it waits its
// turn like any other, so a link shared for good does not starve the rest of the plan.
inline constexpr int kSetAsideRetries = 1;

// What became of a probe's reading, for the rotation (Allowance::Charge).
enum class ReadingFate {
  kCounted,   // judged (ok, bad, failed, timed out): the series had its turn
  kSetAside,  // contended: another process's traffic, evidence of nothing; tried again soon
};

// Why a probe runs in a cycle, and so what it may spend (Allowance::MayRun).
enum class ProbeClass {
  kHeadline,  // pinned h2d and d2h: every cycle, whatever the balance
  // A rotating series never measured, or that waited half its bound
  // (FreshnessBounds::rotating_s / 2): ahead of the watched ones and on their terms, so a
  // new GPU's series are all read within its first minutes and none goes stale while a
  // fault lasts.
  kOverdue,
  kWatched,   // degraded or on a bad streak: every cycle while it fits above half the reserve
  kRotating,  // the rest, stalest first, above the reserve, in strict order
};
std::string_view ToString(ProbeClass c);  // "headline", "overdue", "watched", "rotating"

struct OrderedProbe {
  probes::ProbeSpec spec;
  ProbeClass cls = ProbeClass::kRotating;
};

class Allowance {
 public:
  Allowance() = default;  // empty; refills from the steady clock's epoch
  Allowance(const Settings& config, SteadyTime now);  // InitialAllowance, refilled `now`

  // Adds max_duty_cycle x the time since the last refill, up to the capacity; also shrinks
  // a fuller balance at once after a reload to a smaller cap.
  void Refill(const Settings& config, SteadyTime now);

  // A probe's device time: as last measured, else its bytes at a conservative share of the
  // link (ProfileOf(mode).cost_fraction of the last rate SetLinkRate gave), so the balance
  // has saved enough before it first runs.
  double Cost(const probes::ProbeSpec& spec) const;

  // The cycle's probes: the headline first (in plan order), then the rest stalest first;
  // one never run is the stalest, and ties keep plan order.
  std::vector<probes::ProbeSpec> Order(const std::vector<probes::ProbeSpec>& plan,
                                       const Settings& config) const;
  // The same at `now` with each probe's class: the headline, then the overdue, the series
  // under watch (`watched`) and the rest, each stalest first.
  std::vector<OrderedProbe> Order(const std::vector<probes::ProbeSpec>& plan,
                                  const Settings& config, const std::set<ProbeKey>& watched,
                                  SteadyTime now) const;
  // Whether a probe of this class may start now: the headline always, an overdue or a
  // watched one when it fits above half the reserve, a rotating one when it FitsRotation.
  bool MayRun(const OrderedProbe& probe, const Settings& config) const;

  // When each probe of `plan` is expected to run next (in plan order), if cycles start at
  // `next_cycle` and every `config.interval` after it and the series under watch stay so:
  // the cycles simulated on a copy of this allowance with the same rules (Order, MayRun,
  // each probe at its Cost); nullopt for one not within `cycles` cycles.
  std::vector<std::optional<SteadyTime>> Forecast(const std::vector<probes::ProbeSpec>& plan,
                                                  const Settings& config,
                                                  const std::set<ProbeKey>& watched,
                                                  SteadyTime next_cycle, int cycles) const;

  // Whether a rotating probe may start: its cost fits in what lies above the reserve; or,
  // dearer than all of that, the allowance was full at this cycle's refill (or it would
  // never run at all: the headline spends a little of it first every cycle).
  bool FitsRotation(const probes::ProbeSpec& spec, const Settings& config) const;
  // Whether a confirmation may start: the whole balance, reserve included (it is what the
  // reserve is for).
  bool FitsConfirmation(const probes::ProbeSpec& spec) const;
  // Whether a concurrent group run that last cost this member `cost_s` may start: above
  // the reserve, like the rotation; never measured (nullopt), or the allowance full: it runs.
  bool FitsGroup(std::optional<double> cost_s, const Settings& config) const;

  // A probe of the plan that ran, started at `started` and cost `cost_s` device seconds
  // (it may leave the balance in debt); `headline`: it counts toward HeadlineSeconds. A
  // reading set aside (`fate`) is paid for but keeps the series' place in the rotation for
  // kSetAsideRetries more tries in a row.
  void Charge(const probes::ProbeSpec& spec, SteadyTime started, double cost_s, bool headline,
              ReadingFate fate = ReadingFate::kCounted);
  // A concurrent group run's share for this member.
  void Charge(double cost_s) { balance_s_ -= cost_s; }

  // A cycle begins: the headline's device time is counted afresh.
  void StartCycle() { headline_s_ = 0; }
  // Device time of the headline probes in this cycle so far (or the last).
  double HeadlineSeconds() const { return headline_s_; }
  // The narrowest link's current rate, as last read: what unmeasured costs are estimated at
  // until a pinned h2d probe measured the GPU's own way to host memory.
  void SetLinkRate(double bytes_per_s) { link_bytes_per_s_ = bytes_per_s; }
  // The last uncontended pinned h2d reading: the link as this GPU uses it (integrated GPUs
  // and NVLink-C2C included), which unmeasured costs are estimated from once known.
  void SetPinnedRate(double bytes_per_s) { pinned_bytes_per_s_ = bytes_per_s; }

  double Balance() const { return balance_s_; }

 private:
  // What the rotation knows about one probe.
  struct ProbeRecord {
    // When it last had its turn (a reading counted, or set aside once too often); never =
    // stalest.
    std::optional<SteadyTime> last_run;
    std::optional<double> cost_s;  // device time its last run took; nullopt = never ran
    int set_aside = 0;             // readings set aside in a row since its last turn
  };

  // The balance reached the capacity at this cycle's refill and only the headline spent it
  // since: a probe dearer than all above the reserve may run (it would never run else).
  bool Full(const Settings& config) const;

  double balance_s_ = 0;
  SteadyTime refilled_at_{};
  std::map<ProbeKey, ProbeRecord> probes_;
  double headline_s_ = 0;
  double link_bytes_per_s_ = 0;
  double pinned_bytes_per_s_ = 0;
};

}  // namespace xferd::core
