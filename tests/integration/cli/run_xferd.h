// How the CLI tests run the real binary as a user runs it from a shell: its stdout, its
// stderr and its exit code.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace xferd::cli_testing {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

// `xferd ARGS` through the shell (ARGS split and quoted as a shell does it), `env` (words
// VAR=value) before it; stdin from /dev/null, stderr through a file in `dir`.
inline Result Xferd(const std::filesystem::path& dir, const std::string& args,
                    const std::string& env = "") {
  const std::filesystem::path err_file = dir / "stderr";
  const std::string command = env + " '" + std::string(XFERD_BINARY) + "' " + args + " 2>'" +
                              err_file.string() + "' </dev/null";
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream text;
  text << in.rdbuf();
  r.err = text.str();
  return r;
}

}  // namespace xferd::cli_testing
