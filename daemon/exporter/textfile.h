// node_exporter textfile output: the exposition written where node_exporter's textfile
// collector reads it, replaced atomically so a scrape never sees half a file.
#pragma once

#include <filesystem>
#include <string_view>

namespace xferd::exporter {

// Writes `content` to `path` (which must end in ".prom", the only files node_exporter
// reads) with platform::WriteFileAtomically, made 0644 (node_exporter runs as another
// user). On any failure (disk full, directory missing or not writable) the previous file
// is untouched and platform::FileError names the cause and the fix.
void WriteTextfile(const std::filesystem::path& path, std::string_view content);

}  // namespace xferd::exporter
