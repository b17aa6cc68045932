#include "xferd/probes/sim_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <random>
#include <regex>
#include <stop_token>
#include <tuple>

#include "platform/exit_codes.h"
#include "probes/sim/fault_kind.h"
#include "probes/sim/foreign_traffic.h"
#include "probes/sim/sim_topology.h"
#include "xferd/probes/shared_paths.h"
#include "xferd/probes/topology.h"

namespace xferd::probes {
namespace {

// How one (mode, direction) behaves relative to the simulated link. The fractions follow
// what was measured on a Gen5 x16 H200 (docs/gpu-results.md: pinned ~0.87 of the link,
// pageable through a bounce buffer far less, managed first touch paying for page faults)
// shifted a little down to the Gen4 hosts the seed band was written for.
struct ModeModel {
  double link_fraction;    // sustained bandwidth / theoretical link rate
  double latency_floor_s;  // fixed cost of one transfer: launch, doorbell, completion
};

ModeModel ModelFor(TransferMode mode, Direction direction) {
  const bool h2d = direction != Direction::kD2H;
  switch (mode) {
    case TransferMode::kPageable: return {h2d ? 0.22 : 0.34, 8e-6};
    case TransferMode::kPinned: return {h2d ? 0.80 : 0.81, 4e-6};
    case TransferMode::kPinnedAsync: return {h2d ? 0.75 : 0.76, 8e-6};
    case TransferMode::kZeroCopy: return {h2d ? 0.76 : 0.78, 6e-6};
    case TransferMode::kManaged: return {h2d ? 0.12 : 0.10, 25e-6};
    // Back to the host, the CPU populating the migrated pages is the bound, not the link.
    case TransferMode::kManagedPrefetch: return {h2d ? 0.70 : 0.18, 15e-6};
  }
  return {0.5, 10e-6};
}

// Both directions at once carry ~1.8x one direction (docs/gpu-results.md: ~99 GB/s summed
// against 55 one way): the link is full duplex but the host's memory controller is shared.
constexpr double kBidirectionalGain = 1.8;
// Each pinned_async chunk pays for its own copy launch on the copy engine.
constexpr double kChunkOverheadS = 1.5e-6;
// An integrated GPU has no PCIe link: its copies are bounded by the shared DRAM.
constexpr double kIntegratedCopyBytesPerSecond = 50e9;
// The latency tail: a transfer now and then is held up (preemption, an interrupt storm,
// a TLB shootdown) and takes several times as long. p50 and p99.9 must differ.
constexpr double kTailProbability = 0.005;
constexpr double kTailMinFactor = 2.0, kTailMaxFactor = 8.0;
// Spread: the fixed cost jitters a lot (small transfers), the streaming part little.
constexpr double kFloorSigma = 0.10;
constexpr double kStreamSigma = 0.01;
constexpr double kProbeDriftSigma = 0.004;  // cycle-to-cycle drift of the whole probe

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t DeviceKey(std::uint64_t seed, int index) {
  return SplitMix64(seed ^ SplitMix64(static_cast<std::uint64_t>(index) + 1));
}

std::string Uuid(std::uint64_t seed, int index) {
  const std::uint64_t a = DeviceKey(seed, index);
  const std::uint64_t b = SplitMix64(a);
  char text[48];
  std::snprintf(text, sizeof text, "SIM-%08x-%04x-%04x-%04x-%012llx",
                static_cast<unsigned>(a >> 32), static_cast<unsigned>((a >> 16) & 0xffff),
                static_cast<unsigned>(a & 0xffff), static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffull));
  return text;
}

// What one device's copies can reach alone: its narrowest link (NVLink-C2C for a Grace
// Hopper path), or the shared DRAM of an integrated GPU.
double PathRate(const LinkPath& path) {
  if (path.c2c) return kC2cBytesPerSecond;
  if (!path.pcie) return kIntegratedCopyBytesPerSecond;
  const PcieLink* narrowest = path.Narrowest();
  return narrowest != nullptr ? narrowest->CurrentBytesPerSecond() : 0.0;
}

// Confidential computing: every copy goes through encrypted bounce buffers. The share of a
// Gen5 x16 link (63.0 GB/s per direction) an RTX PRO 6000 Blackwell moved in CC mode:
// 15.7 / 18.6 GB/s h2d / d2h (nvbandwidth 0.10; docs/health.md gives the source).
constexpr double kCcH2dShare = 15.7 / 63.0, kCcD2hShare = 18.6 / 63.0;
// Pageable copies stage once more on the host before the encrypted bounce.
constexpr double kCcPageableShare = 0.8;

ProbeSample Failed(const ProbeSpec& spec, ProbeStatus status, std::string message) {
  ProbeSample sample;
  sample.spec = spec;
  sample.status = status;
  sample.message = std::move(message);
  return sample;
}

}  // namespace

