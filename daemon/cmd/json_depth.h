// How deep a JSON text nests, read before any DOM is built of it: the commands that read
// JSON from outside (the daemon's status document, the evidence records on disk) refuse a
// text nested far deeper than the one they read, rather than build a million levels.
#pragma once

#include <string_view>

namespace xferd::cmd {

// Whether `text` opens more than `limit` objects and arrays inside each other; brackets
// inside strings (escapes included) do not count. Says nothing of whether it is valid JSON.
bool JsonNestsDeeperThan(std::string_view text, int limit);

}  // namespace xferd::cmd
