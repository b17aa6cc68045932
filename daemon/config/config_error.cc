#include "config/config_error.h"

#include "platform/printable.h"

namespace xferd::config {
namespace {

// Every part may hold text from the file (a key, a value, toml++'s and yaml-cpp's
// descriptions, which quote the input): escaped and capped by the one function that does
// so, so a megabyte-long key or raw bytes never reach the terminal or the journal.
constexpr std::size_t kFileBytes = 512;
constexpr std::size_t kKeyBytes = 120;
constexpr std::size_t kTextBytes = 1000;

std::string ErrorText(const std::string& file, int line, const std::string& key,
                      const std::string& problem, const std::string& fix) {
  std::string text = file.empty() ? "<config>" : file;
  if (line > 0) text += ":" + std::to_string(line);
  text += ": ";
  if (!key.empty()) text += key + ": ";
  text += problem;
  if (!fix.empty()) text += "; fix: " + fix;
  return text;
}

}  // namespace

ConfigError::ConfigError(std::string file, int line, std::string key, std::string problem,
                         std::string fix)
    : platform::Error(
          platform::Failure::kConfig,
          ErrorText(platform::PrintablePath(file, kFileBytes), line,
                    platform::Printable(key, kKeyBytes), platform::Printable(problem, kTextBytes),
                    platform::Printable(fix, kTextBytes))),
      file_(platform::PrintablePath(file, kFileBytes)),
      line_(line),
      key_(platform::Printable(key, kKeyBytes)),
      problem_(platform::Printable(problem, kTextBytes)),
      fix_(platform::Printable(fix, kTextBytes)) {}

}  // namespace xferd::config
