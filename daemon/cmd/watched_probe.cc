#include "cmd/watched_probe.h"

#include <chrono>
#include <future>
#include <stop_token>
#include <string>

namespace xferd::cmd {
namespace {

// A backend that ignores its deadline (a hung driver call) is asked to stop this long after.
constexpr std::chrono::seconds kHangGrace{2};
constexpr auto kLinkPollInterval = std::chrono::milliseconds(5);

double NarrowestPcieRate(const probes::LinkPath& path) {
  const probes::PcieLink* link = path.Narrowest();
  return link != nullptr ? link->CurrentBytesPerSecond() : 0.0;
}

// What was cancelled for overrunning is a timeout, not an error.
void MarkCancelled(probes::ProbeSample& sample, const probes::ProbeSpec& spec) {
  if (sample.status != probes::ProbeStatus::kError) return;
  sample.status = probes::ProbeStatus::kTimeout;
  sample.message = "no answer within the " + std::to_string(spec.deadline.count()) +
                   " ms deadline (hung device?); the probe was cancelled";
}

// Waits for `future`, calling `poll` every few ms (and once at once); asks `stop` to stop
// once the deadline and grace have passed. True when it asked.
template <typename T, typename Poll>
bool Watch(std::future<T>& future, const probes::ProbeSpec& spec, std::stop_source& stop,
           Poll poll) {
  const auto give_up_at = std::chrono::steady_clock::now() + spec.deadline + kHangGrace;
  bool asked_to_stop = false;
  bool first = true;
  while (future.wait_for(first ? std::chrono::milliseconds(0) : kLinkPollInterval) !=
         std::future_status::ready) {
    poll(first);
    first = false;
    if (!asked_to_stop && std::chrono::steady_clock::now() > give_up_at) {
      stop.request_stop();
      asked_to_stop = true;
    }
  }
  return asked_to_stop;
}

}  // namespace

probes::ProbeSample RunWatched(probes::TransferBackend& backend, int device,
                               const probes::ProbeSpec& spec, probes::LinkPath* link) {
  std::stop_source stop;
  auto future = std::async(std::launch::async, [&backend, device, spec, token = stop.get_token()] {
    return backend.Run(device, spec, token);
  });
  bool read = false;
  const bool asked = Watch(future, spec, stop, [&](bool first) {
    if (link == nullptr) return;
    probes::LinkPath now = backend.ReadLinkPath(device);
    if (first || NarrowestPcieRate(now) > NarrowestPcieRate(*link)) *link = std::move(now);
    read = true;
  });
  if (link != nullptr && !read) *link = backend.ReadLinkPath(device);
  probes::ProbeSample sample = future.get();
  if (asked) MarkCancelled(sample, spec);
  return sample;
}

std::vector<probes::ProbeSample> RunConcurrentWatched(probes::TransferBackend& backend,
                                                      const std::vector<int>& devices,
                                                      const probes::ProbeSpec& spec) {
  std::stop_source stop;
  auto future = std::async(std::launch::async, [&backend, devices, spec, token = stop.get_token()] {
    return backend.RunConcurrent(devices, spec, token);
  });
  const bool asked = Watch(future, spec, stop, [](bool) {});
  std::vector<probes::ProbeSample> samples = future.get();
  if (asked) {
    for (probes::ProbeSample& s : samples) MarkCancelled(s, spec);
  }
  return samples;
}

}  // namespace xferd::cmd
