// The link watch: every link on each GPU's PCIe path read between probes at
// [health] link_watch_interval (probes/link_watch.h reads them), its transitions and the time
// it ran below its capability counted, and a link that flaps named (the link_flapping cause,
// core/diagnosis.h). Snapshots miss a flapping link: a probe reads the link only while it
// runs, a few hundred milliseconds a minute.
//
// The rule (LinkFlapCounter; docs/health.md, "A link that flaps between probes"):
//   - a link runs below its capability when its width is under the most it can train to,
//     at any moment, or its speed is while the GPU moves data. A speed drop while idle is
//     PCIe power saving and healthy;
//   - the GPU moves data at a reading when xferd's own probe has kept the link busy for a
//     moment (kProbeSettle), or when the link's traffic reached the threshold
//     (MovingDataThreshold) over the poll interval before the reading and over the one after
//     it: the link takes a moment to train up when traffic starts and drops its speed soon
//     after traffic stops, and neither is a fault. A reading is therefore judged one poll
//     after it is taken;
//   - a reading above what the link can train to (a device that answers all ones: x63) is
//     no reading;
//   - a transition is a change of a link's width between two readings, or of its speed
//     between two readings taken while the GPU moved data; one per link and reading;
//   - the time below capability is held from one reading to the next (at most
//     kMaxHeldPolls intervals: a poll that came late does not stretch it);
//   - the link flaps when its last flap window ([health] link_flap_window, 10 min) holds at
//     least link_flap_transitions (4) transitions, or a tenth of the window below
//     capability (60 s of 10 min) while it is below capability still: a link that stayed
//     low and came back with fewer transitions than the rule's had one episode (the one a
//     probe's reading names link_downtrained), which ends when the link is back.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/settings.h"
#include "xferd/probes/link_watch.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::core {

// xferd's own probe counts as moving data once it has run this long: the link trains up
// within a moment of the first copy.
inline constexpr std::chrono::milliseconds kProbeSettle{10};
// The link's traffic is read at a reading whose speed is below capability and at this many
// polls after the last such reading: a link that flips between full speed and less is judged
// at both.
inline constexpr int kTrafficPollsAfterSlow = 5;
// The time below capability is held at most this many poll intervals past a reading.
inline constexpr int kMaxHeldPolls = 3;
// A link that spends this share of the flap window below its capability flaps.
inline constexpr double kFlapReducedShare = 0.1;

// What the rule is held to (from core::Settings).
struct LinkWatchRule {
  std::chrono::milliseconds interval{2000};
  std::chrono::milliseconds window{10 * 60 * 1000};
  int transitions = 4;
  double busy_bytes_per_s = 2e9;  // [busy] pcie_bytes_per_second
  static LinkWatchRule Of(const Settings& settings);
};

// The traffic that means the GPU moves data over a link running at `bytes_per_s` (0:
// unknown): [busy] pcie_bytes_per_second, or a quarter of what the link carries at the speed
// it runs where that is less (a link that dropped to Gen1 x16 carries 4 GB/s: 1 GB/s).
double MovingDataThreshold(const LinkWatchRule& rule, double bytes_per_s);

// One poll of one GPU.
struct LinkPoll {
  SteadyTime at{};
  std::vector<probes::LinkState> links;  // in the order of the counter's links
  // The link's traffic over the interval since the previous poll, bytes/s; nullopt: not
  // read (or not readable).
  std::optional<double> traffic_bytes_per_s;
  bool probing = false;  // xferd's own probe kept the link busy at `at` (kProbeSettle)
};

// One GPU's watch as it stands.
struct LinkWatchState {
  bool watching = false;          // the watch is on and has links of this GPU to read
  std::uint64_t transitions = 0;  // since the daemon started
  double reduced_s = 0;           // below capability since the daemon started
  double window_s = 0;            // the flap window
  int window_transitions = 0;     // in the last window
  double window_reduced_s = 0;
  bool flapping = false;  // the rule's verdict over the last window
  // Flapping by its time below capability alone, with fewer transitions than the rule's: a
  // link that stays low (and is low at the last reading judged), which a probe's own
  // reading of the path names link_downtrained.
  bool low_only = false;
  // What was seen last that counted, the link named by its two ends: "0000:00:01.0-
  // 0000:01:00.0 Gen5 x16 -> Gen5 x8 (max Gen5 x16)", "0000:00:01.0-0000:01:00.0 Gen2 x16
  // while moving data (max Gen5 x16)"; "" when nothing did in the window.
  std::string last_seen;
  std::string source;   // where the links were read ("sysfs", "simulated")
  std::string problem;  // why a link was not read, as the last poll said
  // "6 transitions and 42 s below capability in the last 10 min; last 0000:00:01.0 ...":
  // the cause's detail.
  std::string Describe() const;
};

