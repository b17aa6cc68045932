// Runs a command under the kernel's W^X: prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)
// (Linux >= 6.3) refuses writable+executable mappings and making a mapping executable
// later, for this process and every program it execs. It is what systemd's
// MemoryDenyWriteExecute=yes applies (by this prctl from systemd 255 on, by a seccomp
// filter with the same effect before), without needing systemd as PID 1.
//
//   xferd_mdwe_exec COMMAND [ARGS...]   exit 125: the kernel lacks it; 126/127: exec failed
//   xferd_mdwe_exec --self-test         exit 0 when W^X holds after an exec (a W+X mmap is
//                                       refused), 1 when it does not
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

// Linux 6.3 UAPI; older headers (Debian 12's are 6.1) lack the names.
#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_GET_MDWE 66
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

namespace {

int TryWritableExecutableMapping() {
  void* p =
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::printf("W^X holds after exec: a W+X mmap is refused (%s)\n", std::strerror(errno));
    return 0;
  }
  munmap(p, 4096);
  std::printf("W^X does not hold after exec: a W+X mmap succeeded\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--try-wx") == 0) return TryWritableExecutableMapping();
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s COMMAND [ARGS...] | --self-test\n", argv[0]);
    return 64;
  }
  if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0L, 0L, 0L) != 0 ||
      (prctl(PR_GET_MDWE, 0L, 0L, 0L, 0L) & PR_MDWE_REFUSE_EXEC_GAIN) == 0) {
    std::fprintf(stderr, "xferd_mdwe_exec: prctl(PR_SET_MDWE): %s (needs Linux 6.3 or later)\n",
                 std::strerror(errno));
    return 125;
  }
  if (std::strcmp(argv[1], "--self-test") == 0) {
    execl("/proc/self/exe", argv[0], "--try-wx", static_cast<char*>(nullptr));
  } else {
    execvp(argv[1], argv + 1);
  }
  const int err = errno;
  std::fprintf(stderr, "xferd_mdwe_exec: exec %s: %s\n", argv[1], std::strerror(err));
  return err == ENOENT ? 127 : 126;
}
