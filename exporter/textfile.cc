#include "exporter/textfile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace xferd::exporter {
namespace {

std::string FixFor(int err, const std::filesystem::path& dir) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return "free space on the file system of " + dir.string();
    case EACCES:
    case EPERM:
    case EROFS:
      return "let the xferd user write to " + dir.string() +
             " (node_exporter's --collector.textfile.directory), or change textfile_path";
    case ENOENT:
    case ENOTDIR:
      return "create the directory " + dir.string() + " or change textfile_path";
    default:
      return "check " + dir.string();
  }
}

[[noreturn]] void Fail(const std::filesystem::path& path, const std::filesystem::path& dir,
                       const char* step, int err) {
  throw TextfileError("cannot write textfile " + path.string() + " (" + step + ": " +
                      std::strerror(err) + "); the previous file is kept; fix: " +
                      FixFor(err, dir));
}

}  // namespace

void WriteTextfile(const std::filesystem::path& path, std::string_view content) {
  if (path.extension() != ".prom") {
    throw TextfileError("textfile " + path.string() +
                        " does not end in .prom, so node_exporter would never read it; fix: "
                        "name it like /var/lib/node_exporter/textfile_collector/xferd.prom");
  }
  const std::filesystem::path dir =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  // A leading dot and no .prom suffix: node_exporter skips it while it is being written.
  std::string temp = (dir / ("." + path.filename().string() + ".XXXXXX")).string();
  std::vector<char> name(temp.begin(), temp.end());
  name.push_back('\0');
  const int fd = mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) Fail(path, dir, "create a temporary file", errno);
  temp.assign(name.data());

  auto abandon = [&](const char* step, int err) {
    close(fd);
    unlink(temp.c_str());
    Fail(path, dir, step, err);
  };

  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  if (fchmod(fd, 0644) != 0) abandon("chmod", errno);
  if (fsync(fd) != 0) abandon("fsync", errno);
  if (close(fd) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    Fail(path, dir, "close", err);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    Fail(path, dir, "rename", err);
  }
  // The rename is durable only once the directory is: a crash must not bring back the old file.
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
}

}  // namespace xferd::exporter