struct SimBackend::State {
  struct Device {
    // The RNG, counter and link; the caller serialises a device's probes, and the link is
    // also read by the simulated GPU-load reader.
    mutable std::mutex mutex;
    std::mt19937_64 rng;
    std::uint64_t probes = 0;
    std::unique_ptr<SimLinkTraffic> link;
    double busy_until_s = 0;  // the end of its last probe on the timeline
  };

  SimOptions options;
  SimTopology topology;
  std::chrono::steady_clock::time_point epoch;  // the timeline's zero
  std::vector<std::unique_ptr<Device>> devices;

  mutable std::mutex faults_mutex;
  std::vector<SimFault> faults;
  // The shape (faults_mutex): confidential computing and each device's MIG instances.
  bool cc = false, cc_ready = true;
  std::map<int, std::vector<std::string>> mig;
  // The link errors the faults count (SimFaultKind::CountErrors): when each fault began on
  // each device's timeline, and what faults replaced since counted, per (device, hop,
  // counter), so counters never go back.
  std::vector<std::vector<double>> error_since_s;  // per fault, per device
  std::map<std::tuple<int, int, SimFault::ErrorCounter>, double> banked_errors;

  // Woken only by stop requests: simulated transfers and hangs wait on it.
  std::mutex wait_mutex;
  std::condition_variable_any wake;

  std::vector<SimFault> FaultsFor(int device) const {
    std::lock_guard lock(faults_mutex);
    std::vector<SimFault> out;
    for (const SimFault& f : faults) {
      if (f.device < 0 || f.device == device) out.push_back(f);
    }
    return out;
  }

  explicit State(const SimOptions& o)
      : options(o), topology(o), cc(o.confidential_computing), cc_ready(o.cc_ready), mig(o.mig) {}

  // The device's shape as a real one reports it: CC for the host, MIG for the GPU.
  void ShapeOf(int device, DeviceInfo& info) const {
    std::lock_guard lock(faults_mutex);
    info.cc.state = cc ? CcState::kOn : CcState::kOff;
    if (cc) {
      info.cc.gpus_ready = cc_ready;
      info.cc.detail = "simulated";
    }
    auto it = mig.find(device);
    if (it == mig.end()) it = mig.find(-1);
    if (it == mig.end()) return;
    info.mig.mode = MigMode::kEnabled;
    info.mig.whole_gpu_copy_engines = kSimMigSlices;
    int id = 1;
    for (const std::string& profile : it->second) {
      MigInstance instance;
      instance.gpu_instance_id = id;
      instance.compute_instance_id = 0;
      instance.profile = profile;
      instance.copy_engines = SimMigSlicesOf(profile);
      instance.uuid = "MIG-" + info.uuid.substr(info.uuid.find('-') + 1, 27) +
                      std::string(1, static_cast<char>('0' + id % 10)) + "-sim";
      info.mig.instances.push_back(std::move(instance));
      ++id;
    }
  }

  bool AppliesTo(const SimFault& f, int device) const { return f.device < 0 || f.device == device; }
  bool Valid(int device) const { return device >= 0 && device < static_cast<int>(devices.size()); }
  // The device's "now", its lock taken.
  double NowOf(int device) const {
    const Device& dev = *devices[device];
    std::lock_guard lock(dev.mutex);
    return Now(dev);
  }
  // Called with faults_mutex held: the faults' error counts from here on.
  void StartErrorFaults() {
    error_since_s.assign(faults.size(), {});
    for (std::size_t i = 0; i < faults.size(); ++i) {
      for (int d = 0; d < static_cast<int>(devices.size()); ++d) {
        error_since_s[i].push_back(NowOf(d));
      }
    }
  }
  // Called with faults_mutex held: fault `i`'s errors on `device` until `now_s`, into
  // `counts`.
  void CountErrors(std::size_t i, int device, double now_s, SimErrorCounts& counts) const {
    const SimFault& f = faults[i];
    if (i >= error_since_s.size() || !AppliesTo(f, device)) return;
    const auto& since = error_since_s[i];
    if (static_cast<std::size_t>(device) >= since.size()) return;
    FaultKindOf(f.kind).CountErrors(f, since[static_cast<std::size_t>(device)], now_s, counts);
  }
  // Called with faults_mutex held: what each fault counted until now, banked.
  void BankErrorFaults() {
    for (std::size_t i = 0; i < faults.size() && i < error_since_s.size(); ++i) {
      for (int d = 0; d < static_cast<int>(error_since_s[i].size()); ++d) {
        SimErrorCounts counts;
        CountErrors(i, d, NowOf(d), counts);
        for (const auto& [key, count] : counts) {
          banked_errors[{d, key.first, key.second}] += count;
        }
      }
    }
  }

