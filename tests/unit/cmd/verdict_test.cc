// The verdict the daemon acts on, with the shipped defaults on simulated time: current (a
// cleared fault reads ok on every surface within the documented bound; a GPU left
// unmeasured reads stale, never ok), complete (every planned series measured within 15
// minutes on every link type at the default duty cycle), fair (the cycle budget's cut
// rotates over GPUs), and learning only health (a fault from the first cycle or the third is
// never learned as normal). docs/health.md ("Cadence", "Current readings", "Baseline").
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "cmd/health_report.h"
#include "core/freshness.h"
#include "unit/cmd/simulated_service.h"

namespace xferd::cmd {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using simulated::SimulatedService;
using simulated::Sum;
using simulated::Value;

// The links the simulated GPU may have, from the narrowest xferd is built for to the widest.
struct Link {
  const char* name;
  std::function<void(config::Config&)> set;
  int width = 0;  // PCIe lanes; 0 for NVLink-C2C and integrated GPUs
};

const std::vector<Link>& Links() {
  static const std::vector<Link> kLinks = {
      {"PCIe Gen3 x4", [](config::Config& c) { c.sim.link_gen = 3, c.sim.link_width = 4; }, 4},
      {"PCIe Gen4 x16", [](config::Config& c) { c.sim.link_gen = 4, c.sim.link_width = 16; }, 16},
      {"PCIe Gen5 x16", [](config::Config& c) { c.sim.link_gen = 5, c.sim.link_width = 16; }, 16},
      {"NVLink-C2C", [](config::Config& c) { c.sim.c2c = true; }},
      {"integrated", [](config::Config& c) { c.sim.integrated = true; }},
  };
  return kLinks;
}

json Status(SimulatedService& s) {
  return json::parse(s.service->StatusDocument());
}

// A reload of s.config (SIGHUP), applied before the test moves time on.
void Reload(SimulatedService& s) {
  // The service's first READY first (the main thread may not have said it yet).
  ASSERT_TRUE(s.notifier.WaitFor(
      [](const std::vector<std::string>& m) {
        return std::find(m.begin(), m.end(), "READY") != m.end();
      },
      10s));
  const auto seen = s.notifier.Messages().size();
  s.signals.Send(platform::Signal::Kind::kReload);
  ASSERT_TRUE(s.notifier.WaitFor(
      [seen](const std::vector<std::string>& m) {
        const auto reloading = std::find(m.begin() + static_cast<long>(seen), m.end(), "RELOADING");
        return reloading != m.end() && std::find(reloading, m.end(), "READY") != m.end();
      },
      10s));
}

// What each surface says: the metrics (any xferd_bandwidth_degraded 1: degraded; all 0:
// ok), the status document's verdict, `xferd health` (its one reading of that document).
struct Surfaces {
  std::string metrics, status;
  HealthOutcome health = HealthOutcome::kUnknown;
  bool Ok() const { return metrics == "ok" && status == "ok" && health == HealthOutcome::kOk; }
  bool Degraded() const {
    return metrics == "degraded" && status == "degraded" && health == HealthOutcome::kProblem;
  }
};

// What the metrics say of GPU 0: degraded (a pair at 1), stale (a headline pair without a
// verdict: its readings too old), ok.
Surfaces Look(SimulatedService& s) {
  Surfaces out;
  const std::string text = s.Scrape();
  const double any = Sum(text, "xferd_bandwidth_degraded", "gpu=");
  const bool headline =
      Value(text, "xferd_bandwidth_degraded", {"gpu=\"0\"", "mode=\"pinned\"", "direction=\"h2d\""})
          .has_value() &&
      Value(text, "xferd_bandwidth_degraded", {"gpu=\"0\"", "mode=\"pinned\"", "direction=\"d2h\""})
          .has_value();
  out.metrics = any > 0 ? "degraded" : headline ? "ok" : "stale";
  const std::string doc = s.service->StatusDocument();
  out.status = json::parse(doc)["verdict"].get<std::string>();
  out.health = JudgeStatus(doc, {}).state;
  return out;
}

std::string Describe(const Surfaces& v) {
  return "metrics " + v.metrics + ", status " + v.status + ", health " +
         std::to_string(static_cast<int>(v.health));
}

// ---- Complete: every series within 15 minutes on every link ----------------------------

// With the defaults (60 s interval, max_duty_cycle 0.0025), every planned series is
// measured within 15 minutes of the start, and none waits longer than that for its next
// reading afterwards, from PCIe Gen3 x4 to Gen5 x16, NVLink-C2C and an integrated GPU:
// each probe's cost follows its link (sizes scaled against Gen4 x16, a device-time target
// per probe). What the issue saw: on Gen4 x16, 11 of 13 series never measured.
TEST(SimulatedTime, EverySeriesIsMeasuredWithinFifteenMinutesOnEveryLink) {
  for (const Link& link : Links()) {
    SCOPED_TRACE(link.name);
    SimulatedService s(link.set);
    std::optional<double> all_by;
    double longest = 0;
    std::size_t planned = 0;
    for (int step = 1; step <= 45 * 6; ++step) {
      ASSERT_TRUE(s.Advance(10s));
      const json g = Status(s)["gpus"][0];
      if (g["schedule"].is_null()) continue;
      std::set<std::string> want;
      for (const json& o : g["schedule"]["series"]) {
        want.insert(o["mode"].get<std::string>() + "/" + o["direction"].get<std::string>());
      }
      planned = want.size();
      std::map<std::string, double> age;
      for (const json& series : g["series"]) {
        if (series["age_seconds"].is_number()) {
          age[series["mode"].get<std::string>() + "/" + series["direction"].get<std::string>()] =
              series["age_seconds"].get<double>();
        }
      }
      double oldest = 0;
      bool all = true;
      for (const std::string& key : want) {
        const auto it = age.find(key);
        all = all && it != age.end();
        oldest = std::max(oldest, it != age.end() ? it->second : s.Elapsed());
      }
      if (all && !all_by) all_by = s.Elapsed();
      longest = std::max(longest, oldest);
    }
    std::printf("%s: %zu series, all measured by %.1f min, longest wait %.1f min\n", link.name,
                planned, all_by.value_or(-60) / 60, longest / 60);
    EXPECT_EQ(planned, 13u);
    ASSERT_TRUE(all_by.has_value()) << "not every series measured in 45 minutes";
    EXPECT_LE(*all_by, 15 * 60);
    EXPECT_LE(longest, 15 * 60);
    // ... at the default duty cycle: the device time over the run within the cap (plus
    // what the allowance starts with).
    const double device = Sum(s.Scrape(), "xferd_probe_device_seconds_total", "gpu=\"0\"");
    EXPECT_LE(device, 0.0025 * s.Elapsed() + 1.2) << device;
    EXPECT_EQ(Value(s.Scrape(), "xferd_series_stale", {"gpu=\"0\""}), 0.0);
  }
}

// ---- Current: a cleared fault is ok on every surface within the bound ------------------

// Half its width (a reseat gone wrong), or every copy at half its bandwidth.
probes::SimFault Fault(const std::string& kind, const Link& link) {
  if (kind == "downtrain") {
    probes::SimFault f{probes::SimFault::Kind::kDownTrain};
    f.width = link.width / 2;
    return f;
  }
  return {probes::SimFault::Kind::kDegrade, -1, 0.5};
}

// Thirty healthy minutes, a fault for ten, then none: DEGRADED on every surface within
// five minutes of it, and ok again on every surface (metrics, the status document, `xferd
// health`, so a Slurm drain is resumed) within two intervals and two confirmation delays
// of its end (FreshnessBounds::degraded_s, 150 s with the defaults). What the issue saw: a
// series re-measured only in a confirmation round during the fault (pinned bidir) kept the
// GPU DEGRADED, and the node drained, for as long as it was watched (35 minutes).
TEST(SimulatedTime, AClearedFaultIsOkOnEverySurfaceWithinTheBound) {
  const double bound = core::FreshnessOf(config::Config{}).degraded_s;
  ASSERT_EQ(bound, 150);
  for (const Link& link : Links()) {
    if (link.width == 0) continue;
    for (const std::string kind : {"downtrain", "degrade"}) {
      SCOPED_TRACE(std::string(link.name) + " " + kind);
      SimulatedService s(link.set);
      ASSERT_TRUE(s.clock.RunUntil(s.t0 + 1800s, 60s));
      ASSERT_TRUE(Look(s).Ok()) << Describe(Look(s));
      s.sim->SetFaults({Fault(kind, link)});
      double on = -1;
      for (int t = 1; t <= 300; ++t) {
        ASSERT_TRUE(s.Advance(1s));
        if (Look(s).Degraded()) {
          on = t;
          break;
        }
      }
      ASSERT_GE(on, 0) << "not DEGRADED on every surface within 5 minutes";
      ASSERT_TRUE(s.clock.RunUntil(s.clock.Now() + 600s, 60s));
      ASSERT_TRUE(Look(s).Degraded()) << Describe(Look(s));
      const json during = Status(s)["gpus"][0];
      int degraded_pairs = 0;
      for (const json& p : during["pairs"]) degraded_pairs += p["degraded"].get<bool>();
      s.sim->SetFaults({});
      double off = -1;
      for (int t = 1; t <= 600; ++t) {
        ASSERT_TRUE(s.Advance(1s));
        if (Look(s).Ok()) {
          off = t;
          break;
        }
      }
      std::printf(
          "%s, %s: DEGRADED after %.0f s (%d pairs), ok on every surface %.0f s after "
          "it ended\n",
          link.name, kind.c_str(), on, degraded_pairs, off);
      ASSERT_GE(off, 0) << "still not ok 10 minutes after the fault ended: " << Describe(Look(s));
      EXPECT_LE(off, bound + 1);
      // And it stays ok: nothing left to flip back.
      ASSERT_TRUE(s.clock.RunUntil(s.clock.Now() + 600s, 60s));
      EXPECT_TRUE(Look(s).Ok()) << Describe(Look(s));
    }
  }
}

// A GPU left unmeasured (busy every cycle here) reads stale, not ok, on every surface
// once its headline's readings pass their bound, and is judged again once measured.
TEST(SimulatedTime, AGpuLeftUnmeasuredIsStaleNeverOk) {
  SimulatedService s;
  ASSERT_TRUE(s.clock.RunUntil(s.t0 + 1200s, 60s));
  ASSERT_TRUE(Look(s).Ok());
  s.config.sim_gpu_utilization_percent = 95;  // the busy detector skips every cycle
  Reload(s);
  const double bound = core::FreshnessOf(s.config).headline_s;
  std::optional<double> stale_after;
  const double from = s.Elapsed();
  for (int t = 1; t <= 600; ++t) {
    ASSERT_TRUE(s.Advance(1s));
    const Surfaces v = Look(s);
    if (v.status == "stale") {
      stale_after = s.Elapsed() - from;
      EXPECT_EQ(v.health, HealthOutcome::kUnknown);
      EXPECT_EQ(v.metrics, "stale") << "an unmeasured GPU's headline is not published as ok";
      break;
    }
    ASSERT_NE(v.status, "degraded");
  }
  ASSERT_TRUE(stale_after.has_value()) << "never stale: " << Describe(Look(s));
  // Its headline's last reading was taken up to an interval before the busy spell.
  EXPECT_LE(*stale_after, bound + 1);
  EXPECT_GE(*stale_after, bound - 70);
  EXPECT_GE(Value(s.Scrape(), "xferd_series_stale", {"gpu=\"0\""}).value_or(0), 2);
  const std::string line = JudgeStatus(s.service->StatusDocument(), {}).line;
  EXPECT_NE(line.find("gpu0 stale"), std::string::npos) << line;
  s.config.sim_gpu_utilization_percent = 0;
  Reload(s);
  for (int t = 0; t < 300 && !Look(s).Ok(); ++t) ASSERT_TRUE(s.Advance(1s));
  EXPECT_TRUE(Look(s).Ok()) << Describe(Look(s));
}

// ---- Fair: the cycle budget's cut rotates over GPUs ------------------------------------

// Four GPUs, a 10 s interval, no duty cap and a cycle budget that measures about two of
// them: every GPU is measured every other cycle at worst, so the fault on the last one is
// DEGRADED; the issue saw gpu3 cut from every cycle and "ok: 39/39 within band".
TEST(SimulatedTime, TheCycleBudgetsCutRotatesOverGpus) {
  SimulatedService s([](config::Config& c) {
    c.sim.devices = 4;
    c.interval = 10s;
    c.cycle_budget = 5s;
    c.max_duty_cycle = 1.0;
    c.probe_time = 0ms;  // 22 transfers of 64 MiB each: about two GPUs' probes in 5 s
    c.concurrent = false;
    c.sim.faults = {{probes::SimFault::Kind::kDegrade, 3, 0.5}};
  });
  for (int t = 0; t < 300; ++t) {
    ASSERT_TRUE(s.Advance(1s));
    if (Value(s.Scrape(), "xferd_bandwidth_degraded",
              {"gpu=\"3\"", "mode=\"pinned\"", "direction=\"h2d\""})
            .value_or(0) == 1) {
      break;
    }
  }
  const std::string text = s.Scrape();
  EXPECT_EQ(Value(text, "xferd_bandwidth_degraded",
                  {"gpu=\"3\"", "mode=\"pinned\"", "direction=\"h2d\""}),
            1.0)
      << "gpu 3 never judged";
  EXPECT_GT(Sum(text, "xferd_cycles_total", "result=\"over_budget\""), 0)
      << "the budget did not cut: the test measures nothing";
  const json doc = Status(s);
  EXPECT_EQ(doc["verdict"], "degraded");
  for (const json& g : doc["gpus"]) {
    EXPECT_NE(g["verdict"], "stale") << g["gpu"];
    EXPECT_NE(g["verdict"], "pending") << g["gpu"];
  }
}

// ---- Learning only health ------------------------------------------------------------

// A fault present from the first cycle on one of two GPUs of the same model on the same
// link: its readings are held to its peer's baseline while its own learns, so even the
// modes held to a baseline only (pageable, managed) are caught when the rotation reaches
// them, and none of the fault is learned. (A faulty GPU's probes cost more and its
// allowance goes to what is under watch first: its rotation is slower than a healthy one's.)
TEST(SimulatedTime, AFaultFromTheFirstCycleIsCaughtAgainstItsPeerForEveryMode) {
  SimulatedService s([](config::Config& c) {
    c.sim.devices = 2;
    c.sim.faults = {{probes::SimFault::Kind::kDegrade, 1, 0.5}};
  });
  std::set<std::string> caught;  // the pairs of GPU 1 seen DEGRADED
  for (int minute = 1; minute <= 60; ++minute) {
    ASSERT_TRUE(s.Advance(60s));
    const std::string text = s.Scrape();
    for (const char* mode : {"pinned", "pageable", "managed"}) {
      for (const char* direction : {"h2d", "d2h"}) {
        const std::vector<std::string> labels = {"gpu=\"1\"", std::string("mode=\"") + mode + "\"",
                                                 std::string("direction=\"") + direction + "\""};
        if (Value(text, "xferd_bandwidth_degraded", labels).value_or(0) == 1) {
          caught.insert(std::string(mode) + " " + direction);
        }
        EXPECT_NE(Value(text, "xferd_bandwidth_degraded", {"gpu=\"0\"", labels[1], labels[2]})
                      .value_or(0),
                  1)
            << "the healthy peer";
      }
    }
  }
  for (const char* pair :
       {"pinned h2d", "pinned d2h", "pageable h2d", "pageable d2h", "managed h2d", "managed d2h"}) {
    EXPECT_TRUE(caught.contains(pair)) << pair << " of the faulty GPU never DEGRADED";
  }
  // Whatever GPU 1 learned is not its fault: no baseline, or one near GPU 0's.
  const std::string text = s.Scrape();
  for (const char* mode : {"pinned", "pageable", "managed"}) {
    const std::vector<std::string> of = {std::string("mode=\"") + mode + "\"", "direction=\"h2d\""};
    const auto healthy =
        Value(text, "xferd_bandwidth_baseline_bytes_per_second", {"gpu=\"0\"", of[0], of[1]});
    const auto faulty =
        Value(text, "xferd_bandwidth_baseline_bytes_per_second", {"gpu=\"1\"", of[0], of[1]});
    ASSERT_TRUE(healthy.has_value()) << mode;
    if (faulty) EXPECT_GT(*faulty, 0.8 * *healthy) << mode;
  }
  EXPECT_EQ(Status(s)["gpus"][1]["verdict"], "degraded");
}

// A fault from the third cycle on: the first two readings are a baseline from then on
// (provisional), the fault's readings are judged against it and never learned.
TEST(SimulatedTime, AFaultFromTheThirdCycleIsNeverLearned) {
  SimulatedService s;
  // Cycles at 0, ~60, ~120 s: the fault is on before the third.
  ASSERT_TRUE(s.clock.RunUntil(s.t0 + 100s, 60s));
  s.sim->SetFaults({{probes::SimFault::Kind::kDegrade, -1, 0.5}});
  ASSERT_TRUE(s.clock.RunUntil(s.t0 + 1800s, 60s));
  const std::string text = s.Scrape();
  const auto baseline = Value(text, "xferd_bandwidth_baseline_bytes_per_second",
                              {"gpu=\"0\"", "mode=\"pinned\"", "direction=\"h2d\""});
  ASSERT_TRUE(baseline.has_value());
  // Alone the simulated Gen4 x16 pinned h2d reads 0.80 x 31.5 = 25.2 GB/s.
  EXPECT_GT(*baseline, 0.95 * 25.2e9);
  EXPECT_EQ(Value(text, "xferd_bandwidth_degraded",
                  {"gpu=\"0\"", "mode=\"pinned\"", "direction=\"h2d\""}),
            1.0);
  const json series = Status(s)["gpus"][0]["series"];
  for (const json& x : series) {
    if (x["mode"] == "pinned" && x["direction"] == "h2d") {
      EXPECT_EQ(x["baseline_cycles"].get<int>(), 2) << "only the two healthy readings";
    }
  }
}

}  // namespace
}  // namespace xferd::cmd
