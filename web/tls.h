// TLS material for the server: the certificate chain and key, read once from the files
// the web config names and checked in memory the way GnuTLS will load them, so a bad file
// is reported by name instead of as a server that does not start.
#pragma once

#include <filesystem>
#include <string>

namespace xferd::web {

struct TlsMaterial {
  std::filesystem::path cert_file, key_file;  // where they came from, for messages
  std::string cert_pem, key_pem;
};

// Config files of more than this are not certificates or keys.
inline constexpr std::size_t kMaxTlsFileBytes = 1u << 20;

// Reads both files (platform::ReadFileBounded). Throws platform::FileError naming the
// file that cannot be read.
TlsMaterial ReadTlsMaterial(const std::filesystem::path& cert_file,
                            const std::filesystem::path& key_file);

// Throws HttpError: not a PEM certificate, a key that cannot be loaded (encrypted?), or a
// key that is not the certificate's.
void ValidateTlsMaterial(const TlsMaterial& tls);

}  // namespace xferd::web
