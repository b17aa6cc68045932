// Work that can block where nothing can cancel it (a read from a hung network or FUSE file
// system waits in the kernel, uninterruptibly), run so that the caller still stops on
// SIGTERM: the daemon reads its files this way at start and on SIGHUP.
#pragma once

#include <functional>
#include <optional>

#include "platform/signals.h"

namespace xferd::platform {

// Runs `work` on a thread of its own and waits for it, taking signals from `signals`
// meanwhile. nullopt when `work` returned (an exception it threw is rethrown here). The stop
// signal when one came first: the thread is then left behind, still running, and the caller
// ends the process with _exit(), since the thread may still use what `work` refers to. A
// reload signal meanwhile sets `*reload_asked` (when given): the files may have changed
// after `work` read them, so the caller reloads once it can (a reload asked while the
// config is first read is done after the start, not dropped).
std::optional<Signal> CallUnlessStopped(std::function<void()> work, SignalSource& signals,
                                        bool* reload_asked = nullptr);

}  // namespace xferd::platform
