#include "web/tls.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include <memory>
#include <string>
#include <utility>

#include "platform/files.h"
#include "platform/printable.h"

namespace xferd::web {
namespace {

using File = TlsMaterialError::File;

gnutls_datum_t Datum(const std::string& s) {
  return gnutls_datum_t{reinterpret_cast<unsigned char*>(const_cast<char*>(s.data())),
                        static_cast<unsigned int>(s.size())};
}

// DER is binary: an ASN.1 SEQUENCE (0x30) with no PEM armour anywhere.
bool LooksLikeDer(const std::string& data) {
  return !data.empty() && static_cast<unsigned char>(data[0]) == 0x30 &&
         data.find("-----BEGIN") == std::string::npos;
}

bool Has(const std::string& data, const char* text) {
  return data.find(text) != std::string::npos;
}

// Throws the TlsMaterialError of `file`, named as `what` ("TLS key /etc/..."): `problem`
// follows the name. The first check of both files: DER where PEM belongs.
class PemCheck {
 public:
  PemCheck(File file, std::string what) : file_(file), what_(std::move(what)) {}
  [[noreturn]] void Fail(const std::string& problem, std::string fix) const {
    throw TlsMaterialError(file_, what_ + " " + problem, std::move(fix));
  }
  void RefuseDer(const std::string& pem, const char* openssl_command) const {
    if (LooksLikeDer(pem)) {
      Fail("is DER (binary), not PEM",
           std::string("convert it: ") + openssl_command + ", and name the .pem file");
    }
  }

 private:
  File file_;
  std::string what_;
};

std::string Shown(const std::filesystem::path& path) {
  return platform::PrintablePath(path.string(), 512);
}

void CheckCertificate(const TlsMaterial& tls) {
  const PemCheck check(File::kCertificate, "TLS certificate " + Shown(tls.cert_file));
  const auto fail = [&](const std::string& problem, std::string fix) {
    check.Fail(problem, std::move(fix));
  };
  check.RefuseDer(tls.cert_pem, "openssl x509 -inform DER -in CERT -out CERT.pem");
  if (!Has(tls.cert_pem, "-----BEGIN CERTIFICATE-----")) {
    fail(Has(tls.cert_pem, "PRIVATE KEY-----") ? "holds a private key, not a certificate"
                                               : "holds no PEM certificate",
         "point cert_file at the PEM certificate (starting with '-----BEGIN CERTIFICATE-----'), "
         "and key_file at its key");
  }
  const gnutls_datum_t data = Datum(tls.cert_pem);
  gnutls_x509_crt_t* crts = nullptr;
  unsigned int count = 0;
  // The server's certificate first, then each issuer: what GnuTLS sends and what clients
  // expect; a chain in another order fails for some clients only, so it is refused here.
  const int rc = gnutls_x509_crt_list_import2(&crts, &count, &data, GNUTLS_X509_FMT_PEM,
                                              GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED);
  for (unsigned int i = 0; i < count; ++i) gnutls_x509_crt_deinit(crts[i]);
  gnutls_free(crts);
  if (rc == GNUTLS_E_CERTIFICATE_LIST_UNSORTED) {
    fail("holds a chain out of order",
         "put the server's certificate first, then the certificate that issued it, and so on "
         "up (the root CA may be left out)");
  }
  if (rc < 0 || count == 0) {
    const bool truncated = !Has(tls.cert_pem, "-----END CERTIFICATE-----");
    fail(std::string(truncated ? "is cut short (no '-----END CERTIFICATE-----')"
                               : "is not a valid PEM certificate") +
             " (" + gnutls_strerror(rc) + ")",
         "copy the whole certificate file again, from '-----BEGIN CERTIFICATE-----' to "
         "'-----END CERTIFICATE-----'");
  }
}

void CheckKey(const TlsMaterial& tls) {
  const PemCheck check(File::kKey, "TLS key " + Shown(tls.key_file));
  const auto fail = [&](const std::string& problem, std::string fix) {
    check.Fail(problem, std::move(fix));
  };
  check.RefuseDer(tls.key_pem, "openssl pkey -inform DER -in KEY -out KEY.pem");
  if (Has(tls.key_pem, "ENCRYPTED")) {
    fail("is encrypted (protected by a passphrase), which xferd cannot ask for",
         "write an unencrypted copy readable only by xferd: openssl pkey -in KEY -out NEW "
         "(chmod 0600, owner xferd)");
  }
  if (!Has(tls.key_pem, "PRIVATE KEY-----")) {
    fail(Has(tls.key_pem, "-----BEGIN CERTIFICATE-----") ? "holds a certificate, not a key"
                                                         : "holds no PEM private key",
         "point key_file at the PEM private key of the certificate (starting with "
         "'-----BEGIN PRIVATE KEY-----' or '-----BEGIN RSA/EC PRIVATE KEY-----')");
  }
  gnutls_x509_privkey_t key = nullptr;
  if (gnutls_x509_privkey_init(&key) < 0) fail("cannot be checked (out of memory)", "retry");
  const gnutls_datum_t data = Datum(tls.key_pem);
  const int rc = gnutls_x509_privkey_import2(key, &data, GNUTLS_X509_FMT_PEM, nullptr, 0);
  gnutls_x509_privkey_deinit(key);
  if (rc < 0) {
    const bool truncated = !Has(tls.key_pem, "-----END ");
    fail(std::string(truncated ? "is cut short (no '-----END ... PRIVATE KEY-----')"
                               : "cannot be loaded") +
             " (" + gnutls_strerror(rc) + ")",
         "copy the whole key file again, or make a new key and certificate");
  }
}

}  // namespace

TlsMaterialError::TlsMaterialError(File file, std::string problem, std::string fix)
    : platform::Error(platform::Failure::kConfig, problem + "; fix: " + fix),
      file_(file),
      problem_(std::move(problem)),
      fix_(std::move(fix)) {}

void ValidateTlsMaterial(const TlsMaterial& tls) {
  CheckCertificate(tls);
  CheckKey(tls);
  // Both load on their own; now whether the key is the certificate's, as the server will
  // load them.
  gnutls_certificate_credentials_t credentials = nullptr;
  if (gnutls_certificate_allocate_credentials(&credentials) < 0) {
    throw TlsMaterialError(File::kKey, "TLS credentials cannot be checked", "retry");
  }
  const gnutls_datum_t cert = Datum(tls.cert_pem);
  const gnutls_datum_t key = Datum(tls.key_pem);
  const int rc = gnutls_certificate_set_x509_key_mem2(credentials, &cert, &key, GNUTLS_X509_FMT_PEM,
                                                      nullptr, 0);
  gnutls_certificate_free_credentials(credentials);
  if (rc < 0) {
    throw TlsMaterialError(File::kKey,
                           "TLS key " + Shown(tls.key_file) + " is not the key of certificate " +
                               Shown(tls.cert_file) + " (" + gnutls_strerror(rc) + ")",
                           "use the key the certificate was issued for (compare: openssl x509 "
                           "-noout -pubkey -in CERT and openssl pkey -pubout -in KEY)");
  }
}

TlsMaterial LoadTlsMaterial(const std::filesystem::path& cert_file,
                            const std::filesystem::path& key_file) {
  TlsMaterial tls;
  tls.cert_file = cert_file;
  tls.key_file = key_file;
  tls.cert_pem = platform::ReadFileBounded(cert_file, kMaxCertificateFileBytes, "TLS certificate");
  tls.key_pem = platform::ReadFileBounded(key_file, kMaxKeyFileBytes, "TLS key");
  ValidateTlsMaterial(tls);
  return tls;
}

}  // namespace xferd::web
