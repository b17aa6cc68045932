// `xferd check-config` and the config errors of `xferd run`, run as a user runs them: the
// real binary on every file of the bad-config and bad-web-config corpora, the shipped
// example, and messages that stay one printable line whatever they quote.
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/fakes.h"

namespace xferd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::filesystem::path kDataDir = XFERD_TEST_DATA_DIR;
const std::filesystem::path kExample = kDataDir / ".." / ".." / "deploy" / "xferd.toml";
// A syntactically valid bcrypt hash (of "secret", cost 4).
constexpr const char* kHash = "$2b$04$aHyav/PGMFasSu1k8usBye249LsIcGIogrG34pf.Tv/ttTDmuphaK";

class TempDir : public fakes::TempDir {
 public:
  TempDir() : fakes::TempDir("cli") {
    // Traversable by the unprivileged user the unreadable-file test runs as.
    std::filesystem::permissions(path(), std::filesystem::perms::owner_all |
                                             std::filesystem::perms::group_exec |
                                             std::filesystem::perms::others_exec);
  }
};

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs the real xferd binary; as_nobody drops root to uid/gid 65534 first (permission
// checks do not apply to root).
RunResult RunXferd(const std::vector<std::string>& args, bool as_nobody = false) {
  TempDir io;
  const auto out_path = io.path() / "stdout";
  const auto err_path = io.path() / "stderr";
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::fopen(out_path.c_str(), "w");
    FILE* err = std::fopen(err_path.c_str(), "w");
    if (!out || !err) _exit(120);
    dup2(fileno(out), 1);
    dup2(fileno(err), 2);
    if (as_nobody && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
      _exit(121);
    std::vector<char*> argv;
    std::string binary = XFERD_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(122);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadAll(out_path);
  result.err = ReadAll(err_path);
  return result;
}

// What an error leaves on stderr is one line a terminal and the journal show as it is: no
// control characters, raw bytes or megabytes of echoed input, however bad the file.
void ExpectPrintableLine(const std::string& err, const std::string& what) {
  EXPECT_LT(err.size(), 2500u) << what;
  ASSERT_FALSE(err.empty()) << what;
  EXPECT_EQ(err.back(), '\n') << what;
  for (std::size_t i = 0; i + 1 < err.size(); ++i) {
    const auto c = static_cast<unsigned char>(err[i]);
    EXPECT_TRUE(c >= 0x20 && c != 0x7f) << what << ": byte " << int(c) << " at " << i;
  }
}

// A file of a bad-file corpus (tests/data/<dir>), as <dir>/expected.txt lists it: the key its
// error names ("-": none) and the line (0: none).
struct BadFile {
  std::string file, key;
  int line = 0;
};

std::vector<BadFile> Corpus(const std::string& dir) {
  std::ifstream in(kDataDir / dir / "expected.txt");
  std::vector<BadFile> corpus;
  std::string row;
  while (std::getline(in, row)) {
    if (row.empty() || row[0] == '#') continue;
    std::istringstream fields(row);
    BadFile bad;
    fields >> bad.file >> bad.key >> bad.line;
    corpus.push_back(bad);
  }
  return corpus;
}

// Every file in tests/data/<dir> has its line in expected.txt, and every line its file.
void ExpectEveryFileListed(const std::string& dir) {
  SCOPED_TRACE(dir);
  const auto corpus = Corpus(dir);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDataDir / dir)) {
    if (entry.path().filename() == "expected.txt") continue;
    ++files;
    const auto name = entry.path().filename().string();
    EXPECT_TRUE(
        std::any_of(corpus.begin(), corpus.end(), [&](const BadFile& b) { return b.file == name; }))
        << name << " has no line in expected.txt";
  }
  EXPECT_EQ(files, corpus.size());
}

TEST(BadConfigCorpus, EveryFileIsListedAndThereAreAtLeastThirty) {
  EXPECT_GE(Corpus("bad-configs").size(), 30u);
  ExpectEveryFileListed("bad-configs");
}

TEST(BadConfigCorpus, CheckConfigRejectsEachWithExit78NamingKeyAndLine) {
  for (const BadFile& bad : Corpus("bad-configs")) {
    const std::string path = (kDataDir / "bad-configs" / bad.file).string();
    const RunResult r = RunXferd({"check-config", path});
    EXPECT_EQ(r.exit_code, 78) << bad.file << "\n" << r.err;
    EXPECT_EQ(r.out, "") << bad.file;
    std::string where = path;
    if (bad.line > 0) where += ":" + std::to_string(bad.line);
    where += ": ";
    if (bad.key != "-") where += bad.key + ": ";
    EXPECT_THAT(r.err, StartsWith(where)) << bad.file;
    EXPECT_THAT(r.err, HasSubstr("; fix: ")) << bad.file;
    ExpectPrintableLine(r.err, bad.file);
  }
}

TEST(BadConfigCorpus, UnreadableFileExit78WithErrnoText) {
  TempDir dir;
  const auto file = dir.Write("xferd.toml", ReadAll(kExample));
  std::filesystem::permissions(file, std::filesystem::perms::none);
  // Root reads anything: check as an unprivileged user, as the daemon runs.
  const RunResult r = RunXferd({"check-config", file.string()}, geteuid() == 0);
  EXPECT_EQ(r.exit_code, 78) << r.err;
  EXPECT_THAT(r.err,
              StartsWith(file.string() + ": cannot read the file: Permission denied; fix: "));
}

