// node_exporter textfile output: the exposition written where node_exporter's textfile
// collector reads it, replaced atomically so a scrape never sees half a file.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string_view>

namespace xferd::exporter {

// The file could not be written; the previous one, if any, is untouched.
class TextfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `content` to `path` (which must end in ".prom", the only files node_exporter
// reads): a temporary file in the same directory, written, fsynced, made 0644 (node_exporter
// runs as another user), renamed over `path`, the directory fsynced. On any failure (disk
// full, directory missing or not writable) the temporary file is removed and TextfileError
// names the cause and the fix.
void WriteTextfile(const std::filesystem::path& path, std::string_view content);

}  // namespace xferd::exporter
