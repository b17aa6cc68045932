// TLS material read and checked once, when loaded: a clear error naming the file and the
// fix, as a configuration error, before any server starts.
#include "web/tls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "platform/exit_codes.h"
#include "platform/files.h"
#include "testing/fakes.h"

namespace xferd::web {
namespace {

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(TlsMaterial, BadFilesAreClearErrors) {
  fakes::TempDir dir("http");
  const auto cert = dir.path() / "cert.pem";
  const auto key = dir.path() / "key.pem";
  WriteFile(cert, "this is not a certificate\n");
  WriteFile(key, "nor a key\n");
  // Refused when loaded, as a configuration error (exit 78), before any server starts.
  try {
    LoadTlsMaterial(cert, key);
    ADD_FAILURE() << "loaded " << cert << " / " << key;
  } catch (const TlsMaterialError& e) {
    EXPECT_EQ(e.file(), TlsMaterialError::File::kCertificate);
    EXPECT_NE(std::string(e.what()).find(cert.string() + " holds no PEM certificate"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("fix:"), std::string::npos) << e.what();
    EXPECT_EQ(e.failure(), platform::Failure::kConfig);
  }
  // A file that cannot be read is named when it is read, once, before any server starts.
  const auto missing = dir.path() / "missing.pem";
  try {
    LoadTlsMaterial(missing, key);
    ADD_FAILURE() << "read " << missing;
  } catch (const platform::FileError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read TLS certificate " + missing.string()),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("fix:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xferd::web
