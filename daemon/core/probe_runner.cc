#include "core/probe_runner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <string>
#include <utility>

#include "core/contention.h"

namespace xferd::core {
namespace {

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

// How often a watched probe's link is read while it runs (kCancel).
constexpr milliseconds kLinkPollInterval{5};

// What a link path's narrowest PCIe link trained to: idle links train down, so of several
// readings taken while a probe runs the widest shows the link as the probe used it.
double TrainedRate(const probes::LinkPath& path) {
  const probes::PcieLink* link = path.Narrowest();
  return link != nullptr ? link->CurrentBytesPerSecond() : 0.0;
}

// The one conversion to a timeout. A probe asked to stop because it hung answers kError
// ("cancelled"); one that finished past its deadline without noticing came too late to
// trust.
void HoldToDeadline(probes::ProbeSample& sample, const probes::ProbeSpec& spec, double elapsed_s,
                    bool cancelled) {
  const double deadline_s = duration<double>(spec.deadline).count();
  if (cancelled && sample.status == probes::ProbeStatus::kError) {
    sample.status = probes::ProbeStatus::kTimeout;
    sample.message = "no answer within the " + std::to_string(spec.deadline.count()) +
                     " ms deadline (hung device?); the probe was cancelled";
  } else if (sample.status == probes::ProbeStatus::kOk && elapsed_s > deadline_s) {
    sample.status = probes::ProbeStatus::kTimeout;
    sample.message = fmt::format("finished after {}, past its {} deadline",
                                 FormatSeconds(elapsed_s, 2), FormatSeconds(deadline_s, 2));
  }
}

// Device time cannot exceed the wall time the call took (the call waits for the device).
double CostOf(const probes::ProbeSample& sample, double elapsed_s) {
  return sample.device_time_s > 0 ? std::min(sample.device_time_s, elapsed_s) : elapsed_s;
}

}  // namespace

milliseconds HangGrace(milliseconds deadline) {
  // A backend should answer kTimeout at its deadline; this much later it is not answering
  // at all.
  return std::max(milliseconds(1000), deadline / 2);
}

class ProbeRunner::InFlight {
 public:
  InFlight(ProbeRunner& runner, std::vector<int> devices, const probes::ProbeSpec& spec)
      : runner_(runner) {
    std::lock_guard lock(runner_.mutex_);
    runner_.in_probe_ = true;
    runner_.probe_device_ = devices.front();
    runner_.probe_devices_ = std::move(devices);
    runner_.probe_spec_ = spec;
    runner_.probe_started_ = runner_.clock_.Now();
    ++runner_.probe_serial_;
  }
  ~InFlight() {
    std::lock_guard lock(runner_.mutex_);
    runner_.in_probe_ = false;
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  ProbeRunner& runner_;
};

ProbeRunner::ProbeRunner(probes::TransferBackend& backend, Clock& clock, HangWatch watch)
    : backend_(backend), clock_(clock), watch_(watch) {}

template <typename Result, typename Call, typename Poll>
Result ProbeRunner::Watched(const probes::ProbeSpec& spec, std::stop_token stop, bool& cancelled,
                            Call call, Poll poll) {
  cancelled = false;
  if (watch_ == HangWatch::kReport) return call(stop);
  std::stop_source own;
  std::stop_callback forward(stop, [&own] { own.request_stop(); });
  auto future =
      std::async(std::launch::async, [&call, token = own.get_token()] { return call(token); });
  const SteadyTime give_up_at = clock_.Now() + spec.deadline + HangGrace(spec.deadline);
  bool first = true;
  while (future.wait_for(first ? milliseconds(0) : kLinkPollInterval) !=
         std::future_status::ready) {
    poll(first);
    first = false;
    if (!cancelled && clock_.Now() > give_up_at) {
      own.request_stop();
      cancelled = true;
    }
  }
  return future.get();
}

std::optional<Measured> ProbeRunner::Run(const probes::DeviceInfo& device,
                                         const probes::ProbeSpec& spec, BusyDetector* window,
                                         const Settings& settings, bool read_link,
                                         std::stop_token stop) {
  Measured m;
  std::optional<probes::LinkPath> widest;
  bool cancelled = false;
  SteadyTime end{};
  {
    InFlight in_flight(*this, {device.index}, spec);
    if (window != nullptr) window->BeginProbe(device);
    m.started = clock_.Now();
    m.sample = Watched<probes::ProbeSample>(
        spec, stop, cancelled,
        [&](std::stop_token token) { return backend_.Run(device.index, spec, token); },
        [&](bool first) {
          if (!read_link) return;
          probes::LinkPath now = backend_.ReadLinkPath(device.index);
          if (first || TrainedRate(now) > TrainedRate(*widest)) widest = std::move(now);
        });
    end = clock_.Now();
  }
  // Right after the probe: the link as the driver counted it, and right after that.
  if (window != nullptr) m.sample.traffic = window->EndProbe(device);
  if (stop.stop_requested()) return std::nullopt;  // cut short: not a result
  m.elapsed_s = duration<double>(end - m.started).count();
  HoldToDeadline(m.sample, spec, m.elapsed_s, cancelled);
  if (read_link && m.sample.status == probes::ProbeStatus::kOk) {
    // Right after traffic too, before an idle link trains down to save power: a probe may
    // end before any reading during it saw the link back up to speed.
    probes::LinkPath after = backend_.ReadLinkPath(device.index);
    m.link = widest && TrainedRate(*widest) >= TrainedRate(after) ? std::move(*widest)
                                                                  : std::move(after);
  }
  const double link_rate = m.sample.traffic ? PathRate(device.index, m.link) : 0.0;
  m.sample.contention = JudgeContention(m.sample, ContentionThresholdsOf(settings, link_rate));
  if (m.sample.traffic && spdlog::should_log(spdlog::level::debug)) {
    // The raw window beside the judgement, for whoever tunes or doubts it.
    const probes::LinkTraffic& t = *m.sample.traffic;
    const auto [own_h2d, own_d2h] = m.sample.OwnLinkBytes();
    spdlog::debug(
        "gpu {} {} {}: link window ({}, {} samples) {:.1f} ms: rx {:.3f} tx {:.3f} GB, after "
        "{:.1f} ms rx {:.3f} tx {:.3f} GB; own h2d {:.3f} d2h {:.3f} GB, device {:.1f} ms "
        "({:.1f} computing alone): {}{}{}",
        device.index, probes::ToString(spec.mode), probes::ToString(spec.direction), t.source,
        t.samples, t.window_s * 1e3, t.rx_bytes / 1e9, t.tx_bytes / 1e9, t.after_s * 1e3,
        t.after_rx_bytes / 1e9, t.after_tx_bytes / 1e9, own_h2d / 1e9, own_d2h / 1e9,
        m.sample.device_time_s * 1e3, m.sample.compute_only_s * 1e3,
        probes::ToString(m.sample.contention.state),
        m.sample.contention.reason.empty() ? "" : ": ", m.sample.contention.reason);
  }
  m.cost_s = CostOf(m.sample, m.elapsed_s);
  return m;
}

double ProbeRunner::PathRate(int device, const std::optional<probes::LinkPath>& read) {
  // What a path can carry does not change at idle: read it once per device, again with
  // each path the caller has read anyway.
  if (read) {
    const double rate = HostLinkRate(*read);
    std::lock_guard lock(mutex_);
    path_rates_[device] = rate;
    return rate;
  }
  {
    std::lock_guard lock(mutex_);
    if (auto it = path_rates_.find(device); it != path_rates_.end()) return it->second;
  }
  const double rate = HostLinkRate(backend_.ReadLinkPath(device));
  std::lock_guard lock(mutex_);
  path_rates_[device] = rate;
  return rate;
}

std::optional<MeasuredGroup> ProbeRunner::RunGroup(const HostGroup& group,
                                                   const std::vector<probes::DeviceInfo>& devices,
                                                   const std::vector<double>& solo_bytes_per_s,
                                                   const probes::ProbeSpec& spec,
                                                   std::stop_token stop) {
  MeasuredGroup out;
  GroupRun& run = out.run;
  bool cancelled = false;
  SteadyTime start{}, end{};
  {
    InFlight in_flight(*this, group.gpus, spec);
    start = clock_.Now();
    run.samples = Watched<std::vector<probes::ProbeSample>>(
        spec, stop, cancelled,
        [&](std::stop_token token) { return backend_.RunConcurrent(group.gpus, spec, token); },
        [](bool) {});
    end = clock_.Now();
  }
  if (stop.stop_requested()) return std::nullopt;
  const double elapsed = duration<double>(end - start).count();
  run.group = group;
  run.spec = spec;
  run.samples.resize(group.gpus.size());  // a backend that answered short: the rest failed
  for (std::size_t i = 0; i < group.gpus.size(); ++i) {
    const int gpu = group.gpus[i];
    HoldToDeadline(run.samples[i], spec, elapsed, cancelled);
    out.cost_s.push_back(CostOf(run.samples[i], elapsed));
    auto device = std::find_if(devices.begin(), devices.end(),
                               [gpu](const probes::DeviceInfo& d) { return d.index == gpu; });
    run.devices.push_back(device != devices.end() ? *device : probes::DeviceInfo{});
    run.solo_bytes_per_s.push_back(i < solo_bytes_per_s.size() ? solo_bytes_per_s[i] : 0.0);
  }
  return out;
}

std::optional<SteadyTime> ProbeRunner::ProbingSince(int device) const {
  std::lock_guard lock(mutex_);
  if (!in_probe_ ||
      std::find(probe_devices_.begin(), probe_devices_.end(), device) == probe_devices_.end()) {
    return std::nullopt;
  }
  return probe_started_;
}

std::optional<Stall> ProbeRunner::CheckStall(SteadyTime now) {
  std::lock_guard lock(mutex_);
  if (!in_probe_) return std::nullopt;
  const auto running = duration_cast<milliseconds>(now - probe_started_);
  if (running <= probe_spec_.deadline + HangGrace(probe_spec_.deadline)) return std::nullopt;
  Stall stall;
  stall.device = probe_device_;
  stall.spec = probe_spec_;
  stall.running_for = running;
  stall.first_report = stall_reported_serial_ != probe_serial_;
  stall_reported_serial_ = probe_serial_;
  return stall;
}

SampleVerdict JudgeSample(const probes::ProbeSample& sample, const ExpectedBand& band) {
  SampleVerdict v;
  switch (sample.status) {
    case probes::ProbeStatus::kUnsupported: v.text = "unsupported: " + sample.message; break;
    case probes::ProbeStatus::kError:
      v.text = "error: " + sample.message;
      v.bad = true;
      break;
    case probes::ProbeStatus::kTimeout:
      v.text = "timeout";
      v.bad = true;
      break;
    case probes::ProbeStatus::kOk: {
      if (sample.Contended()) {
        // Another process shared the link: the figure is the neighbour's doing.
        v.text = "contended: " + sample.contention.reason;
        break;
      }
      const probes::ProbeSpec& spec = sample.spec;
      v.band =
          JudgeBand(spec.mode, spec.direction, spec.size_bytes, sample.MedianBandwidth(), band);
      v.text = std::string(ToString(*v.band));
      v.bad = *v.band == BandVerdict::kBelowBand;
      break;
    }
  }
  return v;
}

AggregateVerdict JudgeAggregate(const GroupRun& run, const ExpectedBand& band) {
  if (!run.AllOk()) return {true, "error: a member's probe failed"};
  if (!AggregateHeldToBand(run.spec.direction)) {
    return {false, "n/a (both ways: not held to the band)"};
  }
  if (!band.Known()) return {false, "n/a (no expected band)"};
  if (run.Aggregate() < band.lower_bytes_per_s) return {true, "below expected"};
  return {false, "ok"};
}

}  // namespace xferd::core
