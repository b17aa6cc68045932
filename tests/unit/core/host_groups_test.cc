// Concurrent groups from the topology, their expected aggregate and the shared_uplink cause.
#include "core/host_groups.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/band.h"
#include "core/health_tracker.h"
#include "testing/fakes.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::core {
namespace {

using probes::Direction;
using probes::LinkPath;
using probes::PcieBytesPerSecond;

probes::SimOptions Tree(const char* name) {
  probes::SimOptions o;
  o.time_scale = 0;
  o.sysfs_root = std::filesystem::path(XFERD_TEST_DATA_DIR) / "sysfs" / name;
  return o;
}

std::vector<LinkPath> Paths(const probes::SimBackend& sim) {
  std::vector<LinkPath> paths;
  for (const auto& d : sim.Devices()) paths.push_back(sim.ReadLinkPath(d.index));
  return paths;
}

TEST(FindGroups, HgxNodeHasTheHostAndOneGroupPerSwitch) {
  probes::SimBackend sim(Tree("hgx-8gpu"));
  const auto groups = FindGroups(sim.Devices(), Paths(sim));
  ASSERT_EQ(groups.size(), 5u);
  EXPECT_EQ(groups[0].name, "host");
  EXPECT_EQ(groups[0].GpuList(), "0,1,2,3,4,5,6,7");
  EXPECT_EQ(groups[0].shared_link, "");  // four root ports on two sockets: no link in common
  const double gen5x16 = PcieBytesPerSecond(5, 16);
  // Four switch uplinks, each carrying two GPUs' worth at most one x16.
  EXPECT_NEAR(groups[0].capacity_bytes_per_s, 4 * gen5x16, 1e6);
  EXPECT_NEAR(groups[0].unshared_bytes_per_s, 8 * gen5x16, 1e6);
  const char* names[] = {"uplink_0000:16:00.0", "uplink_0000:38:00.0", "uplink_0000:98:00.0",
                         "uplink_0000:b8:00.0"};
  const char* members[] = {"0,1", "2,3", "4,5", "6,7"};
  for (int i = 0; i < 4; ++i) {
    const HostGroup& g = groups[1 + i];
    EXPECT_EQ(g.name, names[i]);
    EXPECT_EQ(g.GpuList(), members[i]);
    EXPECT_EQ(g.shared_link, std::string(names[i]).substr(7) + " Gen5 x16");
    EXPECT_NEAR(g.capacity_bytes_per_s, gen5x16, 1e6);
    EXPECT_TRUE(g.SharedLinkLimits());
  }
  // The band: the fractions of that.
  const ExpectedBand band = GroupBand(groups[1], Settings{});
  EXPECT_NEAR(band.lower_bytes_per_s, 0.63 * gen5x16, 1e6);
  EXPECT_NEAR(band.upper_bytes_per_s, 0.83 * gen5x16, 1e6);
  EXPECT_NE(band.source.find("shared link 0000:16:00.0 Gen5 x16"), std::string::npos);
}

TEST(FindGroups, ASelectionKeepsOnlyItsOwnGroups) {
  probes::SimBackend sim(Tree("hgx-8gpu"));
  const auto all = sim.Devices();
  const auto paths = Paths(sim);
  // GPUs 0, 2 and 3: the host and the switch of 2 and 3; GPU 0 is alone behind its switch.
  const auto groups = FindGroups({all[0], all[2], all[3]}, {paths[0], paths[2], paths[3]});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].GpuList(), "0,2,3");
  EXPECT_EQ(groups[1].name, "uplink_0000:38:00.0");
  EXPECT_NEAR(groups[0].capacity_bytes_per_s, 2 * PcieBytesPerSecond(5, 16), 1e6);
}

TEST(FindGroups, OneGpuIsAGroupOnlyWhenAskedFor) {
  probes::SimBackend sim(Tree("igx-dgpu"));
  EXPECT_TRUE(FindGroups(sim.Devices(), Paths(sim)).empty());
  const auto one = FindGroups(sim.Devices(), Paths(sim), 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "host");
  EXPECT_EQ(one[0].GpuList(), "0");
  // A GPU alone is held to its own narrowest link, here the Gen4 x8 uplink.
  EXPECT_EQ(one[0].shared_link, "0005:01:00.0 Gen4 x8");
  EXPECT_NEAR(one[0].capacity_bytes_per_s, PcieBytesPerSecond(4, 8), 1e6);
  EXPECT_FALSE(one[0].SharedLinkLimits());
}

TEST(FindGroups, BuiltInSwitchesAndIntegratedGpus) {
  probes::SimOptions o = fakes::SwitchedSimHost(4, 2, 4, 16);
  o.link_gen = 5;
  probes::SimBackend sim(o);
  const auto groups = FindGroups(sim.Devices(), Paths(sim));
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[1].name, "uplink_0000:10:00.0");
  EXPECT_EQ(groups[1].shared_link, "0000:10:00.0 Gen4 x16");
  EXPECT_EQ(groups[2].name, "uplink_0000:20:00.0");

  probes::SimOptions integrated;
  integrated.devices = 2;
  integrated.integrated = true;
  probes::SimBackend igpus(integrated);
  const auto only_host = FindGroups(igpus.Devices(), Paths(igpus));
  ASSERT_EQ(only_host.size(), 1u);
  EXPECT_EQ(only_host[0].capacity_bytes_per_s, 0.0);  // no link: no expected aggregate
  EXPECT_FALSE(GroupBand(only_host[0], Settings{}).Known());
}

