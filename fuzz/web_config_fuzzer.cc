// libFuzzer target: arbitrary bytes as the exporter-toolkit web-config YAML. A ConfigError
// is the expected answer; anything else escaping (another exception, a crash, a sanitizer
// report, a hang) is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // LoadWebConfig reads a file: hand it the bytes through an in-memory one.
  const int fd = memfd_create("web-config.yml", MFD_CLOEXEC);
  if (fd < 0) __builtin_trap();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) __builtin_trap();
    done += static_cast<std::size_t>(n);
  }
  try {
    const xferd::config::WebConfig web =
        xferd::config::LoadWebConfig("/proc/self/fd/" + std::to_string(fd));
    // What loaded must be what validation promised.
    if (web.tls && (web.tls->cert_file.empty() || web.tls->key_file.empty())) __builtin_trap();
    for (const auto& [user, hash] : web.basic_auth_users) {
      if (user.empty() || hash.size() != 60 || hash[0] != '$') __builtin_trap();
    }
  } catch (const xferd::config::ConfigError&) {
  }
  close(fd);
  return 0;
}
