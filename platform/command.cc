#include "platform/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace xferd::platform {
namespace {

using Clock = std::chrono::steady_clock;

// How often a wait looks at `stop` and the clock.
constexpr int kPollMs = 50;

class Pipe {
 public:
  Pipe() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  bool ok() const { return fds_[0] >= 0; }
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }
  void CloseRead() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    fds_[0] = -1;
  }
  void CloseWrite() {
    if (fds_[1] >= 0) ::close(fds_[1]);
    fds_[1] = -1;
  }

 private:
  int fds_[2] = {-1, -1};
};

// Kills the child's whole process group, then reaps the child.
int KillAndReap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::size_t max_output, const std::atomic<bool>* stop) {
  CommandResult result;
  if (argv.empty()) {
    result.error = "no program given";
    return result;
  }
  Pipe out;
  if (!out.ok()) {
    result.error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write_end(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.write_end(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The daemon blocks its signals in every thread (platform/signals.h): the child must not
  // inherit that mask, nor any handler. Its own process group, so a kill reaches all of it.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A fixed, small environment: the program's output must not follow the daemon's locale,
  // and nothing of the daemon's environment is the program's business.
  char lang[] = "LC_ALL=C";
  char path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* env[] = {lang, path, nullptr};
  pid_t pid = -1;
  const auto started = Clock::now();
  const int spawned = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    result.error = "cannot run " + argv[0] + ": " + std::strerror(spawned);
    return result;
  }
  result.started = true;
  out.CloseWrite();

  const auto deadline = started + timeout;
  char buffer[4096];
  bool eof = false;
  while (!eof) {
    if (stop != nullptr && stop->load()) {
      result.stopped = true;
      break;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{out.read_end(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), kPollMs)));
    if (ready < 0 && errno != EINTR) {
      result.error = std::string("cannot read its output: ") + std::strerror(errno);
      break;
    }
    if (ready <= 0) continue;
    const ssize_t n = ::read(out.read_end(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      result.error = std::string("cannot read its output: ") + std::strerror(errno);
      break;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    const std::size_t room = max_output - std::min(max_output, result.output.size());
    result.output.append(buffer, std::min(room, static_cast<std::size_t>(n)));
    if (static_cast<std::size_t>(n) > room) {
      result.truncated = true;
      break;
    }
  }
  int status = 0;
  if (eof) {
    // The output ended: the program is exiting; it is still held to the time limit.
    for (;;) {
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (done < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline || (stop != nullptr && stop->load())) {
        result.timed_out = Clock::now() >= deadline;
        result.stopped = !result.timed_out;
        status = KillAndReap(pid);
        break;
      }
      ::usleep(10'000);
    }
  } else {
    status = KillAndReap(pid);
  }
  // Whatever it left running in its group goes too.
  ::kill(-pid, SIGKILL);
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (WIFEXITED(status) && !result.timed_out && !result.truncated && !result.stopped) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  if (result.timed_out) {
    result.error = "no end within " + std::to_string(timeout.count()) + " ms: killed";
  } else if (result.truncated) {
    result.error = "output past " + std::to_string(max_output) + " bytes: killed, output cut";
  } else if (result.stopped) {
    result.error = "stopped: xferd is stopping";
  } else if (result.signal) {
    result.error = std::string("killed by signal ") + std::to_string(*result.signal);
  }
  return result;
}

std::optional<std::filesystem::path> FindProgram(
    const std::vector<std::filesystem::path>& candidates) {
  for (const std::filesystem::path& p : candidates) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) {
      return p;
    }
  }
  return std::nullopt;
}

}  // namespace xferd::platform