  // What the device can do with `device_faults`: the modes every simulated device is told it
  // cannot do, and those the faults take away.
  Capabilities CapabilitiesWith(const std::vector<SimFault>& device_faults) const {
    Capabilities caps;
    caps.unsupported = options.unsupported;
    for (const SimFault& f : device_faults) FaultKindOf(f.kind).ShapeCapabilities(f, caps);
    return caps;
  }

  // The path as trained at `now_s`: the topology's, shaped by the faults.
  LinkPath CurrentPath(int device, const std::vector<SimFault>& device_faults, double now_s) const {
    LinkPath path = topology.Path(device);
    if (path.links.empty()) return path;
    for (const SimFault& f : device_faults) FaultKindOf(f.kind).ShapePath(f, now_s, path);
    return path;
  }
  // The same with the device's faults now (its lock not held).
  LinkPath CurrentPath(int device) const {
    return CurrentPath(device, FaultsFor(device), Valid(device) ? NowOf(device) : 0.0);
  }

  std::chrono::steady_clock::time_point Clock() const {
    return options.clock ? options.clock() : std::chrono::steady_clock::now();
  }
  // The device's "now" on the timeline: the clock, or the end of its last probe when
  // simulated time ran ahead of the clock.
  double Now(const Device& device) const {
    const double clock = std::chrono::duration<double>(Clock() - epoch).count();
    return std::max(clock, device.busy_until_s);
  }
  // The link idle at `now_s` (its lock held): no probe of its own for a while, and no other
  // process's traffic, which keeps a link trained as well.
  bool Idle(const Device& device, double now_s) const {
    if (device.probes != 0 && now_s - device.busy_until_s <= kSimIdleDownclockAfterS) return false;
    const auto [h2d, d2h] = device.link->ForeignRate(now_s);
    return h2d + d2h <= 0;
  }
  // A fake clock follows simulated time (time_scale 0, SimOptions::advance).
  void Advance(double seconds) const {
    if (options.time_scale == 0 && options.advance && seconds > 0) {
      options.advance(std::chrono::nanoseconds(static_cast<std::int64_t>(seconds * 1e9)));
    }
  }

  // Waits `seconds` of real time or until stop is requested; false when stopped.
  bool Wait(double seconds, std::stop_token stop) {
    if (seconds <= 0) return !stop.stop_requested();
    std::unique_lock lock(wait_mutex);
    wake.wait_for(lock, stop, std::chrono::duration<double>(seconds), [] { return false; });
    return !stop.stop_requested();
  }
};

SimBackend::SimBackend(SimOptions options) {
  options.devices = std::max(options.devices, 0);
  options.time_scale = std::max(options.time_scale, 0.0);
  state_ = std::make_unique<State>(options);
  // From here on the topology says how many devices there are (a sysfs tree decides).
  state_->options.devices = state_->topology.size();
  for (const SimFault& f : options.faults) {
    if (f.device >= state_->topology.size()) {
      throw platform::Error(platform::Failure::kConfig,
                            "a [[simulate.fault]] names device " + std::to_string(f.device) +
                                " but the " + state_->topology.Describe() + " has devices 0-" +
                                std::to_string(state_->topology.size() - 1) +
                                "; name one of them, or -1 for every device");
    }
  }
  for (const SimFault& f : options.faults) FaultKindOf(f.kind).Check(f, state_->topology);
  for (const auto& [device, profiles] : options.mig) {
    if (device >= state_->topology.size()) {
      throw platform::Error(platform::Failure::kConfig,
                            "a [[simulate.mig]] names device " + std::to_string(device) +
                                " but the " + state_->topology.Describe() + " has devices 0-" +
                                std::to_string(state_->topology.size() - 1) +
                                "; name one of them, or -1 for every device");
    }
  }
  state_->faults = options.faults;
  for (int i = 0; i < state_->options.devices; ++i) {
    auto device = std::make_unique<State::Device>();
    device->rng.seed(DeviceKey(options.seed, i));
    // Each GPU's bursts on their own seeded timeline.
    device->link = std::make_unique<SimLinkTraffic>(options.foreign_traffic,
                                                    SplitMix64(DeviceKey(options.seed, i)));
    state_->devices.push_back(std::move(device));
  }
  state_->epoch = state_->Clock();
  std::lock_guard lock(state_->faults_mutex);
  state_->StartErrorFaults();
}