TEST(CheckConfig, ShippedExamplePassesWithSummary) {
  const RunResult r = RunXferd({"check-config", kExample.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(kExample.string() + ": OK\n"));
  EXPECT_THAT(r.out, HasSubstr("interval:   1m"));
  EXPECT_THAT(r.out, HasSubstr("64MiB"));
  EXPECT_THAT(r.out, HasSubstr("TLS off, basic auth off"));
  // What the file costs a Prometheus (docs/metrics.md, "Series budget").
  EXPECT_THAT(r.out, HasSubstr("metrics:    full profile, 292 series per GPU on a typical path "
                               "(+6 on a multi-GPU host)\n"));
  EXPECT_EQ(r.err, "");
}

// The fleet profile: its count per GPU, and what a degraded mode and direction adds, in the
// summary and in --json.
TEST(CheckConfig, TheFleetProfileSaysWhatItCosts) {
  TempDir dir;
  const auto file = dir.path() / "fleet.toml";
  std::ofstream(file) << "[metrics]\nprofile = \"fleet\"\n";
  RunResult r = RunXferd({"check-config", file.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("metrics:    fleet profile, 44 series per GPU on a typical path "
                               "(+6 on a multi-GPU host), at most +6 per degraded mode and "
                               "direction\n"));
  r = RunXferd({"check-config", "--json", file.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"profile\": \"fleet\""));
  EXPECT_THAT(r.out, HasSubstr("\"per_gpu\": 44"));
}

// check-config loads the web config the file names, and an error inside the YAML names the
// YAML file and its line.
TEST(CheckConfig, ReportsTheWebConfigAndNamesTheYamlLine) {
  TempDir dir;
  dir.Write("server.crt", ReadAll(kDataDir / "tls" / "server.crt"));
  dir.Write("server.key", ReadAll(kDataDir / "tls" / "server.key"));
  dir.Write("web.yml",
            std::string("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                        "basic_auth_users:\n  prometheus: '") +
                kHash + "'\n");
  const auto file = dir.Write("xferd.toml", "[web]\nconfig_file = \"web.yml\"\n");
  const RunResult r = RunXferd({"check-config", file.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("TLS on, basic auth on"));
  // An error inside the YAML names the YAML file and its line.
  dir.Write("web.yml", "basic_auth_users:\n  prometheus: plaintext\n");
  const RunResult bad = RunXferd({"check-config", file.string()});
  EXPECT_EQ(bad.exit_code, 78);
  EXPECT_THAT(bad.err,
              StartsWith((dir.path() / "web.yml").string() + ":2: basic_auth_users.prometheus: "));
}

TEST(BadWebConfigCorpus, EveryFileIsListed) {
  ExpectEveryFileListed("bad-web-configs");
}

// check-config and run load the web config with the same function: both exit 78 with the
// same first words (a key that does not fit its certificate used to pass check-config and
// make run exit 71).
TEST(BadWebConfigCorpus, CheckConfigAndRunBothExit78NamingTheYamlLine) {
  TempDir dir;
  for (const BadFile& bad : Corpus("bad-web-configs")) {
    const auto yaml = std::filesystem::canonical(kDataDir / "bad-web-configs" / bad.file);
    const auto toml = dir.Write("xferd.toml", "[web]\nconfig_file = \"" + yaml.string() + "\"\n");
    std::string where = yaml.string() + ":" + std::to_string(bad.line) + ": ";
    if (bad.key != "-") where += bad.key + ": ";

    const RunResult check = RunXferd({"check-config", toml.string()});
    EXPECT_EQ(check.exit_code, 78) << bad.file << "\n" << check.err;
    EXPECT_THAT(check.err, StartsWith(where)) << bad.file;
    EXPECT_THAT(check.err, HasSubstr("; fix: ")) << bad.file;
    ExpectPrintableLine(check.err, bad.file);

    const RunResult run =
        RunXferd({"run", "--config", toml.string(), "--simulate", "--web.listen-address",
                  "127.0.0.1:0", "--state-dir", (dir.path() / "state").string()});
    EXPECT_EQ(run.exit_code, 78) << bad.file << "\n" << run.err;
    EXPECT_THAT(run.err, StartsWith("xferd: " + where)) << bad.file;
  }
}

// Whatever a message quotes (here a flag), what reaches stderr is escaped and capped.
TEST(ConfigErrors, EveryErrorLineIsPrintableFlagsToo) {
  const RunResult level =
      RunXferd({"run", "--log.level", "in\x1b[31mfo\n" + std::string(5000, 'x')});
  EXPECT_EQ(level.exit_code, 64) << level.err;
  ExpectPrintableLine(level.err, "--log.level");
  const RunResult address = RunXferd({"run", "--web.listen-address", "\x1b]0;pwned\x07:1"});
  EXPECT_EQ(address.exit_code, 64) << address.err;
  ExpectPrintableLine(address.err, "--web.listen-address");
}

}  // namespace
}  // namespace xferd
