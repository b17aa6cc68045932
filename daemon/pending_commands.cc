// TEMPORARY during the first build-out: weak definitions that the real commands replace.
// This file is deleted before the foundation lands.
#include <cstdio>

#include "daemon/commands.h"
#include "daemon/exit_codes.h"

namespace xferd::daemon {
__attribute__((weak)) int RunProbeCommand(const ProbeCommandOptions&) {
  std::fputs("xferd probe: not built yet\n", stderr);
  return kExitSoftware;
}
__attribute__((weak)) int RunDaemonCommand(const RunCommandOptions&) {
  std::fputs("xferd run: not built yet\n", stderr);
  return kExitSoftware;
}
__attribute__((weak)) int CheckConfigCommand(const std::string&) {
  std::fputs("xferd check-config: not built yet\n", stderr);
  return kExitSoftware;
}
}  // namespace xferd::daemon
