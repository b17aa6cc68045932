#include "platform/logging.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#define SD_JOURNAL_SUPPRESS_LOCATION
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-journal.h>

namespace xferd::platform {
namespace {

thread_local std::string t_gpu;
thread_local std::string t_mode;

int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return LOG_DEBUG;
    case spdlog::level::info: return LOG_INFO;
    case spdlog::level::warn: return LOG_WARNING;
    case spdlog::level::err: return LOG_ERR;
    case spdlog::level::critical: return LOG_CRIT;
    default: return LOG_INFO;
  }
}

// spdlog 1.10's systemd_sink sends a fixed set of fields; this one adds GPU and MODE from
// the logging thread's ScopedLogFields, so `journalctl GPU=0 MODE=pinned` works.
class JournalSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::vector<std::string> fields;
    fields.reserve(5);
    fields.push_back("MESSAGE=" + std::string(msg.payload.data(), msg.payload.size()));
    fields.push_back("PRIORITY=" + std::to_string(SyslogPriority(msg.level)));
    fields.push_back("SYSLOG_IDENTIFIER=xferd");
    if (!t_gpu.empty()) fields.push_back("GPU=" + t_gpu);
    if (!t_mode.empty()) fields.push_back("MODE=" + t_mode);
    std::vector<iovec> iov;
    iov.reserve(fields.size());
    for (auto& f : fields) iov.push_back({f.data(), f.size()});
    // A journal that cannot take a line is not worth crashing the daemon for.
    (void)sd_journal_sendv(iov.data(), static_cast<int>(iov.size()));
  }
  void flush_() override {}
};

}  // namespace

std::optional<spdlog::level::level_enum> ParseLogLevel(std::string_view text) {
  if (text == "trace") return spdlog::level::trace;
  if (text == "debug") return spdlog::level::debug;
  if (text == "info") return spdlog::level::info;
  if (text == "warn" || text == "warning") return spdlog::level::warn;
  if (text == "error") return spdlog::level::err;
  if (text == "critical") return spdlog::level::critical;
  if (text == "off") return spdlog::level::off;
  return std::nullopt;
}

bool StderrIsJournalStream() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(env, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(2, &st) != 0) return false;
  // A child that inherited the variable but had stderr redirected must not use the journal.
  return static_cast<unsigned long long>(st.st_dev) == dev &&
         static_cast<unsigned long long>(st.st_ino) == ino;
}

LogTarget SetUpLogging(std::string_view level, std::optional<LogTarget> target) {
  const LogTarget chosen =
      target.value_or(StderrIsJournalStream() ? LogTarget::kJournal : LogTarget::kStderr);
  std::shared_ptr<spdlog::logger> logger;
  if (chosen == LogTarget::kJournal) {
    logger = std::make_shared<spdlog::logger>("xferd", std::make_shared<JournalSink>());
  } else {
    logger = std::make_shared<spdlog::logger>("xferd",
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  }
  logger->set_level(ParseLogLevel(level).value_or(spdlog::level::info));
  // Warnings and worse reach the journal/terminal at once (a crash must not eat them).
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return chosen;
}

bool SetLogLevel(std::string_view level) {
  const auto parsed = ParseLogLevel(level);
  if (!parsed) return false;
  spdlog::default_logger()->set_level(*parsed);
  return true;
}

ScopedLogFields::ScopedLogFields(std::string gpu, std::string mode)
    : saved_gpu_(std::move(t_gpu)), saved_mode_(std::move(t_mode)) {
  t_gpu = std::move(gpu);
  t_mode = std::move(mode);
}

ScopedLogFields::~ScopedLogFields() {
  t_gpu = std::move(saved_gpu_);
  t_mode = std::move(saved_mode_);
}

const std::string& ScopedLogFields::Gpu() {
  return t_gpu;
}
const std::string& ScopedLogFields::Mode() {
  return t_mode;
}

}  // namespace xferd::platform