SimBackend::~SimBackend() = default;

std::vector<DeviceInfo> SimBackend::Devices() const {
  std::vector<DeviceInfo> out;
  const SimOptions& o = state_->options;
  for (int i = 0; i < o.devices; ++i) {
    DeviceInfo info;
    info.index = i;
    info.uuid = Uuid(o.seed, i);
    info.name = "Simulated GPU (xferd sim)";
    info.pci_bus_id = state_->topology.Bdf(i);
    info.minor = i;
    info.cc_major = o.integrated ? 8 : 9;
    info.cc_minor = o.integrated ? 7 : 0;
    info.driver_version = "sim";
    info.memory_bytes = (o.integrated ? 32ull : 80ull) << 30;
    info.integrated = o.integrated;
    info.c2c = o.c2c && !o.integrated;
    info.simulated = true;
    state_->ShapeOf(i, info);
    out.push_back(std::move(info));
  }
  return out;
}

Capabilities SimBackend::GetCapabilities(int device) const {
  Capabilities caps = state_->CapabilitiesWith(state_->FaultsFor(device));
  DeviceInfo info;
  state_->ShapeOf(device, info);
  ShapeCapabilities(info, caps);
  return caps;
}

LinkPath SimBackend::ReadLinkPath(int device) const {
  if (!state_->Valid(device)) return state_->CurrentPath(device, state_->FaultsFor(device), 0);
  const std::vector<SimFault> faults = state_->FaultsFor(device);
  const State::Device& dev = *state_->devices[static_cast<std::size_t>(device)];
  std::lock_guard lock(dev.mutex);
  const double now_s = state_->Now(dev);
  LinkPath path = state_->CurrentPath(device, faults, now_s);
  // PCIe power saving: the GPU's own link drops to idle_link_gen a while after its last
  // probe, and trains back up with the next.
  const int idle_gen = state_->options.idle_link_gen;
  if (idle_gen > 0 && !path.links.empty()) {
    int& gen = path.links.front().current_gen;
    if (state_->Idle(dev, now_s) && gen > idle_gen) gen = idle_gen;
  }
  return path;
}

SimBackend::OwnLinkCaps SimBackend::OwnLink(int device) const {
  OwnLinkCaps caps;
  if (!state_->Valid(device)) return caps;
  const std::vector<SimFault> faults = state_->FaultsFor(device);
  const State::Device& dev = *state_->devices[static_cast<std::size_t>(device)];
  std::lock_guard lock(dev.mutex);
  const double now_s = state_->Now(dev);
  // What the faults do to a link that could run at anything: their caps, whatever the kind.
  constexpr int kUncapped = 1 << 20;
  LinkPath probe;
  probe.links.push_back({"", kUncapped, kUncapped, kUncapped, kUncapped});
  for (const SimFault& f : faults) FaultKindOf(f.kind).ShapePath(f, now_s, probe);
  const PcieLink& own = probe.links.front();
  if (own.current_gen < kUncapped) caps.fault_gen = own.current_gen;
  if (own.current_width < kUncapped) caps.fault_width = own.current_width;
  if (state_->options.idle_link_gen > 0 && state_->Idle(dev, now_s)) {
    caps.idle_gen = state_->options.idle_link_gen;
  }
  return caps;
}

const std::filesystem::path& SimBackend::SysfsRoot() const {
  return state_->options.sysfs_root;
}

