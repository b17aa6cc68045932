// Each GPU's verdict as the status API (/api/v1/status) and `xferd health` report it, and
// the incident log: the last changes of those verdicts (time, from, to, the series and the
// causes), kept in the state file across restarts and bounded in size. How it reads:
// docs/http.md ("The status API").
//
// Use (the service, after HealthTracker::Observe of each GPU):
//   IncidentLog incidents;
//   incidents.Restore(state.Load().incidents);
//   ... each cycle, per GPU:
//   incidents.Observe(health, busy, settings.consecutive_bad, now);
//   ... after the cycle:
//   state.Save(tracker.Snapshot(), incidents.Incidents());
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xferd/probes/types.h"

namespace xferd::core {

struct DeviceHealth;  // core/health_tracker.h

// A GPU's verdict for whoever acts on it (a drain, a node condition).
//   kPending: no verdict yet: no cycle since the daemon started, or the GPU was DEGRADED
//             when the daemon stopped and has not been judged consecutive_bad times since
//             (so a restart neither clears a verdict unproven nor repeats a stale one).
//   kOk, kDegraded: HealthTracker's verdict (degraded when any (mode, direction) is).
//   Two verdicts say the verdict is not known, for different reasons (docs/http.md):
//   kStale: not degraded, and the GPU's headline series have no current reading (it went
//           unmeasured: busy, the cycle budget, failing probes): measured again, it is
//           judged again.
//   kUnknown: the GPU cannot be judged as it is (DeviceHealth::unjudgeable: MIG enabled with
//             no GPU instance to probe through, confidential-computing GPUs not ready for
//             work): nothing to measure until its shape changes.
//   Like pending, neither makes an incident: the next verdict is compared with the last one
//   known.
enum class DeviceVerdict { kPending, kOk, kDegraded, kStale, kUnknown };
// Every verdict, in the order a node's verdict is taken from its GPUs' (NodeVerdict): the
// first that any GPU has. The words ToString gives them are the status document's, and
// `xferd health` reads exactly these (ParseDeviceVerdict).
inline constexpr std::array<DeviceVerdict, 5> kAllDeviceVerdicts = {
    DeviceVerdict::kDegraded, DeviceVerdict::kPending, DeviceVerdict::kStale,
    DeviceVerdict::kUnknown, DeviceVerdict::kOk};
// "pending", "ok", "degraded", "stale", "unknown"
std::string_view ToString(DeviceVerdict verdict);
std::optional<DeviceVerdict> ParseDeviceVerdict(std::string_view text);
// The node's verdict from its GPUs' (the status document's top-level `verdict`): degraded
// when any GPU is, else pending, else stale, else unknown, else ok (ok for none).
DeviceVerdict NodeVerdict(const std::vector<DeviceVerdict>& gpus);

struct Incident {
  std::chrono::system_clock::time_point time;
  int gpu = 0;
  std::string uuid;
  // From kPending: the GPU's first verdict (degraded at once); never to kPending.
  DeviceVerdict from = DeviceVerdict::kPending, to = DeviceVerdict::kOk;
  // The (mode, direction) pairs that are degraded after the change (to degraded), or were
  // before it (back to ok); the most severe first (WorstDegraded).
  std::vector<std::pair<probes::TransferMode, probes::Direction>> pairs;
  struct Cause {
    std::string cause;   // a DiagnosisCause label; a newer xferd may write others
    std::string detail;  // as in Diagnosis::detail
    // Its fault code and recommended action (core/fault_codes.h): "XFERD-101", "reboot".
    // As read back when the file gives them, else this xferd's for the label ("" for a
    // label it does not know).
    std::string code, action;
  };
  std::vector<Cause> causes;  // what held when it changed, ranked: the leading cause first
  // The evidence record kept when the GPU turned degraded (core/evidence.h): its name in
  // the evidence directory, once written; "" when none was (not degraded, or dropped).
  std::string evidence;
};

// What the log keeps: the newest changes. A GPU that flaps every few minutes fills it in
// about an hour and a half; each entry is a few hundred bytes of the state file.
inline constexpr std::size_t kIncidentLogCapacity = 32;

// Thread-safe: Observe from the probe loop, the readers from anywhere.
class IncidentLog {
 public:
  explicit IncidentLog(std::size_t capacity = kIncidentLogCapacity);

  // The incidents the state file held, oldest first (the newest `capacity` are kept). The
  // last one of each GPU says what its verdict was when the daemon stopped.
  void Restore(std::vector<Incident> incidents);

  // One cycle (or confirmation round) of one GPU, after HealthTracker::Observe: returns its
  // verdict now, and logs an incident when that changed. `busy`: the busy detector skipped
  // the GPU, so nothing was judged.
  // `logged`, when given, receives the incident this call logged (nullopt when none).
  DeviceVerdict Observe(const DeviceHealth& health, bool busy, int consecutive_bad,
                        std::chrono::system_clock::time_point now,
                        std::optional<Incident>* logged = nullptr);

  // Links the evidence record `record` (a file name in the evidence directory) to the
  // incident of GPU `uuid` logged at `time`; false when the log no longer holds it.
  bool AttachEvidence(const std::string& uuid, std::chrono::system_clock::time_point time,
                      const std::string& record);

  // kPending for a GPU not observed since the start.
  DeviceVerdict Verdict(const std::string& uuid) const;

  std::vector<Incident> Incidents() const;  // oldest first

 private:
  struct DeviceRecord {
    // The last verdict that was not pending: from this run, or the log's last incident.
    DeviceVerdict settled = DeviceVerdict::kPending;
    DeviceVerdict now = DeviceVerdict::kPending;
    bool recheck = false;  // DEGRADED before the restart: pending until judged again
    int judged = 0;        // cycles with readings since the start
    std::vector<std::pair<probes::TransferMode, probes::Direction>> degraded_pairs;
  };

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::deque<Incident> incidents_;
  std::map<std::string, DeviceRecord> devices_;  // by UUID
};

// An incident as the state file and the status API write it:
//   {"time": "2026-12-01T10:00:00.123Z", "gpu": 0, "uuid": "GPU-...", "from": "ok",
//    "to": "degraded", "series": [{"mode": "pinned", "direction": "h2d"}],
//    "causes": [{"cause": "link_downtrained", "code": "XFERD-101", "action": "reboot",
//                "detail": "..."}],
//    "evidence": "20261201T100000123Z-gpu0.json"}     (null when none was kept)
nlohmann::json IncidentToJson(const Incident& incident);
// Reads one back; nullopt with `problem` set (what is wrong, for a log line) when `value`
// is not an incident. Strings are held to a few hundred bytes.
std::optional<Incident> IncidentFromJson(const nlohmann::json& value, std::string& problem);

// RFC 3339 in UTC with milliseconds ("2026-12-01T10:00:00.123Z"), and back (nullopt for
// anything else): the times of the status API and the incident log.
std::string FormatUtcTime(std::chrono::system_clock::time_point time);
std::optional<std::chrono::system_clock::time_point> ParseUtcTime(std::string_view text);

}  // namespace xferd::core
