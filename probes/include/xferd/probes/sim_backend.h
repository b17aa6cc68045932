// A simulated device: a link model per mode with noise, a latency tail and injectable
// faults. It is how xferd runs on machines with no GPU, and it always says it is simulated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xferd/probes/backend.h"

namespace xferd::probes {

struct SimFault {
  enum class Kind {
    kDegrade,     // bandwidth of every mode x factor (0 < factor <= 1)
    kDownTrain,   // link trained down to (gen, width): bandwidth follows the link
    kErrorEvery,  // every nth probe on the device returns kError
    kHang,        // probes block until cancelled (a hung driver call)
    kSlow,        // every transfer takes `factor` times longer (factor >= 1)
    kLost,        // the device is gone: every probe returns kError "device lost"
  };
  Kind kind = Kind::kDegrade;
  int device = -1;         // -1: every device
  double factor = 1.0;     // kDegrade, kSlow
  int gen = 0, width = 0;  // kDownTrain
  int every = 0;           // kErrorEvery
};

std::string_view ToString(SimFault::Kind kind);  // "degrade", "downtrain", ...
std::optional<SimFault::Kind> ParseSimFaultKind(std::string_view text);

struct SimOptions {
  int devices = 1;
  std::uint64_t seed = 1;
  int link_gen = 4, link_width = 16;  // the link the simulated GPU trained to at best
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
  // Modes every simulated device reports unsupported, with the reason (to exercise skips).
  std::map<TransferMode, std::string> unsupported;
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
