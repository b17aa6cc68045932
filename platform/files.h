// The one way xferd reads a file and the one way it replaces one.
//
// Reading: every file xferd reads (config, web config, TLS material, state, sysfs, procfs)
// goes through BoundedFile (ReadFileBounded reads one whole), so each is checked the same
// way: a regular file (a FIFO, a device, a socket or a directory is refused before it is
// opened, and again on the open descriptor; the open is non-blocking, so a FIFO swapped in
// between never hangs the daemon), at most the size the caller expects (checked on the size
// the file reports before anything is read, and again while reading, for files that grow or
// report no size), and an error that names the file, the cause and the fix. The sizes each
// kind of file may have are documented in docs/reliability.md. A read can still block where
// the file system itself hangs (a dead NFS server); the daemon does such reads where it can
// abandon them (platform/abandonable_call.h). Writing: WriteFileAtomically replaces a file
// so that a reader (or a crash) sees the old content or the new, never a mix.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "platform/exit_codes.h"

namespace xferd::platform {

class FileError : public Error {
 public:
  // what(): "<verb> <what> <path>: <cause>; fix: <fix>".
  FileError(std::string_view verb, std::string_view what, std::filesystem::path path,
            std::string cause, std::string fix, int error);
  const std::filesystem::path& path() const { return path_; }
  const std::string& cause() const { return cause_; }  // strerror's text for OS errors
  const std::string& fix() const { return fix_; }
  int error() const { return error_; }  // errno; 0 when no system call failed

 private:
  std::filesystem::path path_;
  std::string cause_, fix_;
  int error_;
};

// An open regular file of at most `max_bytes`, read piece by piece: for files parsed as a
// stream (the state file), so that memory follows what is kept, not the file's size.
class BoundedFile {
 public:
  // Throws FileError: cannot be opened, not a regular file, or larger than `max_bytes`.
  BoundedFile(const std::filesystem::path& path, std::size_t max_bytes, std::string_view what);
  ~BoundedFile();
  BoundedFile(const BoundedFile&) = delete;
  BoundedFile& operator=(const BoundedFile&) = delete;

  // Up to `size` bytes into `buffer`; 0 at the end of the file. Throws FileError on a read
  // error or when the file turns out larger than `max_bytes` (it grew since it was opened).
  std::size_t Read(char* buffer, std::size_t size);
  std::size_t bytes_read() const { return done_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::string what_;
  std::size_t max_bytes_;
  std::size_t done_ = 0;
  int fd_ = -1;
};

// Whether a file holds a secret (a password): a secret others may read, or its group may
// change, is refused as ssh refuses such a private key, and every fix says 0600 or 0640,
// never a mode that lets every user read it.
enum class Secrecy { kPublic, kSecret };
// A small file kept open and read again from its start at every reading: the sysfs
// attributes the link watch polls every second (current_link_speed, current_link_width),
// where opening the file costs more than reading it (docs/performance.md, "The link
// watch"). Opened once with the checks every read makes (a regular file, looked at before
// opening, opened non-blocking, at most `max_bytes`); each reading is then one pread from
// offset 0 of at most `max_bytes` + 1 bytes, which sysfs answers with the attribute's value
// as it is now. A reading past `max_bytes` is refused (the file grew into something else).
// A file replaced by another (rename) keeps being read as the old one: sysfs attributes
// never are; the caller opens it again when a reading fails.
class PolledFile {
 public:
  // Throws FileError: cannot be opened, not a regular file, or larger than `max_bytes`.
  PolledFile(const std::filesystem::path& path, std::size_t max_bytes);
  ~PolledFile();
  PolledFile(const PolledFile&) = delete;
  PolledFile& operator=(const PolledFile&) = delete;

  // The file's content now, valid until the next Read; nullopt when the read failed (the
  // device is gone: ENODEV, EIO) or returned more than `max_bytes`, with `problem()` saying
  // which.
  std::optional<std::string_view> Read();
  const std::string& problem() const { return problem_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::size_t max_bytes_;
  int fd_ = -1;
  std::string buffer_;
  std::string problem_;
};

// Whether a symbolic link at the path is followed (a config file may well be one) or
// refused (the files xferd wrote itself and reads back from its own directory: the
// evidence records; a link there is not ours, and never leads a read elsewhere).
enum class Links { kFollow, kRefuse };

// The whole of `path`, at most `max_bytes`. `what` names the file in messages ("config
// file", "TLS certificate"). Throws FileError.
std::string ReadFileBounded(const std::filesystem::path& path, std::size_t max_bytes,
                            std::string_view what = "file", Secrecy secrecy = Secrecy::kPublic,
                            Links links = Links::kFollow);

// The same for files whose absence or unreadability is an answer, not an error (sysfs
// attributes, procfs): nullopt instead of an exception.
std::optional<std::string> TryReadFileBounded(const std::filesystem::path& path,
                                              std::size_t max_bytes);

struct AtomicWrite {
  std::string what = "file";  // names the file in messages: "state file", "textfile"
  mode_t mode = 0644;
  // What the operator changes to put the file elsewhere ("[daemon] textfile_path").
  std::string setting;
  // How the directory is usually made writable ("systemd: StateDirectory=xferd").
  std::string writable_hint;
};

// Replaces `path` with `content`: a temporary file in the same directory (named
// AtomicTempPrefix(path) + 6 random characters), written, fsynced, given `mode` (or less:
// no permission bit the regular file being replaced lacks, and that file's group; a
// symbolic link at `path` is replaced itself, never written through, and lends nothing),
// renamed over `path`, the directory fsynced. On failure the temporary file is removed, `path` is
// as it was, and FileError names the step, the cause and a fix.
void WriteFileAtomically(const std::filesystem::path& path, std::string_view content,
                         const AtomicWrite& how);

// ".<filename>.tmp.": hidden, and without the file's extension, so that a reader that
// picks files by extension (node_exporter's *.prom) never sees a half-written one.
std::string AtomicTempPrefix(const std::filesystem::path& path);

// Removes the temporary files that writes of `path` interrupted by a crash (kill -9, power
// loss) left in its directory, and only those that are provably ours: named
// AtomicTempPrefix(path) and the 6 characters mkstemp adds, a regular file (not a link),
// owned by this process's user, and not locked: WriteFileAtomically holds an flock on its
// temporary file from right after creating it until it is renamed or removed, so a file
// nobody holds is one whose writer is gone. Returns how many were removed; a directory that
// cannot be read removes none.
std::size_t RemoveAbandonedTempFiles(const std::filesystem::path& path);
// The same for every file of directory `dir` whose name `ours` accepts (files written under
// names of their own, such as the evidence records): the same checks, one sweep.
std::size_t RemoveAbandonedTempFiles(const std::filesystem::path& dir,
                                     const std::function<bool(std::string_view)>& ours);

// Names for files set aside, which must never replace one another (two corrupt state files
// in one second used to share one name): "<path>.<tag>-<UTC time>", and ".2", ".3", ...
// after it when that is taken. Both throw FileError naming the step and the cause.
//
// MoveAside renames `path` to such a name, never over an existing file, and returns it.
std::filesystem::path MoveAside(const std::filesystem::path& path, std::string_view tag,
                                std::chrono::system_clock::time_point now);
// KeepCopy leaves `path` where it is and keeps its content under such a name: a hard link
// (no byte copied, whatever its size; a later atomic replacement of `path` leaves it
// whole), or a copy where the file system has no hard links. Returns the name.
std::filesystem::path KeepCopy(const std::filesystem::path& path, std::string_view tag,
                               std::chrono::system_clock::time_point now);

}  // namespace xferd::platform
