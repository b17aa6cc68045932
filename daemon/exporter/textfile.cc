#include "exporter/textfile.h"

#include "platform/files.h"

namespace xferd::exporter {

void WriteTextfile(const std::filesystem::path& path, std::string_view content) {
  if (path.extension() != ".prom") {
    throw platform::FileError("cannot write", "textfile", path,
                              "it does not end in .prom, so node_exporter would never read it",
                              "name it like /var/lib/node_exporter/textfile_collector/xferd.prom",
                              0);
  }
  platform::WriteFileAtomically(path, content,
                                {"textfile", 0644, "[daemon] textfile_path",
                                 "node_exporter's --collector.textfile.directory"});
}

}  // namespace xferd::exporter
