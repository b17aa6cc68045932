// The state file: <state_dir>/state.json, the learned baselines and the incident log, kept
// across restarts. A corrupt file is moved aside, a newer one left untouched; writes are
// atomic (platform::WriteFileAtomically), so a crash never leaves half a file.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/incident_log.h"

namespace xferd::core {

// Learned cycle medians per GPU UUID and series key ("pinned/h2d/64MiB"), oldest first:
// what the state file holds.
using BaselineSet = std::map<std::string, std::map<std::string, std::vector<double>>>;
inline constexpr int kStateVersion = 1;
// The longest baseline window a configuration may set (health.baseline_window).
inline constexpr std::size_t kMaxBaselineWindow = 10000;

struct StateLoad {
  enum class Outcome {
    kFresh,          // no file: start learning
    kLoaded,         // read back
    kCorrupt,        // unparsable or truncated: moved aside, start fresh
    kFutureVersion,  // written by a newer xferd: kept untouched, persisting is off
    kUnreadable,     // exists but cannot be read (permissions): kept, persisting is off
  };
  Outcome outcome = Outcome::kFresh;
  BaselineSet baselines;
  // What happened and the fix; empty for kFresh and for kLoaded when all was kept.
  std::string message;
  // Where the file as it was is kept: a corrupt one moved aside, or a copy of one whose
  // content was not all kept (the longest series cut to the window). Empty when neither.
  std::filesystem::path set_aside;
  std::size_t temp_files_removed = 0;  // left by writes a crash interrupted
  // The incident log, oldest first (the newest kIncidentLogCapacity). One that cannot be
  // read costs only itself: the baselines load, what of the log could be read is kept, the
  // file as it was is kept beside it (set_aside) and `incidents_message` says what was not
  // kept and where the copy is.
  std::vector<Incident> incidents;
  std::string incidents_message;
};

struct StateWrite {
  bool ok = true;
  bool skipped = false;  // persisting is off (future version / unreadable file)
  std::string error;     // what failed and the fix
};

class StateFile {
 public:
  explicit StateFile(std::filesystem::path dir);

  const std::filesystem::path& path() const { return path_; }

  // Read the file; never throws. Each series keeps its newest `keep_per_series` values (the
  // configuration's baseline window). What is not kept as it was (a corrupt file, series
  // longer than that, sections this xferd does not write) is kept beside it under a name of
  // its own with `now` in it (platform::MoveAside, platform::KeepCopy): StateLoad says where.
  StateLoad Load(std::chrono::system_clock::time_point now = std::chrono::system_clock::now(),
                 std::size_t keep_per_series = kMaxBaselineWindow);

  // Before a shorter baseline window trims what is `held` (a reload): when values would go,
  // keeps the file as last written under a name of its own. The line for the log, or ""
  // when nothing goes.
  std::string KeepBeforeTrimming(
      const BaselineSet& held, std::size_t window,
      std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

  // Atomic write: temp file in the same directory, write, fsync, rename, fsync the
  // directory. On failure the old file stays whole and the caller keeps its data.
  StateWrite Save(const BaselineSet& baselines,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());
  // The same with the incident log (IncidentLog::Incidents, oldest first).
  StateWrite Save(const BaselineSet& baselines, const std::vector<Incident>& incidents,
                  std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

  bool persisting() const { return persisting_; }

 private:
  // Load's outcomes other than a plain read: each fills `out` and says whether the file is
  // still written to (persisting_).
  void KeepUnreadable(int error, const std::string& cause, StateLoad& out);
  void KeepNewerVersion(std::int64_t version, StateLoad& out);
  void KeepCopyBeforeDropping(const std::string& dropped, const std::string& incidents_dropped,
                              std::chrono::system_clock::time_point now, StateLoad& out);
  void SetCorruptAside(const std::string& problem_as_read,
                       std::chrono::system_clock::time_point now, StateLoad& out);

  std::filesystem::path dir_;
  std::filesystem::path path_;
  bool persisting_ = true;
  std::string not_persisting_reason_;
};

}  // namespace xferd::core