// The counting rule for one GPU, on any clock: fed one poll at a time.
class LinkFlapCounter {
 public:
  // `links`: what each link can train to (probes::WatchedLinks).
  void SetLinks(std::vector<probes::WatchedLink> links);
  const std::vector<probes::WatchedLink>& links() const { return links_; }
  // Folds one poll in; true when the counts changed (a transition, time below capability).
  bool Observe(const LinkPoll& poll, const LinkWatchRule& rule);
  // Links to read.
  bool Watching() const { return !links_.empty(); }
  // The counts, and the last window's, at `now`.
  LinkWatchState State(SteadyTime now, const LinkWatchRule& rule) const;

 private:
  struct Bucket {
    SteadyTime start{};
    int transitions = 0;
    double reduced_s = 0;
  };
  void Add(SteadyTime at, int transitions, double reduced_s, const LinkWatchRule& rule);
  // Readable, and no more than the link can train to (a device reading all ones is not).
  bool Possible(std::size_t i, const probes::LinkState& state) const;
  // "0000:00:01.0-0000:01:00.0" (the end read, the other end), " (max Gen5 x16)".
  std::string Name(std::size_t i) const;
  std::string Max(std::size_t i) const;

  std::vector<probes::WatchedLink> links_;
  std::optional<LinkPoll> pending_;  // the last poll, judged at the next
  // The last reading judged, and whether the GPU moved data then.
  std::optional<LinkPoll> judged_;
  bool judged_moving_ = false;
  bool judged_reduced_ = false;  // the last reading judged was below capability
  std::uint64_t transitions_ = 0;
  double reduced_s_ = 0;
  std::deque<Bucket> buckets_;  // the recent counts, oldest first: at most a window's
  std::string last_seen_;
};

struct LinkWatchHooks {
  // Since when xferd's own probe has kept `device`'s link busy; nullopt: none in flight.
  std::function<std::optional<SteadyTime>(int device)> probing_since;
  // After a poll that changed a GPU's counts or verdict (the watch's thread).
  std::function<void(const probes::DeviceInfo&, const LinkWatchState&)> on_change;
};

// The watch's thread: polls every GPU's links at the rule's interval. Thread-safe.
class LinkWatcher {
 public:
  // `reader` and `clock` must outlive the watcher.
  LinkWatcher(probes::LinkStateReader& reader, std::vector<probes::DeviceInfo> devices,
              const Settings& settings, Clock& clock, LinkWatchHooks hooks);
  ~LinkWatcher();
  LinkWatcher(const LinkWatcher&) = delete;
  LinkWatcher& operator=(const LinkWatcher&) = delete;

  // Polls on a thread of its own until Stop (or destruction); an interval of 0 polls never.
  void Start();
  void Stop();  // returns once the thread has (a poll in progress finishes first)
  // The GPU's path as last read (after each probe cycle that read it): what each link can
  // train to. A GPU is watched from its first path on.
  void SetPath(const probes::DeviceInfo& device, const probes::LinkPath& path);
  // A reloaded config: interval (0 stops the thread, another starts it), window,
  // transitions, the traffic threshold. Not from the watch's thread.
  void Reconfigure(const Settings& settings);
  LinkWatchState State(const std::string& uuid) const;
  std::string Describe() const;

  // One poll of every GPU, now (the thread's work; tests call it on a fake clock).
  void Poll();

 private:
  struct Gpu {
    probes::DeviceInfo device;
    LinkFlapCounter counter;
    bool flapping = false;   // as last logged and handed to on_change
    bool announced = false;  // its first reading was handed to on_change
    std::optional<probes::LinkTrafficCount> last_traffic;  // read at the previous poll
    int traffic_polls = 0;  // polls left to read the traffic at after a slow reading
    std::string source, problem;
  };
  void Run(std::stop_token stop);

  probes::LinkStateReader& reader_;
  Clock& clock_;
  LinkWatchHooks hooks_;
  mutable std::mutex mutex_;  // guards everything below
  LinkWatchRule rule_;
  std::map<std::string, Gpu> gpus_;  // by UUID
  std::vector<std::string> order_;   // UUIDs in device order
  // What each poll reads, replaced by SetPath when a path changes.
  std::shared_ptr<const std::vector<probes::WatchedGpu>> watched_;
  // The poll's working storage, reused (the watch's thread only).
  std::vector<probes::LinkWatchReading> readings_;
  std::vector<LinkPoll> polls_;
  std::vector<std::optional<probes::LinkTrafficCount>> traffic_;
  std::vector<bool> slow_, had_traffic_;
  std::jthread thread_;
};

}  // namespace xferd::core
