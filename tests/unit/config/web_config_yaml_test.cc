// The exporter-toolkit web config (config/web_config_yaml.cc): TLS files and bcrypt users,
// relative paths, every refusal with the YAML's line, chains, FIFOs.
#include <sys/stat.h>

#include <string>

#include "unit/config/config_testing.h"
#include "web/web_config.h"

namespace xferd::config {

using namespace xferd::core;
namespace {

using namespace xferd::web;

class WebConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("server.crt", ReadAll(kDataDir / "tls" / "server.crt"));
    dir_.Write("server.key", ReadAll(kDataDir / "tls" / "server.key"));
  }
  ConfigError WebErrorOf(const std::string& yaml) {
    const auto file = dir_.Write("web.yml", yaml);
    try {
      LoadWebConfig(file);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.file(), file.string());
      return e;
    }
    ADD_FAILURE() << "no error for:\n" << yaml;
    return ConfigError("", 0, "", "", "");
  }
  TempDir dir_;
};

TEST_F(WebConfigTest, TlsAndUsersWithRelativePaths) {
  const auto file =
      dir_.Write("web.yml", std::string("# exporter-toolkit format\ntls_server_config:\n"
                                        "  cert_file: server.crt\n  key_file: ") +
                                (dir_.path() / "server.key").string() +
                                "\nbasic_auth_users:\n  prometheus: '" + kHash + "'\n");
  const WebConfig web = LoadWebConfig(file);
  EXPECT_TRUE(web.TlsEnabled());
  EXPECT_TRUE(web.AuthEnabled());
  EXPECT_EQ(web.tls->cert_file, dir_.path() / "server.crt");
  EXPECT_EQ(web.tls->key_file, dir_.path() / "server.key");
  EXPECT_EQ(web.basic_auth_users.at("prometheus"), kHash);
}

