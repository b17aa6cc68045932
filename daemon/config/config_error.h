// A config error a user can fix: the file, the line, the key, what is wrong and what to do,
// because the reader of the message is an operator with a text editor, not a developer.
#pragma once

#include <string>

#include "platform/exit_codes.h"

namespace xferd::config {

class ConfigError : public platform::Error {
 public:
  // what(): "<file>:<line>: <key>: <problem>; fix: <fix>" (line and key left out when 0/"").
  // Each part is kept as platform::Printable makes it: escaped, and capped in length.
  ConfigError(std::string file, int line, std::string key, std::string problem, std::string fix);
  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 0 when not tied to a line
  const std::string& key() const { return key_; }
  const std::string& problem() const { return problem_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string file_;
  int line_;
  std::string key_;
  std::string problem_;
  std::string fix_;
};

}  // namespace xferd::config
