#include "core/link_watch.h"

#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "platform/logging.h"

namespace xferd::core {
namespace {

using std::chrono::duration;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

double Seconds(SteadyTime::duration d) {
  return duration<double>(d).count();
}

// The buckets the window is counted in: 60 of them (10 s each in 10 min), at least 1 s.
SteadyTime::duration BucketLength(const LinkWatchRule& rule) {
  return std::max<SteadyTime::duration>(std::chrono::seconds(1), rule.window / 60);
}

// What the narrowest link of a reading carries at the speed it runs; 0: none readable.
double NarrowestRate(const std::vector<probes::LinkState>& links) {
  double rate = 0;
  for (const probes::LinkState& l : links) {
    if (!l.Readable()) continue;
    const double r = probes::PcieBytesPerSecond(l.gen, l.width);
    if (r > 0 && (rate == 0 || r < rate)) rate = r;
  }
  return rate;
}

std::string WindowText(double seconds) {
  if (seconds >= 60 && std::fmod(seconds, 60) < 0.5) return fmt::format("{:.0f} min", seconds / 60);
  return FormatSeconds(seconds, 0);
}

}  // namespace

LinkWatchRule LinkWatchRule::Of(const Settings& settings) {
  LinkWatchRule rule;
  rule.interval = settings.link_watch_interval;
  rule.window = settings.link_flap_window;
  rule.transitions = settings.link_flap_transitions;
  rule.busy_bytes_per_s = settings.busy_pcie_bytes_per_s;
  return rule;
}

double MovingDataThreshold(const LinkWatchRule& rule, double bytes_per_s) {
  if (bytes_per_s <= 0) return rule.busy_bytes_per_s;
  return std::min(rule.busy_bytes_per_s, 0.25 * bytes_per_s);
}

std::string LinkWatchState::Describe() const {
  std::string text = fmt::format("{} transition{} and {} below capability in the last {}",
                                 window_transitions, window_transitions == 1 ? "" : "s",
                                 FormatSeconds(window_reduced_s, 0), WindowText(window_s));
  if (!last_seen.empty()) text += "; last " + last_seen;
  return text;
}

void LinkFlapCounter::SetLinks(std::vector<probes::WatchedLink> links) {
  const auto same_links = [&] {
    if (links.size() != links_.size()) return false;
    for (std::size_t i = 0; i < links.size(); ++i) {
      if (links[i].bdf != links_[i].bdf) return false;
    }
    return true;
  };
  // Another path (a GPU moved, a switch re-enumerated): readings of the old one compare
  // with nothing of the new one. The counts stay.
  if (!same_links()) {
    pending_.reset();
    judged_.reset();
  }
  links_ = std::move(links);
}

bool LinkFlapCounter::Possible(std::size_t i, const probes::LinkState& state) const {
  // Above what the link can train to: a device reading all ones (x63), not a link state.
  const probes::WatchedLink& l = links_[i];
  return state.Readable() && (l.max_gen == 0 || state.gen <= l.max_gen) &&
         (l.max_width == 0 || state.width <= l.max_width);
}

std::string LinkFlapCounter::Name(std::size_t i) const {
  const probes::WatchedLink& l = links_[i];
  return l.other_end_bdf.empty() ? l.bdf : l.bdf + "-" + l.other_end_bdf;
}

std::string LinkFlapCounter::Max(std::size_t i) const {
  return " (max " + probes::FormatLink(links_[i].max_gen, links_[i].max_width) + ")";
}

bool LinkFlapCounter::Observe(const LinkPoll& poll, const LinkWatchRule& rule) {
  if (poll.links.size() != links_.size()) return false;  // read for another path
  bool changed = false;
  if (pending_ && poll.at > pending_->at) {
    const LinkPoll& k = *pending_;
    // Whether the GPU moved data at the pending reading: its own probe, or traffic over the
    // intervals on both sides of it.
    const double threshold = MovingDataThreshold(rule, NarrowestRate(k.links));
    const bool moving = k.probing || (k.traffic_bytes_per_s && poll.traffic_bytes_per_s &&
                                      *k.traffic_bytes_per_s >= threshold &&
                                      *poll.traffic_bytes_per_s >= threshold);
    int transitions = 0;
    bool reduced = false;
    for (std::size_t i = 0; i < links_.size(); ++i) {
      const probes::LinkState& now = k.links[i];
      if (!Possible(i, now)) continue;
      const probes::WatchedLink& cap = links_[i];
      const bool narrow = cap.max_width > 0 && now.width < cap.max_width;
      const bool slow = moving && cap.max_gen > 0 && now.gen < cap.max_gen;
      if (narrow || slow) {
        reduced = true;
        last_seen_ = Name(i) + " " + probes::FormatLink(now.gen, now.width) +
                     (narrow ? "" : " while moving data") + Max(i);
      }
      if (!judged_ || !Possible(i, judged_->links[i])) continue;
      const probes::LinkState& before = judged_->links[i];
      if (before.width != now.width || (moving && judged_moving_ && before.gen != now.gen)) {
        ++transitions;
        last_seen_ = Name(i) + " " + probes::FormatLink(before.gen, before.width) + " -> " +
                     probes::FormatLink(now.gen, now.width) + Max(i);
      }
    }
    // Held until this poll, at most kMaxHeldPolls intervals.
    const double held =
        std::min(Seconds(poll.at - k.at), kMaxHeldPolls * duration<double>(rule.interval).count());
    const double reduced_s = reduced ? held : 0;
    if (transitions > 0 || reduced_s > 0) {
      transitions_ += static_cast<std::uint64_t>(transitions);
      reduced_s_ += reduced_s;
      Add(k.at, transitions, reduced_s, rule);
      changed = true;
    }
    judged_ = k;
    judged_moving_ = moving;
    judged_reduced_ = reduced;
  }
  pending_ = poll;
  return changed;
}

void LinkFlapCounter::Add(SteadyTime at, int transitions, double reduced_s,
                          const LinkWatchRule& rule) {
  if (buckets_.empty() || at - buckets_.back().start >= BucketLength(rule)) {
    buckets_.push_back({at, 0, 0});
  }
  buckets_.back().transitions += transitions;
  buckets_.back().reduced_s += reduced_s;
  // A window's worth is kept (the window may grow on reload: its longest is a day).
  while (!buckets_.empty() && at - buckets_.front().start > rule.window + BucketLength(rule)) {
    buckets_.pop_front();
  }
}

LinkWatchState LinkFlapCounter::State(SteadyTime now, const LinkWatchRule& rule) const {
  LinkWatchState s;
  s.watching = Watching();
  s.transitions = transitions_;
  s.reduced_s = reduced_s_;
  s.window_s = duration<double>(rule.window).count();
  for (const Bucket& b : buckets_) {
    if (now - b.start > rule.window) continue;
    s.window_transitions += b.transitions;
    s.window_reduced_s += b.reduced_s;
  }
  const bool by_transitions = rule.transitions > 0 && s.window_transitions >= rule.transitions;
  // By its time below capability only while the link is low still: one episode that ended
  // (a downtrained link trained back up) is no flapping.
  s.flapping =
      by_transitions || (judged_reduced_ && s.window_reduced_s >= kFlapReducedShare * s.window_s);
  s.low_only = s.flapping && !by_transitions;
  if (s.window_transitions > 0 || s.window_reduced_s > 0) s.last_seen = last_seen_;
  return s;
}

LinkWatcher::LinkWatcher(probes::LinkStateReader& reader, std::vector<probes::DeviceInfo> devices,
                         const Settings& settings, Clock& clock, LinkWatchHooks hooks)
    : reader_(reader), clock_(clock), hooks_(std::move(hooks)), rule_(LinkWatchRule::Of(settings)) {
  for (probes::DeviceInfo& d : devices) {
    order_.push_back(d.uuid);
    gpus_[d.uuid].device = std::move(d);
  }
}

LinkWatcher::~LinkWatcher() {
  Stop();
}

void LinkWatcher::Start() {
  {
    std::lock_guard lock(mutex_);
    if (rule_.interval.count() <= 0) return;
  }
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

void LinkWatcher::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  thread_.join();
}

void LinkWatcher::SetPath(const probes::DeviceInfo& device, const probes::LinkPath& path) {
  std::vector<probes::WatchedLink> links = reader_.Links(device, path);
  std::lock_guard lock(mutex_);
  auto it = gpus_.find(device.uuid);
  if (it == gpus_.end()) return;
  const auto same = [](const probes::WatchedLink& a, const probes::WatchedLink& b) {
    return a.bdf == b.bdf && a.other_end_bdf == b.other_end_bdf && a.max_gen == b.max_gen &&
           a.max_width == b.max_width;
  };
  const auto& before = it->second.counter.links();
  if (before.size() == links.size() &&
      std::equal(before.begin(), before.end(), links.begin(), same)) {
    return;  // as every cycle reads it: nothing to redo
  }
  it->second.counter.SetLinks(std::move(links));
  // The snapshot the polls read, in device order.
  auto watched = std::make_shared<std::vector<probes::WatchedGpu>>();
  for (const std::string& uuid : order_) {
    const Gpu& gpu = gpus_.at(uuid);
    if (!gpu.counter.links().empty()) watched->push_back({gpu.device, gpu.counter.links()});
  }
  watched_ = std::move(watched);
}

void LinkWatcher::Reconfigure(const Settings& settings) {
  bool on;
  {
    std::lock_guard lock(mutex_);
    rule_ = LinkWatchRule::Of(settings);
    on = rule_.interval.count() > 0;
  }
  // Turned off or on by the reload: the thread follows (outside the lock Poll takes).
  Stop();
  if (on) Start();
}

LinkWatchState LinkWatcher::State(const std::string& uuid) const {
  std::lock_guard lock(mutex_);
  auto it = gpus_.find(uuid);
  if (it == gpus_.end()) return {};
  LinkWatchState s = it->second.counter.State(clock_.Now(), rule_);
  s.watching = s.watching && rule_.interval.count() > 0;
  s.source = it->second.source;
  s.problem = it->second.problem;
  return s;
}

std::string LinkWatcher::Describe() const {
  std::lock_guard lock(mutex_);
  if (rule_.interval.count() == 0) return "off ([health] link_watch_interval = \"0s\")";
  return fmt::format("every {} ({}); flapping at {} transitions or {} below capability in {}",
                     FormatSeconds(duration<double>(rule_.interval).count()), reader_.Describe(),
                     rule_.transitions,
                     FormatSeconds(kFlapReducedShare * duration<double>(rule_.window).count(), 0),
                     WindowText(duration<double>(rule_.window).count()));
}

void LinkWatcher::Poll() {
  // What to read, taken under the lock (a snapshot SetPath replaces); read without it:
  // State() must not wait on sysfs or NVML.
  std::shared_ptr<const std::vector<probes::WatchedGpu>> watched;
  LinkWatchRule rule;
  {
    std::lock_guard lock(mutex_);
    rule = rule_;
    watched = watched_;
    had_traffic_.resize(watched ? watched->size() : 0);
    for (std::size_t i = 0; watched && i < watched->size(); ++i) {
      had_traffic_[i] = gpus_.at((*watched)[i].device.uuid).traffic_polls > 0;
    }
  }
  if (!watched || watched->empty()) return;
  const std::size_t n = watched->size();
  reader_.Read(*watched, readings_);
  const SteadyTime at = clock_.Now();
  polls_.resize(n);
  traffic_.assign(n, std::nullopt);
  slow_.assign(n, false);
  for (std::size_t i = 0; i < n && i < readings_.size(); ++i) {
    const probes::WatchedGpu& gpu = (*watched)[i];
    LinkPoll& poll = polls_[i];
    poll.at = at;
    poll.links = readings_[i].links;
    poll.traffic_bytes_per_s.reset();
    poll.probing = false;
    if (hooks_.probing_since) {
      const auto since = hooks_.probing_since(gpu.device.index);
      poll.probing = since && at - *since >= kProbeSettle;
    }
    // The traffic matters only around readings whose speed is below capability: it is read
    // then and for kTrafficPollsAfterSlow polls after (the intervals after them, and the
    // readings back at full speed between two slow ones), not at every poll.
    for (std::size_t l = 0; l < poll.links.size() && l < gpu.links.size(); ++l) {
      const probes::LinkState& state = poll.links[l];
      slow_[i] = slow_[i] || (state.Readable() && state.gen < gpu.links[l].max_gen);
    }
    if (slow_[i] || had_traffic_[i]) traffic_[i] = reader_.Traffic(gpu.device);
  }

  std::vector<std::pair<probes::DeviceInfo, LinkWatchState>> changes;
  {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < n && i < readings_.size(); ++i) {
      const probes::DeviceInfo& device = (*watched)[i].device;
      auto it = gpus_.find(device.uuid);
      if (it == gpus_.end()) continue;
      Gpu& gpu = it->second;
      LinkPoll& poll = polls_[i];
      const auto& count = traffic_[i];
      if (count && gpu.last_traffic && count->at_s > gpu.last_traffic->at_s &&
          count->bytes >= gpu.last_traffic->bytes) {
        poll.traffic_bytes_per_s =
            (count->bytes - gpu.last_traffic->bytes) / (count->at_s - gpu.last_traffic->at_s);
      }
      gpu.last_traffic = count;
      if (slow_[i]) {
        gpu.traffic_polls = kTrafficPollsAfterSlow;
      } else if (gpu.traffic_polls > 0) {
        --gpu.traffic_polls;
      }
      const probes::LinkWatchReading& reading = readings_[i];
      if (gpu.source != reading.source) gpu.source = reading.source;
      if (reading.problem != gpu.problem) {
        // Said when it starts and when it stops, not at every poll.
        platform::ScopedLogFields fields(std::to_string(device.index), "");
        if (!reading.problem.empty()) {
          spdlog::warn("gpu {}: link watch: {}; that link is not watched until it reads again",
                       device.index, reading.problem);
        } else {
          spdlog::info("gpu {}: link watch: every link reads again", device.index);
        }
        gpu.problem = reading.problem;
      }
      bool changed = gpu.counter.Observe(poll, rule);
      // Its first reading: reported, as what the watch reads (the source) is known now.
      if (!gpu.announced && gpu.counter.Watching()) changed = gpu.announced = true;
      // The verdict moves when the counts do, and when the window lets old ones go.
      if (!changed && !gpu.flapping) continue;
      LinkWatchState state = gpu.counter.State(at, rule);
      state.source = gpu.source;
      state.problem = gpu.problem;
      const bool flipped = state.flapping != gpu.flapping;
      if (flipped) {
        platform::ScopedLogFields fields(std::to_string(device.index), "");
        if (state.flapping) {
          spdlog::warn("gpu {}: PCIe link flapping: {}", device.index, state.Describe());
        } else {
          spdlog::info("gpu {}: PCIe link steady again: {}", device.index, state.Describe());
        }
        gpu.flapping = state.flapping;
      }
      if (changed || flipped) changes.emplace_back(device, std::move(state));
    }
  }
  if (hooks_.on_change) {
    for (const auto& [device, state] : changes) hooks_.on_change(device, state);
  }
}

void LinkWatcher::Run(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "xferd-linkwatch");
  SteadyTime next = clock_.Now();
  for (;;) {
    milliseconds interval;
    {
      std::lock_guard lock(mutex_);
      interval = rule_.interval;
    }
    if (interval.count() <= 0) return;  // off: Reconfigure starts it again
    next += interval;
    const SteadyTime now = clock_.Now();
    if (next < now) next = now + interval;  // late (a suspend): no burst of polls to catch up
    if (!clock_.SleepUntil(next, stop)) return;
    Poll();
  }
}

}  // namespace xferd::core
