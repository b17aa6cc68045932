// The web layer's error: something a user can cause (a bad address, a port in use, a bad
// TLS file), with the fix. Its exit code is EX_OSERR; callers that know better (a bad
// flag, a bad config file) turn it into their own error with the same problem and fix.
#pragma once

#include <string>

#include "platform/exit_codes.h"

namespace xferd::web {

class HttpError : public platform::Error {
 public:
  HttpError(std::string problem, std::string fix)
      : platform::Error(platform::Failure::kOsError, problem + "; fix: " + fix),
        problem_(std::move(problem)),
        fix_(std::move(fix)) {}
  const std::string& problem() const { return problem_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string problem_, fix_;
};

}  // namespace xferd::web