namespace {

// The noise of one probe, drawn from its device's RNG: the distributions live as long as the
// probe (a normal distribution keeps the second value of each pair it draws for the next
// call).
struct ProbeNoise {
  std::lognormal_distribution<double> drift{0.0, kProbeDriftSigma};
  std::lognormal_distribution<double> floor{0.0, kFloorSigma};
  std::lognormal_distribution<double> stream{0.0, kStreamSigma};
  std::uniform_real_distribution<double> unit{0.0, 1.0};
  std::uniform_real_distribution<double> tail{kTailMinFactor, kTailMaxFactor};
};

// One probe's transfers as the link model sees them, before the noise of each.
struct TransferModel {
  double bandwidth = 0;           // bytes/s of the streaming part, drift and faults included
  std::uint64_t bytes = 0;        // per transfer, both directions summed
  double fixed_s = 0;             // the fixed cost of one transfer
  std::optional<double> overlap;  // pinned_async: copy/compute overlap
};

// Draws the probe's drift (and pinned_async's overlap), in that order.
TransferModel ModelTransfers(const ProbeSpec& spec, double link_rate, double bandwidth_factor,
                             ProbeNoise& noise, std::mt19937_64& rng) {
  const ModeModel model = ModelFor(spec.mode, spec.direction);
  TransferModel out;
  out.bandwidth = link_rate * model.link_fraction * bandwidth_factor * noise.drift(rng);
  out.bytes = spec.size_bytes;
  out.fixed_s = model.latency_floor_s;
  if (spec.direction == Direction::kBidirectional) {
    out.bytes = 2 * spec.size_bytes;
    out.bandwidth *= kBidirectionalGain;
  }
  if (spec.mode == TransferMode::kPinnedAsync) {
    const std::uint64_t chunks = (spec.size_bytes + spec.chunk_bytes - 1) / spec.chunk_bytes;
    out.fixed_s += static_cast<double>(chunks) * kChunkOverheadS;
    // A pipeline of depth d hides all but 1/d of the compute behind copies; one stream (or
    // one chunk) serialises everything.
    const double depth = static_cast<double>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(spec.streams), chunks));
    out.overlap = std::clamp(0.97 * (1.0 - 1.0 / depth) * noise.stream(rng), 0.0, 1.0);
  }
  return out;
}

}  // namespace

