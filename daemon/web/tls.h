// TLS material for the server: the certificate chain and key, read once from the files the
// web config names and checked in memory the way GnuTLS will load them, so that a bad file
// is a configuration error naming the file (exit 78, from `check-config` and `run` alike)
// instead of a server that does not start.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "platform/exit_codes.h"

namespace xferd::web {

// Made by LoadTlsMaterial only, which has checked it; the server serves it as it is.
struct TlsMaterial {
  std::filesystem::path cert_file, key_file;  // where they came from, for messages
  std::string cert_pem, key_pem;
};

// A chain of a few certificates is a few KiB, a key at most ~12 KiB (RSA 16384 in PEM):
// files larger than these are not what the web config meant.
inline constexpr std::size_t kMaxCertificateFileBytes = 256u << 10;
inline constexpr std::size_t kMaxKeyFileBytes = 64u << 10;

// Certificate and key that cannot serve TLS: DER instead of PEM, truncated, encrypted, out
// of order, or a key of another certificate. A configuration error; `file()` says which
// file of the two is at fault (a key that does not fit the certificate: the key).
class TlsMaterialError : public platform::Error {
 public:
  enum class File { kCertificate, kKey };
  TlsMaterialError(File file, std::string problem, std::string fix);
  File file() const { return file_; }
  const std::string& problem() const { return problem_; }  // names the file
  const std::string& fix() const { return fix_; }

 private:
  File file_;
  std::string problem_, fix_;
};

// Reads both files (platform::BoundedFile: regular files of at most the sizes above) and
// checks them (ValidateTlsMaterial). Throws platform::FileError naming a file that cannot
// be read, TlsMaterialError for one that cannot serve.
TlsMaterial LoadTlsMaterial(const std::filesystem::path& cert_file,
                            const std::filesystem::path& key_file);

// The checks LoadTlsMaterial makes, on material already in memory. Throws TlsMaterialError.
void ValidateTlsMaterial(const TlsMaterial& tls);

}  // namespace xferd::web
