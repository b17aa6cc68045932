#include "web/tls.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "platform/files.h"
#include "web/http_error.h"

namespace xferd::web {

TlsMaterial ReadTlsMaterial(const std::filesystem::path& cert_file,
                            const std::filesystem::path& key_file) {
  TlsMaterial tls;
  tls.cert_file = cert_file;
  tls.key_file = key_file;
  tls.cert_pem = platform::ReadFileBounded(cert_file, kMaxTlsFileBytes, "TLS certificate");
  tls.key_pem = platform::ReadFileBounded(key_file, kMaxTlsFileBytes, "TLS key");
  return tls;
}

void ValidateTlsMaterial(const TlsMaterial& tls) {
  auto datum = [](const std::string& s) {
    return gnutls_datum_t{reinterpret_cast<unsigned char*>(const_cast<char*>(s.data())),
                          static_cast<unsigned int>(s.size())};
  };
  const gnutls_datum_t cert_data = datum(tls.cert_pem);
  const gnutls_datum_t key_data = datum(tls.key_pem);

  gnutls_x509_crt_t* crts = nullptr;
  unsigned int n_crts = 0;
  int rc = gnutls_x509_crt_list_import2(&crts, &n_crts, &cert_data, GNUTLS_X509_FMT_PEM, 0);
  if (rc < 0 || n_crts == 0) {
    throw HttpError("TLS certificate " + tls.cert_file.string() + " is not a PEM certificate (" +
                        gnutls_strerror(rc) + ")",
                    "point cert_file at a PEM file starting with '-----BEGIN CERTIFICATE-----'");
  }
  for (unsigned int i = 0; i < n_crts; ++i) gnutls_x509_crt_deinit(crts[i]);
  gnutls_free(crts);

  gnutls_x509_privkey_t pkey = nullptr;
  gnutls_x509_privkey_init(&pkey);
  rc = gnutls_x509_privkey_import2(pkey, &key_data, GNUTLS_X509_FMT_PEM, nullptr, 0);
  gnutls_x509_privkey_deinit(pkey);
  if (rc < 0) {
    const bool encrypted = tls.key_pem.find("ENCRYPTED") != std::string::npos;
    throw HttpError(
        "TLS key " + tls.key_file.string() + " cannot be loaded (" + gnutls_strerror(rc) + ")",
        encrypted ? "encrypted keys are not supported: write an unencrypted copy readable only "
                    "by xferd (openssl pkey -in KEY -out NEW)"
                  : "point key_file at the PEM private key of the certificate");
  }

  gnutls_certificate_credentials_t cred = nullptr;
  gnutls_certificate_allocate_credentials(&cred);
  rc = gnutls_certificate_set_x509_key_mem2(cred, &cert_data, &key_data, GNUTLS_X509_FMT_PEM,
                                            nullptr, 0);
  gnutls_certificate_free_credentials(cred);
  if (rc < 0) {
    throw HttpError("TLS certificate " + tls.cert_file.string() + " and key " +
                        tls.key_file.string() + " do not fit together (" + gnutls_strerror(rc) +
                        ")",
                    "use the key the certificate was issued for");
  }
}

}  // namespace xferd::web