// One probe of one device, computed without waiting: the sample and how long it takes in
// simulated time. `link_share` (0 < share <= 1) is the part of its path's rate the device
// gets while others use shared links too.
SimBackend::Outcome SimBackend::Simulate(int device, const ProbeSpec& spec, double link_share) {
  const SimOptions& o = state_->options;
  if (device < 0 || device >= o.devices) {
    return {Failed(spec, ProbeStatus::kError,
                   "no simulated device " + std::to_string(device) + " (there are " +
                       std::to_string(o.devices) + ")")};
  }
  if (std::string problem = SpecProblem(spec); !problem.empty()) {
    return {Failed(spec, ProbeStatus::kError, problem)};
  }
  const std::vector<SimFault> faults = state_->FaultsFor(device);
  DeviceInfo shape;
  shape.uuid = Uuid(o.seed, device);
  state_->ShapeOf(device, shape);
  Capabilities caps = state_->CapabilitiesWith(faults);
  ShapeCapabilities(shape, caps);
  if (std::string why = caps.Reason(spec.mode, spec.direction); !why.empty()) {
    return {Failed(spec, ProbeStatus::kUnsupported, why)};
  }
  // A GPU that cannot be probed at all (MIG with no instance, CC GPUs not ready) moves no
  // data: nothing to measure, the reason said.
  if (std::string why = UnjudgeableReason(shape.cc, shape.mig); !why.empty()) {
    return {Failed(spec, ProbeStatus::kUnsupported, why)};
  }

  State::Device& dev = *state_->devices[device];
  std::lock_guard device_lock(dev.mutex);
  const double start_s = state_->Now(dev);
  const SimProbe probe{.device = device,
                       .spec = spec,
                       .number = ++dev.probes,
                       .now_s = start_s,
                       .integrated = o.integrated};
  SimProbeEffect effect;
  for (const SimFault& f : faults) {
    FaultKindOf(f.kind).ShapeProbe(f, probe, effect);
    if (effect.Ends()) {
      Outcome ended{Failed(spec, *effect.status, effect.message)};
      ended.hang = effect.hang;
      return ended;
    }
  }

  const LinkPath path = state_->CurrentPath(device, faults, start_s);
  const double link_rate = PathRate(path) * std::clamp(link_share, 0.0, 1.0);
  if (link_rate <= 0) {
    return {Failed(spec, ProbeStatus::kError,
                   "no link rate known on the simulated GPU's path" +
                       (path.note.empty() ? std::string() : ": " + path.note))};
  }
  ProbeNoise noise;
  double bandwidth = effect.bandwidth;
  if (shape.cc.On()) {
    // Bounce-buffered: at most the CC share of the link, whatever the mode reaches alone.
    const ModeModel m = ModelFor(spec.mode, spec.direction);
    double cc_share = spec.direction == Direction::kD2H ? kCcD2hShare : kCcH2dShare;
    if (spec.mode == TransferMode::kPageable) cc_share *= kCcPageableShare;
    bandwidth *= std::min(1.0, cc_share / m.link_fraction);
  }
  const TransferModel model = ModelTransfers(spec, link_rate, bandwidth, noise, dev.rng);
  const double streaming_s = static_cast<double>(model.bytes) / model.bandwidth;
  auto one_transfer = [&] {
    double d = (model.fixed_s * noise.floor(dev.rng) + streaming_s * noise.stream(dev.rng)) *
               effect.duration;
    if (noise.unit(dev.rng) < kTailProbability) d *= noise.tail(dev.rng);
    return d;
  };

  // Foreign bursts in the same direction take their share of what the link carries at most
  // (what pinned copies reach), stretching the transfers they overlap.
  const double capacity = link_rate * ModelFor(TransferMode::kPinned, spec.direction).link_fraction;
  const double own_rate =
      spec.direction == Direction::kBidirectional ? model.bandwidth / 2 : model.bandwidth;
  // What the probe moves over the link per transfer: managed memory migrates its pages
  // both ways each round (home first, then where the transfer takes them).
  const bool both_ways = spec.direction == Direction::kBidirectional ||
                         spec.mode == TransferMode::kManaged ||
                         spec.mode == TransferMode::kManagedPrefetch;
  const double h2d_each =
      both_ways || spec.direction == Direction::kH2D ? static_cast<double>(spec.size_bytes) : 0.0;
  const double d2h_each =
      both_ways || spec.direction == Direction::kD2H ? static_cast<double>(spec.size_bytes) : 0.0;
  auto book = [&](int transfers, double elapsed_s) {
    dev.link->Book(h2d_each * transfers, d2h_each * transfers);
    dev.busy_until_s = start_s + elapsed_s;
  };

  const double deadline_s = std::chrono::duration<double>(spec.deadline).count();
  ProbeSample sample;
  sample.spec = spec;
  sample.bytes_per_transfer = model.bytes;
  sample.overlap_ratio = model.overlap;
  double elapsed = 0, previous = 0;
  int total = 0;
  for (int i = 0;; ++i) {
    const bool last = IsLastTransfer(spec, i, elapsed, previous);
    const double d =
        dev.link->Stretch(start_s + elapsed, one_transfer(), spec.direction, own_rate, capacity);
    if (deadline_s > 0 && elapsed + d > deadline_s) {
      book(i, deadline_s);
      ProbeSample timed_out =
          Failed(spec, ProbeStatus::kTimeout,
                 "probe did not finish within its " + std::to_string(spec.deadline.count()) +
                     " ms deadline (" + std::to_string(i) + " of " +
                     std::to_string(spec.warmup + spec.iterations) + " transfers done)");
      timed_out.bytes_per_transfer = model.bytes;
      timed_out.device_time_s = deadline_s;
      return {std::move(timed_out), deadline_s - elapsed};
    }
    elapsed += d;
    previous = d;
    if (i >= spec.warmup) sample.durations_s.push_back(d);
    if (last) {
      total = i + 1;
      break;
    }
  }
  book(total, elapsed);
  sample.link_h2d_bytes = static_cast<std::uint64_t>(h2d_each * total);
  sample.link_d2h_bytes = static_cast<std::uint64_t>(d2h_each * total);
  sample.status = ProbeStatus::kOk;
  sample.device_time_s = elapsed;
  // A MIG GPU is probed through its link instances in turn, one per probe.
  if (const std::vector<std::size_t> link = LinkInstances(shape.mig); !link.empty()) {
    sample.instance = shape.mig.instances[link[probe.number % link.size()]];
  }
  // Buffers placed on the GPU's node (the faults may say otherwise).
  sample.host_numa_node = o.integrated ? 0 : path.numa_node;
  for (const SimFault& f : faults) FaultKindOf(f.kind).ShapeSample(f, probe, path, sample);
  return {std::move(sample), elapsed};
}

