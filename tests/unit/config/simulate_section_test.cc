// [simulate] (config/simulate_section.cc): the link, the faults, the topology keys, the
// unsupported modes and the simulated load.
#include <string>
#include <utility>

#include "unit/config/config_testing.h"
#include "xferd/probes/sim_backend.h"

namespace xferd::config {
namespace {

TEST(Config, LinkStringSetsGenerationAndWidth) {
  const Config c = Parse("[simulate]\nlink = \"Gen5x16\"\n");
  EXPECT_EQ(c.sim.link_gen, 5);
  EXPECT_EQ(c.sim.link_width, 16);
}

TEST(ConfigValidation, SimulatedFaults) {
  // A [[simulate.fault]] body and the key its error must name.
  const std::pair<const char*, const char*> cases[] = {
      {"factor = 0.5\n", "kind"},
      {"kind = \"degrade\"\n", "factor"},
      {"kind = \"slow\"\nfactor = 0.5\n", "factor"},
      {"kind = \"downtrain\"\n", "gen"},
      {"kind = \"downtrain\"\nwidth = 5\n", "width"},
      {"kind = \"error_every\"\nevery = 0\n", "every"},
      {"kind = \"lost\"\nevery = 2\n", "every"},
      {"kind = \"link_errors\"\n", "rate"},
      {"kind = \"link_errors\"\nrate = 0\n", "rate"},
      {"kind = \"link_errors\"\nrate = 5\ncounter = \"bad\"\n", "counter"},
      {"kind = \"link_errors\"\nrate = 5\nhop = 16\n", "hop"},
      {"kind = \"link_errors\"\nrate = 5\ncounter = \"replay\"\nhop = 2\n", "hop"},
      {"kind = \"link_errors\"\nrate = 5\nfactor = 1.5\n", "factor"},
      {"kind = \"link_errors\"\nrate = 5\nevery = 2\n", "every"},
      {"kind = \"degrade\"\nfactor = 0.5\nrate = 2\n", "rate"},
      {"kind = \"remote_numa\"\nfactor = 0\n", "factor"},
      {"kind = \"remote_numa\"\nevery = 2\n", "every"},
      {"kind = \"slow_staging\"\nfactor = 1.5\n", "factor"},
      {"kind = \"slow_staging\"\ngen = 3\n", "gen"},
  };
  for (const auto& [body, key] : cases) {
    EXPECT_EQ(ErrorOf(std::string("[[simulate.fault]]\n") + body).key(),
              std::string("simulate.fault[0].") + key)
        << body;
  }
  EXPECT_EQ(ErrorOf("[simulate]\nfault = 3\n").key(), "simulate.fault");
}

TEST(Config, SimulatedShapes) {
  const Config cc = Parse("[simulate]\nconfidential_computing = true\n");
  EXPECT_TRUE(cc.sim.confidential_computing);
  EXPECT_TRUE(cc.sim.cc_ready);
  EXPECT_FALSE(Parse("[simulate]\nconfidential_computing = true\n"
                     "confidential_computing_ready = false\n")
                   .sim.cc_ready);
  // Every GPU, or some: an empty list is MIG on with no instance.
  const Config every = Parse("[simulate]\nmig = [\"3g.71gb\", \"3g.71gb\"]\n");
  EXPECT_EQ(every.sim.mig.at(-1), (std::vector<std::string>{"3g.71gb", "3g.71gb"}));
  const Config some = Parse(
      "[simulate]\ndevices = 3\n[[simulate.mig]]\ndevice = 0\ninstances = [\"7g.141gb\"]\n"
      "[[simulate.mig]]\ndevice = 2\ninstances = []\n");
  EXPECT_EQ(some.sim.mig.size(), 2u);
  EXPECT_TRUE(some.sim.mig.at(2).empty());
  EXPECT_FALSE(some.sim.mig.contains(1));
}

TEST(ConfigValidation, SimulatedShapes) {
  // A [simulate] body and the key its error must name.
  const std::pair<const char*, const char*> cases[] = {
      {"mig = [\"3g\"]\n", "simulate.mig"},
      {"mig = [3]\n", "simulate.mig"},
      {"mig = \"3g.71gb\"\n", "simulate.mig"},
      {"mig = [\"4g.71gb\", \"4g.71gb\"]\n", "simulate.mig"},
      {"confidential_computing_ready = false\n", "simulate.confidential_computing_ready"},
      {"confidential_computing = 1\n", "simulate.confidential_computing"},
      {"[[simulate.mig]]\ninstances = []\n", "simulate.mig[0].device"},
      {"[[simulate.mig]]\ndevice = 0\n", "simulate.mig[0].instances"},
      {"[[simulate.mig]]\ndevice = 0\ninstances = []\nfactor = 1\n", "simulate.mig[0].factor"},
      {"[[simulate.mig]]\ndevice = 0\ninstances = []\n[[simulate.mig]]\ndevice = 0\n"
       "instances = []\n",
       "simulate.mig[1].device"},
  };
  for (const auto& [body, key] : cases) {
    EXPECT_EQ(ErrorOf(std::string("[simulate]\n") + body).key(), key) << body;
  }
}

TEST(Config, SimulatedLinkErrors) {
  const Config c = Parse(
      "[[simulate.fault]]\nkind = \"link_errors\"\nrate = 12.5\n"
      "[[simulate.fault]]\nkind = \"link_errors\"\ncounter = \"fatal\"\nrate = 1\nhop = -1\n"
      "factor = 0.6\ndevice = 0\n");
  ASSERT_EQ(c.sim.faults.size(), 2u);
  EXPECT_EQ(c.sim.faults[0].kind, probes::SimFault::Kind::kLinkErrors);
  EXPECT_EQ(c.sim.faults[0].counter, probes::SimFault::ErrorCounter::kCorrectable);
  EXPECT_EQ(c.sim.faults[0].rate, 12.5);
  EXPECT_EQ(c.sim.faults[0].hop, 0);
  EXPECT_EQ(c.sim.faults[0].factor, 1.0);  // errors alone: bandwidth unchanged
  EXPECT_EQ(c.sim.faults[1].counter, probes::SimFault::ErrorCounter::kFatal);
  EXPECT_EQ(c.sim.faults[1].hop, -1);
  EXPECT_EQ(c.sim.faults[1].factor, 0.6);
  EXPECT_EQ(c.sim.faults[1].device, 0);
  const ConfigError e = ErrorOf(
      "[[simulate.fault]]\nkind = \"link_errors\"\ncounter = \"replays\"\n"
      "rate = 1\n");
  EXPECT_THAT(e.fix(), HasSubstr("\"replay\""));
}

TEST(Config, SimulatedFarNumaNodeAndSlowStaging) {
  const Config c = Parse(
      "[[simulate.fault]]\nkind = \"remote_numa\"\n"
      "[[simulate.fault]]\nkind = \"slow_staging\"\nfactor = 0.1\ndevice = 0\n");
  ASSERT_EQ(c.sim.faults.size(), 2u);
  EXPECT_EQ(c.sim.faults[0].kind, probes::SimFault::Kind::kRemoteNuma);
  EXPECT_EQ(c.sim.faults[0].factor, 0.7);
  EXPECT_EQ(c.sim.faults[1].kind, probes::SimFault::Kind::kSlowStaging);
  EXPECT_EQ(c.sim.faults[1].factor, 0.1);
  EXPECT_EQ(Parse("[[simulate.fault]]\nkind = \"slow_staging\"\n").sim.faults[0].factor, 0.25);
  // No far node to put the buffers on: said, with the fix.
  const ConfigError one_node =
      ErrorOf("[simulate]\nnuma_nodes = 1\n[[simulate.fault]]\nkind = \"remote_numa\"\n");
  EXPECT_EQ(one_node.key(), "simulate.fault[0].kind");
  EXPECT_THAT(one_node.fix(), HasSubstr("numa_nodes = 2"));
  EXPECT_EQ(
      ErrorOf("[simulate]\nintegrated = true\n[[simulate.fault]]\nkind = \"remote_numa\"\n").key(),
      "simulate.fault[0].kind");
}

TEST(Config, SimulatedTopologyKeys) {
  const Config c =
      Parse("[simulate]\ngpus_per_switch = 2\nuplink = \"gen4x8\"\nnuma_nodes = 2\ndevices = 8\n");
  EXPECT_EQ(c.sim.gpus_per_switch, 2);
  EXPECT_EQ(c.sim.uplink_gen, 4);
  EXPECT_EQ(c.sim.uplink_width, 8);
  EXPECT_EQ(c.sim.numa_nodes, 2);
  // A tree relative to the config file's directory.
  const Config t = ParseConfig("[simulate]\nsysfs_root = \"trees/hgx\"\n", "/etc/xferd/x.toml");
  EXPECT_EQ(t.sim.sysfs_root, "/etc/xferd/trees/hgx");
  // Faults may name any device of a tree: the backend checks them against it.
  EXPECT_NO_THROW(
      Parse("[simulate]\nsysfs_root = \"/t\"\n[[simulate.fault]]\nkind = \"lost\"\n"
            "device = 7\n"));
  EXPECT_EQ(ErrorOf("[simulate]\nsysfs_root = \"\"\n").key(), "simulate.sysfs_root");
  EXPECT_EQ(ErrorOf("[simulate]\nuplink = \"pcie4\"\n").key(), "simulate.uplink");
  EXPECT_EQ(ErrorOf("[simulate]\ngpus_per_switch = 0\n").key(), "simulate.gpus_per_switch");
  EXPECT_EQ(ErrorOf("[simulate]\nnuma_nodes = 9\n").key(), "simulate.numa_nodes");
  EXPECT_EQ(ErrorOf("[[simulate.fault]]\nkind = \"lost\"\ndevice = 1\n").key(),
            "simulate.fault[0].device");
}

TEST(ConfigValidation, SimulatedUnsupportedModesAndLoad) {
  const ConfigError mode = ErrorOf("[simulate]\nunsupported = { zero_cpy = \"x\" }\n");
  EXPECT_EQ(mode.key(), "simulate.unsupported.zero_cpy");
  EXPECT_EQ(mode.line(), 2);
  EXPECT_EQ(ErrorOf("[simulate.unsupported]\nmanaged = \"\"\n").key(),
            "simulate.unsupported.managed");
  EXPECT_EQ(ErrorOf("[simulate]\nunsupported = [\"managed\"]\n").key(), "simulate.unsupported");
  EXPECT_EQ(ErrorOf("[simulate]\ngpu_utilization_percent = 101\n").key(),
            "simulate.gpu_utilization_percent");
  EXPECT_EQ(ErrorOf("[simulate]\npcie_bytes_per_second = \"1Gb/s\"\n").key(),
            "simulate.pcie_bytes_per_second");
}

}  // namespace
}  // namespace xferd::config
