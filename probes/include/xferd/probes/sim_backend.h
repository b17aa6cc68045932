// A simulated device: a link model per mode with noise, a latency tail and injectable
// faults. It is how xferd runs on machines with no GPU, and it always says it is simulated.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xferd/probes/backend.h"
#include "xferd/probes/link_errors.h"

namespace xferd::probes {

// A fault injected into the simulated device ([[simulate.fault]]). What each kind does is
// its own file in probes/sim/faults/ (probes/sim/README.md: how to add one); the fields below
// are the parameters the kinds take.
struct SimFault {
  // In the order of the kinds' table (probes/sim/fault_kinds.cc).
  enum class Kind {
    kDegrade,     // bandwidth of every mode x factor (0 < factor <= 1)
    kDownTrain,   // link trained down to (gen, width): bandwidth follows the link
    kErrorEvery,  // every nth probe on the device returns kError
    kHang,        // probes block until cancelled (a hung driver call)
    kSlow,        // every transfer takes `factor` times longer (factor >= 1)
    kLost,        // the device is gone: every probe returns kError "device lost"
    kLinkErrors,  // a link error counter grows at `rate` on device `hop` of the GPU's path
    // The host buffers land on a NUMA node other than the GPU's: every copy crosses the
    // socket link, each mode's bandwidth x factor, and the placement a probe reports is the
    // far node (what `get_mempolicy` would say).
    kRemoteNuma,
    // The pageable path's staging through the driver's bounce buffer is starved (host
    // memory bandwidth, pressure): pageable bandwidth x factor, pinned as before.
    kSlowStaging,
  };
  // kLinkErrors: the counter that grows, the kernel's AER counts of a class or NVML's replay
  // counter of the GPU's own link.
  enum class ErrorCounter { kCorrectable, kNonFatal, kFatal, kReplay };
  Kind kind = Kind::kDegrade;
  int device = -1;         // -1: every device
  double factor = 1.0;     // kDegrade, kSlow, and the bandwidth the others leave (1 = as before)
  int gen = 0, width = 0;  // kDownTrain
  int every = 0;           // kErrorEvery
  ErrorCounter counter = ErrorCounter::kCorrectable;  // kLinkErrors
  double rate = 0;  // kLinkErrors: errors per second of the device's simulated time
  // kLinkErrors: which device of the GPU's path counts them: 0 the GPU, 1 the port above
  // it, and so on; -1 (or past the top) the top of the path, the root port on a real tree.
  int hop = 0;
};

std::string_view ToString(SimFault::Kind kind);  // "degrade", "downtrain", ...
std::optional<SimFault::Kind> ParseSimFaultKind(std::string_view text);
std::vector<SimFault::Kind> AllSimFaultKinds();  // every kind, in the enum's order
// "correctable", "nonfatal", "fatal", "replay"
std::string_view ToString(SimFault::ErrorCounter counter);
std::optional<SimFault::ErrorCounter> ParseSimErrorCounter(std::string_view text);

// The simulated GPU's MIG profiles: "<slices>g.<memory>gb" with 1-7 slices, a "+me" or
// "+gfx" suffix allowed; each slice owns one copy engine and the whole GPU (7 slices) 7.
// Why `profile` is not one ("" when it is).
inline constexpr int kSimMigSlices = 7;
std::string SimMigProfileProblem(std::string_view profile);
int SimMigSlicesOf(std::string_view profile);  // 0 when not a profile

// Another process's traffic on each simulated GPU's link ([simulate]
// foreign_traffic_bytes_per_second, foreign_traffic_duty): bursts at random moments.
struct ForeignTrafficOptions {
  double bytes_per_s = 0;                 // what a burst moves; 0 = none
  double duty = 0;                        // share of the time a burst is on, in [0, 1]; 1 = steady
  Direction direction = Direction::kH2D;  // kBidirectional: that rate each way
};

struct SimOptions {
  int devices = 1;
  std::uint64_t seed = 1;
  int link_gen = 4, link_width = 16;  // the link the simulated GPU trained to at best
  // PCIe power saving: the generation each GPU's own link drops to while idle (0 = it
  // never does). It trains back up as soon as a probe moves data and drops again
  // kSimIdleDownclockAfterS after the last one, so read while or right after a probe it
  // shows its trained speed, read at idle this one.
  int idle_link_gen = 0;
  bool integrated = false;
  // Grace Hopper: the GPUs reach host memory over NVLink-C2C (each its own, 450 GB/s per
  // direction); the PCIe link sysfs would show is not what bounds them.
  bool c2c = false;
  // The built-in host: GPUs behind each PCIe switch (1 = every GPU alone behind its own;
  // more share the switch's uplink), the uplink (0 = as `link`), and the NUMA nodes the
  // switches alternate over.
  int gpus_per_switch = 1;
  int uplink_gen = 0, uplink_width = 0;
  int numa_nodes = 2;
  // Set: the simulated GPUs are the NVIDIA display functions of this sysfs tree (a copy of
  // /sys or a fake one), with the address, NUMA node and link path read from it; `devices`,
  // `link` and the built-in host's keys are not used.
  std::filesystem::path sysfs_root;
  // 1 = transfers take their simulated time in real time; 0 = they return at once (tests,
  // soak). The durations reported are the simulated ones either way.
  double time_scale = 1.0;
  std::vector<SimFault> faults;
  // Confidential computing on the simulated host ([simulate] confidential_computing): copies
  // at bounce-buffered rates, the modes CC forbids skipped; `cc_ready` false: the GPUs do
  // not accept work yet (confidential_computing_ready).
  bool confidential_computing = false;
  bool cc_ready = true;
  // MIG per simulated GPU ([simulate] mig, [[simulate.mig]]): device (-1 = every one) -> its
  // GPU instances' profiles ("3g.71gb"); an empty list = MIG on with no instance. A device
  // not named has MIG disabled.
  std::map<int, std::vector<std::string>> mig;
  // Modes every simulated device reports unsupported, with the reason (to exercise skips).
  std::map<TransferMode, std::string> unsupported;
  ForeignTrafficOptions foreign_traffic;
  // The time the simulated link's timeline follows (bursts, counters); empty = the steady
  // clock. Tests that drive a scheduler on a fake clock pass that clock here, and with
  // time_scale 0 `advance` to move it by each probe's simulated duration (as a real probe
  // takes its time), so device time and the duty cycle add up on the fake clock too.
  std::function<std::chrono::steady_clock::time_point()> clock;
  std::function<void(std::chrono::nanoseconds)> advance;
};

// How long after its last transfer a simulated link drops to SimOptions::idle_link_gen.
inline constexpr double kSimIdleDownclockAfterS = 0.5;

// The simulated link's byte counters (NVML's PCIe byte counters, in place): rx = host to
// device, overhead included; `at_s` on the device's timeline.
struct SimLinkCounters {
  double at_s = 0;
  double rx_bytes = 0, tx_bytes = 0;
};

class SimBackend final : public TransferBackend {
 public:
  explicit SimBackend(SimOptions options);
  ~SimBackend() override;

