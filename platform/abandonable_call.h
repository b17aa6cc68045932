// Work that can block where nothing can cancel it (a read from a hung network or FUSE file
// system waits in the kernel, uninterruptibly), run so that the caller still stops on
// SIGTERM: the daemon's main thread reads its files this way at start and on SIGHUP.
#pragma once

#include <signal.h>

#include <functional>

namespace xferd::platform {

// Runs `work` on a thread of its own and waits for it, taking the signals in `stop_signals`
// (which the caller has blocked) meanwhile. True when `work` returned (an exception it threw
// is rethrown here). False when one of the signals came first: `*signal` says which, and the
// thread is left behind, still running; the caller then ends the process with _exit(), since
// the thread may still use what `work` refers to.
bool CallUnlessStopped(std::function<void()> work, const sigset_t& stop_signals, int* signal);

}  // namespace xferd::platform