TEST(FindGroups, GraceHopperGpusShareNoPcieUplink) {
  probes::SimOptions o;
  o.time_scale = 0;
  o.devices = 4;
  o.c2c = true;
  o.gpus_per_switch = 2;  // the PCIe view says two switches; C2C copies never cross them
  probes::SimBackend sim(o);
  const auto groups = FindGroups(sim.Devices(), Paths(sim));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].name, "host");
  EXPECT_NEAR(groups[0].capacity_bytes_per_s, 4 * probes::kC2cBytesPerSecond, 1e6);
}

TEST(PlanConcurrent, PinnedEachWayAtTheLargestSize) {
  Settings s;
  s.sizes = {4ull << 20, 64ull << 20};
  auto plan = PlanConcurrent(s);
  ASSERT_EQ(plan.size(), 3u);
  for (const auto& spec : plan) {
    EXPECT_EQ(spec.mode, probes::TransferMode::kPinned);
    EXPECT_EQ(spec.size_bytes, 64ull << 20);
  }
  EXPECT_EQ(plan[2].direction, Direction::kBidirectional);
  s.bidirectional = false;
  EXPECT_EQ(PlanConcurrent(s).size(), 2u);
}

GroupRun MakeRun(const HostGroup& group, const probes::SimBackend& sim,
                 std::vector<double> together, std::vector<double> solo) {
  GroupRun run;
  run.group = group;
  run.spec.mode = probes::TransferMode::kPinned;
  run.spec.direction = Direction::kH2D;
  for (std::size_t i = 0; i < group.gpus.size(); ++i) {
    run.devices.push_back(sim.Devices().at(group.gpus[i]));
    probes::ProbeSample s;
    s.status = probes::ProbeStatus::kOk;
    s.bytes_per_transfer = 1'000'000'000;
    s.durations_s = {1e9 / together[i]};
    run.samples.push_back(s);
  }
  run.solo_bytes_per_s = std::move(solo);
  return run;
}

TEST(DiagnoseSharedUplink, NamesTheLinkAndTheGpusBehindIt) {
  probes::SimBackend sim(Tree("hgx-8gpu"));
  const auto groups = FindGroups(sim.Devices(), Paths(sim));
  const HostGroup& uplink = groups[1];
  const auto causes = DiagnoseSharedUplink(MakeRun(uplink, sim, {25e9, 26e9}, {50e9, 50e9}));
  ASSERT_EQ(causes.size(), 2u);
  const Diagnosis& d = causes.at(0);
  EXPECT_EQ(d.cause, DiagnosisCause::kSharedUplink);
  EXPECT_NE(d.detail.find("0000:16:00.0 Gen5 x16 shared by GPUs 0,1"), std::string::npos)
      << d.detail;
  EXPECT_NE(d.detail.find("25.0 GB/s together, 50.0 GB/s alone"), std::string::npos) << d.detail;
  EXPECT_NE(d.advice.find("lspci -vv -s 0000:16:00.0"), std::string::npos) << d.advice;
  // Near the solo figure: nothing.
  EXPECT_TRUE(DiagnoseSharedUplink(MakeRun(uplink, sim, {45e9, 46e9}, {50e9, 50e9})).empty());
  // The host group (no shared link) never says shared_uplink, whatever it shows.
  EXPECT_TRUE(DiagnoseSharedUplink(MakeRun(groups[0], sim, std::vector<double>(8, 10e9),
                                           std::vector<double>(8, 50e9)))
                  .empty());
  // Without a solo figure there is nothing to compare with.
  EXPECT_TRUE(DiagnoseSharedUplink(MakeRun(uplink, sim, {25e9, 25e9}, {})).empty());
}

TEST(DiagnoseSharedUplink, NotWhenTheUplinkIsWideEnough) {
  probes::SimOptions o;
  o.time_scale = 0;
  o.devices = 2;
  o.gpus_per_switch = 2;
  o.uplink_gen = 5;  // Gen5 x16 above two Gen4 x16 GPUs: the uplink is no bottleneck
  probes::SimBackend sim(o);
  const auto groups = FindGroups(sim.Devices(), Paths(sim));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_FALSE(groups[1].SharedLinkLimits());
  EXPECT_TRUE(DiagnoseSharedUplink(MakeRun(groups[1], sim, {12e9, 12e9}, {25e9, 25e9})).empty());
}

TEST(DiagnoseSharedUplink, HoldsInHealthUntilTheGroupRunsAgain) {
  probes::SimBackend sim(Tree("hgx-8gpu"));
  const auto groups = FindGroups(sim.Devices(), Paths(sim));
  HealthTracker health{Settings{}};
  const auto observe = [&](int gpu) {
    CycleObservation obs;
    obs.device = sim.Devices().at(gpu);
    obs.link_path = sim.ReadLinkPath(gpu);
    return health.Observe(obs);
  };
  health.ObserveConcurrent(MakeRun(groups[1], sim, {25e9, 26e9}, {50e9, 50e9}));
  EXPECT_TRUE(observe(0).Has(DiagnosisCause::kSharedUplink));
  EXPECT_TRUE(observe(0).Has(DiagnosisCause::kSharedUplink));  // cycles later, still
  EXPECT_FALSE(observe(2).Has(DiagnosisCause::kSharedUplink));
  health.ObserveConcurrent(MakeRun(groups[1], sim, {48e9, 48e9}, {50e9, 50e9}));
  EXPECT_FALSE(observe(0).Has(DiagnosisCause::kSharedUplink));
}

}  // namespace
}  // namespace xferd::core