  std::string Name() const override { return "sim"; }
  std::vector<DeviceInfo> Devices() const override;
  Capabilities GetCapabilities(int device) const override;
  LinkPath ReadLinkPath(int device) const override;
  ProbeSample Run(int device, const ProbeSpec& spec, std::stop_token stop = {}) override;
  // Each device gets its max-min fair share of the links its path shares with the others'
  // (probes/shared_paths.h): two GPUs behind one switch split its uplink. Deterministic,
  // also at time_scale 0.
  std::vector<ProbeSample> RunConcurrent(const std::vector<int>& devices, const ProbeSpec& spec,
                                         std::stop_token stop = {}) override;

  // Replace the injected faults (config reload); thread-safe.
  void SetFaults(std::vector<SimFault> faults);
  // Replace the simulated host's shape (config reload): confidential computing, its ready
  // state and the MIG instances; Devices() says it from then on. Thread-safe.
  void SetShape(bool confidential_computing, bool cc_ready,
                std::map<int, std::vector<std::string>> mig);

  // What the simulated device does to its own link's current speed and width now, on top
  // of what its sysfs tree (or the built-in host) says: a downtrain fault's cap, and the
  // generation PCIe power saving drops it to while idle (no probe within
  // kSimIdleDownclockAfterS, no foreign traffic). 0 = none. Thread-safe.
  struct OwnLinkCaps {
    int fault_gen = 0, fault_width = 0;
    int idle_gen = 0;
  };
  OwnLinkCaps OwnLink(int device) const;
  // The sysfs tree the devices come from; empty for the built-in host.
  const std::filesystem::path& SysfsRoot() const;

  // The link counters of `device` now, or `ahead_s` later (only foreign traffic flows
  // then); nullopt for an unknown or integrated device (no PCIe link to count). "Now" is
  // the device's timeline: the clock, or the end of its last probe when simulated time ran
  // ahead of it (time_scale < 1). Thread-safe.
  std::optional<SimLinkCounters> ReadLinkCounters(int device, double ahead_s = 0) const;
  // The foreign traffic's rate on `device` now, both directions summed (0 for none).
  double ForeignBytesPerSecond(int device) const;

  // The link error counters of `device`'s `path` now: its sysfs tree's AER files (read as
  // on a real host) or, on the built-in host, every device readable from 0; NVML's replay
  // counter from 0; plus what the link_errors faults counted so far on the device's
  // timeline. Counts survive a change of faults (SetFaults): counters never go back.
  // Thread-safe.
  LinkErrors ReadLinkErrors(int device, const LinkPath& path) const;

 private:
  struct Outcome {
    ProbeSample sample;
    double wait_s = 0;  // the simulated seconds it takes
    bool hang = false;  // a hang fault: it never finishes
  };
  Outcome Simulate(int device, const ProbeSpec& spec, double link_share);

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace xferd::probes