ProbeSample SimBackend::Run(int device, const ProbeSpec& spec, std::stop_token stop) {
  Outcome outcome = Simulate(device, spec, 1.0);
  if (!outcome.hang) state_->Advance(outcome.wait_s);
  if (outcome.hang) {
    std::unique_lock lock(state_->wait_mutex);
    state_->wake.wait(lock, stop, [] { return false; });
    return outcome.sample;
  }
  // The RNG is done with: sleeping the simulated time needs no lock.
  if (!state_->Wait(outcome.wait_s * state_->options.time_scale, stop)) {
    return Failed(spec, ProbeStatus::kError, "cancelled");
  }
  return std::move(outcome.sample);
}

std::vector<ProbeSample> SimBackend::RunConcurrent(const std::vector<int>& devices,
                                                   const ProbeSpec& spec, std::stop_token stop) {
  // Each device's share of its path while all of them move data: deterministic, so a
  // test at time_scale 0 sees the same split as a run in real time.
  std::vector<LinkPath> paths;
  for (int device : devices) {
    paths.push_back(device >= 0 && device < state_->options.devices ? state_->CurrentPath(device)
                                                                    : LinkPath{});
  }
  const std::vector<double> shares = FairShares(paths);
  std::vector<Outcome> outcomes;
  double wait_s = 0;
  bool hang = false;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const double alone = state_->options.integrated ? 0.0 : PathRate(paths[i]);
    const double share = alone > 0 && shares[i] > 0 ? shares[i] / alone : 1.0;
    outcomes.push_back(Simulate(devices[i], spec, share));
    hang = hang || outcomes.back().hang;
    if (!outcomes.back().hang) wait_s = std::max(wait_s, outcomes.back().wait_s);
  }
  state_->Advance(wait_s);
  const bool stopped = !state_->Wait(wait_s * state_->options.time_scale, stop);
  if (hang && !stopped) {
    std::unique_lock lock(state_->wait_mutex);
    state_->wake.wait(lock, stop, [] { return false; });
  }
  std::vector<ProbeSample> samples;
  for (Outcome& outcome : outcomes) {
    samples.push_back(stopped ? Failed(spec, ProbeStatus::kError, "cancelled")
                              : std::move(outcome.sample));
  }
  return samples;
}

void SimBackend::SetShape(bool confidential_computing, bool cc_ready,
                          std::map<int, std::vector<std::string>> mig) {
  std::lock_guard lock(state_->faults_mutex);
  state_->cc = confidential_computing;
  state_->cc_ready = cc_ready;
  state_->mig = std::move(mig);
}

std::string SimMigProfileProblem(std::string_view profile) {
  static const std::regex kProfile("([1-7])g\\.([0-9]{1,4})gb(\\+(me|gfx))?");
  if (!std::regex_match(std::string(profile), kProfile)) {
    return "not a MIG profile: write it as nvidia-smi does, \"<slices>g.<memory>gb\" with 1-7 "
           "slices (\"3g.71gb\", \"1g.18gb+me\")";
  }
  return "";
}

int SimMigSlicesOf(std::string_view profile) {
  return SimMigProfileProblem(profile).empty() ? profile.front() - '0' : 0;
}

void SimBackend::SetFaults(std::vector<SimFault> faults) {
  std::lock_guard lock(state_->faults_mutex);
  state_->BankErrorFaults();
  state_->faults = std::move(faults);
  state_->StartErrorFaults();
}

