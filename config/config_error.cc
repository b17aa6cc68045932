#include "config/config_error.h"

namespace xferd::config {
namespace {

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
    : platform::Error(platform::Failure::kConfig, ErrorText(file, line, key, problem, fix)),
      file_(std::move(file)),
      line_(line),
      key_(std::move(key)),
      problem_(std::move(problem)),
      fix_(std::move(fix)) {}

}  // namespace xferd::config