// A reload may not turn off TLS or basic auth by accident: the error names what would go
// and why; saying so on purpose (or keeping protection, other users) lets it through.
TEST_F(WebConfigTest, AReloadThatWouldDropProtectionIsRefusedNamingIt) {
  const auto tls = kDataDir / "tls";
  Config running;
  running.web_config_file = dir_.path() / "web.yml";
  running.web.tls = web::LoadTlsMaterial(tls / "server.crt", tls / "server.key");
  running.web.basic_auth_users["prometheus"] = kHash;
  const auto refusal = [&](const Config& next) -> std::string {
    try {
      CheckReloadKeepsProtection(running, next);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  Config next = running;
  EXPECT_EQ(refusal(next), "");
  next.web.basic_auth_users = {{"grafana", kHash}};  // other users: auth stays on
  EXPECT_EQ(refusal(next), "");
  next.web.basic_auth_users.clear();
  EXPECT_THAT(refusal(next), HasSubstr("web.yml: basic_auth_users: reload refused: it would "
                                       "turn off basic auth (1 user)"));
  next = running;
  next.web.tls.reset();
  EXPECT_THAT(refusal(next), HasSubstr("tls_server_config: reload refused: it would turn off "
                                       "TLS (" +
                                       (tls / "server.crt").string() + ")"));
  next.web = {};
  next.web_config_file.clear();
  next.source = dir_.path() / "xferd.toml";
  const std::string both = refusal(next);
  EXPECT_THAT(both, HasSubstr("xferd.toml: reload refused: it would turn off TLS"));
  EXPECT_THAT(both, HasSubstr("and basic auth (1 user)"));
  EXPECT_THAT(both, HasSubstr("no web config file is named now"));
  EXPECT_THAT(both, HasSubstr("reload_may_remove_protection = true"));
  next.reload_may_remove_protection = true;
  EXPECT_EQ(refusal(next), "");
  // What the running daemon does not have, a reload cannot take away.
  running.web = {};
  next.reload_may_remove_protection = false;
  EXPECT_EQ(refusal(next), "");
}

// exporter-toolkit takes an empty web config for plain HTTP; xferd refuses it as it refuses
// an empty TOML: an emptied or cut-short file (a failed copy) must never turn protection
// off. Serving without TLS and auth is done by naming no web config.
TEST_F(WebConfigTest, AFileThatTurnsNothingOnIsRefused) {
  for (const std::string text : {"", "\n\n", "# nothing\n", "---\n", "{}\n", "basic_auth_users:\n",
                                 "tls_server_config:\nbasic_auth_users: {}\n"}) {
    const ConfigError e = WebErrorOf(text);
    EXPECT_EQ(e.line(), 1) << text;
    EXPECT_THAT(e.what(), HasSubstr("turns on neither TLS nor basic auth")) << text;
    EXPECT_THAT(e.what(), HasSubstr("remove web.config_file")) << text;
  }
}

TEST_F(WebConfigTest, PlainTextPasswordIsRejectedWithHtpasswdFix) {
  const ConfigError e = WebErrorOf("basic_auth_users:\n  alice: hunter2\n");
  EXPECT_EQ(e.key(), "basic_auth_users.alice");
  EXPECT_EQ(e.line(), 2);
  EXPECT_THAT(e.what(), HasSubstr("not a bcrypt hash"));
  EXPECT_THAT(e.what(), HasSubstr("htpasswd -nBC 10 \"\" | tr -d ':\\n'"));
  // A truncated hash and an unsupported variant are no better.
  EXPECT_EQ(WebErrorOf(std::string("basic_auth_users:\n  bob: '") +
                       std::string(kHash).substr(0, 40) + "'\n")
                .line(),
            2);
  EXPECT_EQ(WebErrorOf("basic_auth_users:\n  bob: '$1$abc$def'\n").key(), "basic_auth_users.bob");
}

TEST_F(WebConfigTest, MissingCertFileNamesPathAndLine) {
  const ConfigError e =
      WebErrorOf("tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n");
  EXPECT_EQ(e.key(), "tls_server_config.cert_file");
  EXPECT_EQ(e.line(), 2);
  EXPECT_THAT(e.what(),
              HasSubstr((dir_.path() / "nope.crt").string() + ": No such file or directory"));
}

TEST_F(WebConfigTest, CertWithoutKeyIsRejected) {
  EXPECT_EQ(WebErrorOf("tls_server_config:\n  cert_file: server.crt\n").key(),
            "tls_server_config.key_file");
}

TEST_F(WebConfigTest, UnknownAndUnsupportedKeysAreRejected) {
  const ConfigError typo = WebErrorOf("basic_auth_user:\n  alice: x\n");
  EXPECT_EQ(typo.line(), 1);
  EXPECT_THAT(typo.what(), HasSubstr("did you mean basic_auth_users?"));
  EXPECT_EQ(WebErrorOf("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                       "  client_auth_type: RequireAndVerifyClientCert\n")
                .key(),
            "tls_server_config.client_auth_type");
  const ConfigError http = WebErrorOf("http_server_config:\n  http2: false\n");
  EXPECT_EQ(http.key(), "http_server_config");
  EXPECT_THAT(http.what(), HasSubstr("not supported"));
}

TEST_F(WebConfigTest, InvalidYamlNamesTheLine) {
  const ConfigError e = WebErrorOf("basic_auth_users:\n  alice: [unclosed\n");
  EXPECT_GT(e.line(), 0);
  EXPECT_THAT(e.what(), HasSubstr("not valid YAML"));
  EXPECT_EQ(WebErrorOf("- a\n- b\n").line(), 1);
}

TEST_F(WebConfigTest, LoadConfigReadsTheWebConfig) {
  dir_.Write("web.yml",
             std::string("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                         "basic_auth_users:\n  prometheus: '") +
                 kHash + "'\n");
  const auto file = dir_.Write("xferd.toml", "[web]\nconfig_file = \"web.yml\"\n");
  const Config c = LoadConfig(file);
  EXPECT_EQ(c.web_config_file, dir_.path() / "web.yml");
  EXPECT_TRUE(c.web.TlsEnabled());
}

TEST_F(WebConfigTest, AChainInOrderLoads) {
  const auto tls = kDataDir / "tls";
  const WebConfig web = LoadWebConfig(
      dir_.Write("web.yml", "tls_server_config:\n  cert_file: " + (tls / "chain.crt").string() +
                                "\n  key_file: " + (tls / "leaf.key").string() + "\n"));
  ASSERT_TRUE(web.TlsEnabled());
  EXPECT_NE(web.tls->cert_pem.find("-----BEGIN CERTIFICATE-----"), std::string::npos);
}

// A FIFO (or a socket) named as a file is refused at once, never waited on: a FIFO without
// a writer used to block the daemon in open(), at start and on SIGHUP.
TEST_F(WebConfigTest, FifosAreRefusedWithoutWaiting) {
  const auto fifo = dir_.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const ConfigError as_cert =
      WebErrorOf("tls_server_config:\n  cert_file: fifo\n  key_file: server.key\n");
  EXPECT_EQ(as_cert.key(), "tls_server_config.cert_file");
  EXPECT_THAT(as_cert.what(), HasSubstr("it is a FIFO, not a regular file"));
  const auto toml = dir_.Write("xferd.toml", "[web]\nconfig_file = \"fifo\"\n");
  try {
    LoadConfig(toml);
    ADD_FAILURE() << "loaded a FIFO as the web config";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "web.config_file");
    EXPECT_THAT(e.what(), HasSubstr("FIFO"));
  }
  try {
    LoadConfig(fifo);
    ADD_FAILURE() << "loaded a FIFO as the config";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("it is a FIFO, not a regular file"));
  }
}

}  // namespace
}  // namespace xferd::config