namespace {

// The error kind a simulated count is filed under, as a current kernel names it.
std::string_view SimulatedKind(AerClass aer_class) {
  switch (aer_class) {
    case AerClass::kCorrectable: return "RxErr";  // a receiver error: the classic bad link
    case AerClass::kNonFatal: return "CmpltTO";   // a completion timeout
    case AerClass::kFatal: return "DLP";          // a data link protocol error
  }
  return "RxErr";
}

// Adds `count` errors of `counter` at device `hop` of `errors`' path.
void AddErrors(LinkErrors& errors, int hop, SimFault::ErrorCounter counter, std::uint64_t count) {
  if (count == 0) return;
  if (counter == SimFault::ErrorCounter::kReplay) {
    if (errors.replays.value) *errors.replays.value += count;
    return;
  }
  if (errors.aer.empty()) return;
  const std::size_t top = errors.aer.size() - 1;
  AerCounters& at =
      errors.aer[hop < 0 ? top : std::min<std::size_t>(static_cast<std::size_t>(hop), top)];
  const AerClass aer_class = counter == SimFault::ErrorCounter::kCorrectable
                                 ? AerClass::kCorrectable
                             : counter == SimFault::ErrorCounter::kNonFatal ? AerClass::kNonFatal
                                                                            : AerClass::kFatal;
  const auto i = static_cast<std::size_t>(aer_class);
  // Files that cannot be read show nothing, as on a real host.
  if (!at.device[i]) return;
  *at.device[i] += count;
  auto kind = std::find_if(at.kinds.begin(), at.kinds.end(), [&](const AerKind& k) {
    return k.aer_class == aer_class && k.name == SimulatedKind(aer_class);
  });
  if (kind == at.kinds.end()) {
    at.kinds.push_back({aer_class, std::string(SimulatedKind(aer_class)), 0});
    kind = at.kinds.end() - 1;
  }
  kind->count += count;
  // The error message travels up to the root port, which counts it too.
  AerCounters& root = errors.aer[top];
  if (root.root_port && root.rootport[i]) *root.rootport[i] += count;
}

}  // namespace

LinkErrors SimBackend::ReadLinkErrors(int device, const LinkPath& path) const {
  LinkErrors out;
  if (device < 0 || device >= static_cast<int>(state_->devices.size())) return out;
  if (!state_->options.sysfs_root.empty()) {
    out.aer = ReadAer(state_->options.sysfs_root, path);
  } else {
    for (const PcieLink& link : path.links) {
      AerCounters c;
      c.bdf = link.bdf;
      c.device = {0, 0, 0};
      out.aer.push_back(std::move(c));
    }
  }
  out.replays.value = 0;
  if (state_->options.integrated) {
    out.replays = {std::nullopt, "an integrated GPU has no PCIe link to replay on", true};
  }
  // What each counter counted: banked by faults since replaced, and the faults' own.
  SimErrorCounts counts;
  const double now = state_->NowOf(device);
  {
    std::lock_guard lock(state_->faults_mutex);
    for (const auto& [key, count] : state_->banked_errors) {
      const auto& [d, hop, counter] = key;
      if (d == device) counts[{hop, counter}] += count;
    }
    for (std::size_t i = 0; i < state_->faults.size(); ++i) {
      state_->CountErrors(i, device, now, counts);
    }
  }
  for (const auto& [key, count] : counts) {
    AddErrors(out, key.first, key.second, static_cast<std::uint64_t>(count));
  }
  return out;
}

namespace {

class SimLinkErrorReader final : public LinkErrorReader {
 public:
  explicit SimLinkErrorReader(const SimBackend& sim) : sim_(sim) {}
  LinkErrors Read(const DeviceInfo& device, const LinkPath& path) override {
    if (!device.simulated) return {};
    return sim_.ReadLinkErrors(device.index, path);
  }
  std::string Describe() const override {
    return "simulated (AER counters of the simulated host, replays from 0, plus the "
           "link_errors faults)";
  }

 private:
  const SimBackend& sim_;
};

}  // namespace

std::unique_ptr<LinkErrorReader> MakeSimLinkErrorReader(const SimBackend& sim) {
  return std::make_unique<SimLinkErrorReader>(sim);
}

std::optional<SimLinkCounters> SimBackend::ReadLinkCounters(int device, double ahead_s) const {
  if (device < 0 || device >= static_cast<int>(state_->devices.size()) ||
      state_->options.integrated) {
    return std::nullopt;
  }
  State::Device& dev = *state_->devices[device];
  std::lock_guard lock(dev.mutex);
  SimLinkCounters c;
  c.at_s = state_->Now(dev) + std::max(ahead_s, 0.0);
  std::tie(c.rx_bytes, c.tx_bytes) = dev.link->Counters(c.at_s);
  return c;
}

double SimBackend::ForeignBytesPerSecond(int device) const {
  if (device < 0 || device >= static_cast<int>(state_->devices.size())) return 0;
  State::Device& dev = *state_->devices[device];
  std::lock_guard lock(dev.mutex);
  const auto [h2d, d2h] = dev.link->ForeignRate(state_->Now(dev));
  return h2d + d2h;
}

}  // namespace xferd::probes
