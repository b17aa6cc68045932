#include "xferd/probes/backend.h"

#include <latch>
#include <system_error>
#include <thread>

namespace xferd::probes {

std::vector<ProbeSample> TransferBackend::RunConcurrent(const std::vector<int>& devices,
                                                        const ProbeSpec& spec,
                                                        std::stop_token stop) {
  std::vector<ProbeSample> samples(devices.size());
  if (devices.size() == 1) {
    samples[0] = Run(devices[0], spec, stop);
    return samples;
  }
  // Every thread waits at the latch until all are started: they begin within microseconds
  // of each other, far less than one transfer of a link-bound size.
  std::latch ready(static_cast<std::ptrdiff_t>(devices.size()));
  {
    std::vector<std::jthread> threads;
    threads.reserve(devices.size());
    std::size_t started = 0;
    try {
      for (; started < devices.size(); ++started) {
        threads.emplace_back([&, i = started] {
          ready.arrive_and_wait();
          samples[i] = Run(devices[i], spec, stop);
        });
      }
    } catch (const std::system_error& e) {
      // Release the threads that did start; the others report why they did not run.
      ready.count_down(static_cast<std::ptrdiff_t>(devices.size() - started));
      for (std::size_t i = started; i < devices.size(); ++i) {
        samples[i].spec = spec;
        samples[i].status = ProbeStatus::kError;
        samples[i].message = std::string("could not start a probe thread: ") + e.what();
      }
    }
  }  // joined
  return samples;
}

}  // namespace xferd::probes
