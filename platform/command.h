// Running an outside program (lspci for an evidence record) the way a daemon can afford to:
// never through a shell (the arguments are handed to execve as they are, so a bus id can
// never become a command), with a time limit (past it the program and its process group
// are killed), its output bounded (past the cap it is killed and the output cut), stdin
// from /dev/null, the signals the daemon blocks unblocked and at their defaults in the
// child, and nothing of the daemon's open files (every descriptor xferd opens is
// close-on-exec). A missing program is an answer, not an error.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace xferd::platform {

struct CommandResult {
  bool started = false;          // the program ran (false: `error` says why not)
  std::optional<int> exit_code;  // when it exited; nullopt when killed or not started
  std::optional<int> signal;     // the signal that ended it, when one did
  bool timed_out = false;        // killed at the time limit
  bool truncated = false;        // killed at the output cap; `output` holds the cap
  bool stopped = false;          // killed because the caller asked (`stop`)
  std::string output;            // stdout and stderr together, at most the cap
  std::string error;             // why it did not start or did not finish, for a message
  double seconds = 0;            // how long it ran
};

// Runs `argv` (argv[0] a path to the program: no PATH search, no shell). Waits at most
// `timeout`, keeps at most `max_output` bytes; returns early (the program killed) once
// `*stop` turns true, looked at every few tens of milliseconds. Never throws for what the
// program does.
CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::size_t max_output, const std::atomic<bool>* stop = nullptr);

// The first of `candidates` that is a regular file this process may execute; nullopt when
// none is (the program is not installed).
std::optional<std::filesystem::path> FindProgram(
    const std::vector<std::filesystem::path>& candidates);

}  // namespace xferd::platform
