// One cycle's report judged once and handed to every consumer in one pass: each consumer
// sees the same parts in the same order (concurrent runs, then per GPU its link errors, its
// link watch and its judgement, then the end of the cycle), every judgement carries the
// verdict the incident log gives, and a lapsed verdict reaches them with nothing measured.
#include "core/cycle_pipeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.h"
#include "testing/fakes.h"

namespace xferd::core {
namespace {

// What a consumer was handed, in order, as words.
class Recorder final : public CycleConsumer {
 public:
  void OnConcurrent(const GroupRun& run, const ExpectedBand&) override {
    said.push_back("concurrent " + run.group.name);
  }
  void OnLinkErrors(const probes::DeviceInfo& device, const LinkErrorReading&) override {
    said.push_back("link errors gpu" + std::to_string(device.index));
  }
  void OnLinkWatch(const probes::DeviceInfo& device, const LinkWatchState&) override {
    said.push_back("link watch gpu" + std::to_string(device.index));
  }
  void OnJudged(const GpuJudgement& j) override {
    said.push_back("judged gpu" + std::to_string(j.health.gpu) + " " +
                   std::string(ToString(j.verdict)) + (j.observation ? "" : " (expiry)") +
                   (j.confirmation ? " (confirmation)" : ""));
    if (j.cycle != nullptr) EXPECT_EQ(j.cycle->device.index, j.health.gpu);
    EXPECT_EQ(j.observation == nullptr, j.cycle == nullptr);
  }
  void OnCycleEnd(const CycleReport& report, const Settings&) override {
    said.push_back("end of " + std::string(report.confirmation ? "round " : "cycle ") +
                   std::to_string(report.number));
  }
  std::vector<std::string> said;
};

// Link errors read as nothing at all: the pipeline reads them for every GPU.
class NoErrors final : public probes::LinkErrorReader {
 public:
  probes::LinkErrors Read(const probes::DeviceInfo&, const probes::LinkPath&) override {
    return {};
  }
  std::string Describe() const override { return "none"; }
};

class Pipeline : public ::testing::Test {
 protected:
  Pipeline() {
    settings.consecutive_bad = 1;
    pipeline.SetLinkErrorReader(std::make_shared<NoErrors>());
    pipeline.Add(first);
    pipeline.Add(second);
  }
  // A cycle of every GPU's headline probes (pinned h2d and d2h).
  CycleReport Cycle(std::uint64_t number) {
    CycleReport r;
    r.number = number;
    for (const probes::DeviceInfo& d : backend.Devices()) {
      DeviceCycle dc;
      dc.device = d;
      for (probes::ProbeSpec spec : PlanProbes(settings)) {
        if (spec.mode != probes::TransferMode::kPinned ||
            spec.direction == probes::Direction::kBidirectional) {
          continue;
        }
        spec.iterations = 3;
        dc.samples.push_back(backend.Run(d.index, spec, {}));
      }
      r.devices.push_back(std::move(dc));
    }
    return r;
  }

  Settings settings;
  fakes::FakeClock clock;
  fakes::FakeBackend backend{&clock, 2};
  HealthTracker health{settings};
  IncidentLog incidents;
  CyclePipeline pipeline{health, incidents, backend, clock};
  Recorder first, second;
};

TEST_F(Pipeline, EveryConsumerTakesEachPartOnceInOrder) {
  CycleReport r = Cycle(1);
  GroupRun run;
  run.group.name = "host";
  run.group.gpus = {0, 1};
  run.spec.mode = probes::TransferMode::kPinned;
  run.devices = backend.Devices();
  run.samples = {r.devices[0].samples[0], r.devices[1].samples[0]};
  r.concurrent.push_back(run);
  pipeline.Fold(r, settings);
  const std::vector<std::string> want = {"concurrent host",  "link errors gpu0", "judged gpu0 ok",
                                         "link errors gpu1", "judged gpu1 ok",   "end of cycle 1"};
  EXPECT_EQ(first.said, want);
  EXPECT_EQ(second.said, first.said);
  // Judged once: one health per GPU, the verdict the incident log keeps.
  EXPECT_EQ(health.Devices().size(), 2u);
  EXPECT_EQ(incidents.Verdict(backend.Devices()[0].uuid), DeviceVerdict::kOk);
  // A confirmation round says so, and ends as a round.
  CycleReport round = Cycle(1);
  round.confirmation = true;
  round.devices.pop_back();
  first.said.clear();
  pipeline.Fold(round, settings);
  EXPECT_EQ(first.said,
            (std::vector<std::string>{"link errors gpu0", "judged gpu0 ok (confirmation)",
                                      "end of round 1"}));
}

// Between cycles, a verdict whose readings grew too old reaches every consumer as a
// judgement with nothing measured (stale here), and no cycle ends.
TEST_F(Pipeline, ALapsedVerdictReachesEveryConsumerWithNothingMeasured) {
  pipeline.Fold(Cycle(1), settings);
  first.said.clear();
  clock.Advance(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(FreshnessOf(settings).headline_s + 1)));
  pipeline.Expire(settings);
  EXPECT_EQ(first.said,
            (std::vector<std::string>{"judged gpu0 stale (expiry)", "judged gpu1 stale (expiry)"}));
  EXPECT_EQ(second.said.back(), "judged gpu1 stale (expiry)");
  EXPECT_EQ(incidents.Verdict(backend.Devices()[1].uuid), DeviceVerdict::kStale);
}

}  // namespace
}  // namespace xferd::core
