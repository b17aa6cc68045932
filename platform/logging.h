// Log setup: journald (with GPU and MODE fields) when stderr is the journal stream, else
// stderr with timestamps. Everything logs through spdlog's default logger.
#pragma once

#include <spdlog/common.h>

#include <optional>
#include <string>
#include <string_view>

namespace xferd::platform {

// The one parser of a log level (config file, --log.level, reload): the names below, and
// "warning" for warn; nullopt otherwise.
inline constexpr const char* kLogLevelNames = "trace, debug, info, warn, error, critical, off";
std::optional<spdlog::level::level_enum> ParseLogLevel(std::string_view text);

// True when fd 2 is the stream systemd connected to the journal: $JOURNAL_STREAM holds
// "device:inode" of that stream and fstat(2) matches it (systemd.exec(5)).
bool StderrIsJournalStream();

enum class LogTarget { kStderr, kJournal };

// Install the default logger. `target` nullopt = pick by StderrIsJournalStream().
// An unknown level is a programming error here: config validation rejects it first.
LogTarget SetUpLogging(std::string_view level, std::optional<LogTarget> target = std::nullopt);

// Change the level of the installed logger (config reload). False for an unknown level.
bool SetLogLevel(std::string_view level);

// Journal fields for log lines written on this thread while the object lives: GPU=<gpu>
// and MODE=<mode> (empty = not sent). Nested scopes restore the outer fields.
class ScopedLogFields {
 public:
  ScopedLogFields(std::string gpu, std::string mode);
  ~ScopedLogFields();
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;

  // The fields in force on this thread now.
  static const std::string& Gpu();
  static const std::string& Mode();

 private:
  std::string saved_gpu_, saved_mode_;
};

}  // namespace xferd::platform
