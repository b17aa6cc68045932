// A library tests/integration/test_daemon.py loads into xferd with LD_PRELOAD: its
// initialiser sends the process SIGHUP (as many times as XFERD_TEST_SIGHUPS_AT_START says)
// before main runs. Library initialisers run after the executable's .preinit_array, so this
// is the earliest moment a signal can find code of the program's own running, and it needs
// no timing: a daemon that has not blocked SIGHUP by then dies of it (exit 129).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

namespace {

__attribute__((constructor)) void SendSighupBeforeMain() {
  const char* count = std::getenv("XFERD_TEST_SIGHUPS_AT_START");
  const int n = count != nullptr ? std::atoi(count) : 1;
  for (int i = 0; i < n; ++i) kill(getpid(), SIGHUP);
}

}  // namespace
