// What every command says about itself and about a machine without a GPU, run as a user
// runs it: `--help` names the values of each flag that takes one of a set and the exit
// codes the docs give; the no-GPU error is one line that says the way out once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/diagnosis.h"
#include "integration/cli/run_xferd.h"
#include "platform/logging.h"
#include "testing/fakes.h"
#include "xferd/probes/types.h"

// A namespace of its own: the unity build puts this file in one unit with the other CLI
// tests, whose helpers have the same names.
namespace xferd::usage_test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using cli_testing::Result;

class Usage : public ::testing::Test {
 protected:
  Result Xferd(const std::string& args, const std::string& env = "") {
    return cli_testing::Xferd(dir_.path(), args, env);
  }

  // The help text of `flag` in `help`: from its line to the next flag's.
  static std::string FlagHelp(const std::string& help, const std::string& flag) {
    const std::size_t at = help.find("  " + flag + " ");
    if (at == std::string::npos) return "";
    return help.substr(at, help.find("\n  -", at + 1) - at);
  }

  // "a, b, c" -> {a, b, c}
  static std::vector<std::string> Names(const std::string& list) {
    std::vector<std::string> names;
    std::stringstream in(list);
    for (std::string name; std::getline(in, name, ',');) {
      names.push_back(name.substr(name.find_first_not_of(' ')));
    }
    return names;
  }

  // The codes listed after "Exit codes:" in a --help.
  static std::set<int> HelpCodes(const std::string& help) {
    std::set<int> codes;
    const std::size_t at = help.find("Exit codes:");
    if (at == std::string::npos) return codes;
    static const std::regex kCode("\n  ([0-9]+) ");
    const std::string tail = help.substr(at);
    for (auto it = std::sregex_iterator(tail.begin(), tail.end(), kCode);
         it != std::sregex_iterator(); ++it) {
      codes.insert(std::stoi((*it)[1].str()));
    }
    return codes;
  }

  static std::string ReadDoc(const std::string& name) {
    std::ifstream in(fs::path(XFERD_TEST_DATA_DIR) / ".." / ".." / "docs" / name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  fakes::TempDir dir_{"usage"};
};

// Every flag that takes one of a set of names lists them all, from the list the command
// checks the value against.
TEST_F(Usage, EveryFlagThatTakesANameListsTheNames) {
  struct EnumFlag {
    const char* command;
    const char* flag;
    std::vector<std::string> names;
  };
  std::vector<std::string> causes;
  for (core::DiagnosisCause c : core::kAllDiagnosisCauses) {
    causes.emplace_back(core::ToString(c));
  }
  const EnumFlag flags[] = {
      {"probe", "--mode", Names(probes::AllModeNames())},
      {"run", "--log.level", Names(platform::kLogLevelNames)},
      {"health", "--cause", causes},
  };
  for (const EnumFlag& f : flags) {
    const Result r = Xferd(std::string(f.command) + " --help");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string help = FlagHelp(r.out, f.flag);
    ASSERT_FALSE(help.empty()) << f.command << " --help has no " << f.flag << ":\n" << r.out;
    ASSERT_GE(f.names.size(), 3u);
    for (const std::string& name : f.names) {
      EXPECT_THAT(help, HasSubstr(name)) << f.command << " " << f.flag;
    }
  }
}

// Each command's --help ends with its exit codes; run's and probe's are the ones their docs
// give, and run's names the signals it takes.
TEST_F(Usage, EveryCommandsHelpGivesItsExitCodes) {
  const std::string service = ReadDoc("service.md");
  std::smatch sentence;
  ASSERT_TRUE(std::regex_search(service, sentence, std::regex("Exit codes: ([^.]*)\\.")));
  std::set<int> run_doc;
  const std::string run_text = sentence[1].str();
  static const std::regex kNumber("(^|, )([0-9]+) ");
  for (auto it = std::sregex_iterator(run_text.begin(), run_text.end(), kNumber);
       it != std::sregex_iterator(); ++it) {
    run_doc.insert(std::stoi((*it)[2].str()));
  }
  const std::string probe_md = ReadDoc("probe.md");
  const std::string table = probe_md.substr(probe_md.find("## Exit codes"));
  std::set<int> probe_doc;
  static const std::regex kRow("\n\\| ([0-9]+) \\|");
  for (auto it = std::sregex_iterator(table.begin(), table.end(), kRow);
       it != std::sregex_iterator(); ++it) {
    probe_doc.insert(std::stoi((*it)[1].str()));
  }
  ASSERT_GE(run_doc.size(), 5u) << run_text;
  ASSERT_GE(probe_doc.size(), 5u);

  const Result run = Xferd("run --help");
  EXPECT_EQ(HelpCodes(run.out), run_doc) << run.out;
  for (const char* signal : {"SIGHUP", "SIGTERM", "SIGINT"}) {
    EXPECT_THAT(run.out, HasSubstr(signal));
  }
  EXPECT_EQ(HelpCodes(Xferd("probe --help").out), probe_doc);
  EXPECT_EQ(HelpCodes(Xferd("check-config --help").out), (std::set<int>{0, 64, 70, 78}));
  EXPECT_EQ(HelpCodes(Xferd("health --help").out), (std::set<int>{0, 1, 2, 64}));
  EXPECT_EQ(HelpCodes(Xferd("evidence --help").out), (std::set<int>{0, 1, 64, 78}));
  EXPECT_EQ(HelpCodes(Xferd("faults --help").out), (std::set<int>{0}));
  EXPECT_EQ(HelpCodes(Xferd("version --help").out), (std::set<int>{0}));
  // status: the table of docs/operations.md's section on it.
  const std::string operations = ReadDoc("operations.md");
  const std::size_t at = operations.find("## At a glance: the status page and `xferd status`");
  ASSERT_NE(at, std::string::npos);
  const std::string section = operations.substr(at, operations.find("\n## ", at + 1) - at);
  std::set<int> status_doc;
  static const std::regex kExitRow("\n\\| ([0-9]+) \\|");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), kExitRow);
       it != std::sregex_iterator(); ++it) {
    status_doc.insert(std::stoi((*it)[1].str()));
  }
  EXPECT_EQ(status_doc, (std::set<int>{0, 1, 2, 64}));
  EXPECT_EQ(HelpCodes(Xferd("status --help").out), status_doc);
}

// Every command `xferd --help` lists ends its own --help with its exit codes: a command
// added later cannot leave them out.
TEST_F(Usage, EveryListedCommandHasExitCodes) {
  const Result top = Xferd("--help");
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const std::size_t at = top.out.find("Subcommands:");
  ASSERT_NE(at, std::string::npos) << top.out;
  static const std::regex kCommand("\n  ([a-z][a-z-]*) ");
  std::set<std::string> commands;
  const std::string list = top.out.substr(at);
  for (auto it = std::sregex_iterator(list.begin(), list.end(), kCommand);
       it != std::sregex_iterator(); ++it) {
    commands.insert((*it)[1].str());
  }
  for (const char* known : {"run", "probe", "check-config", "health", "status", "version"}) {
    EXPECT_EQ(commands.count(known), 1u) << known << " not listed:\n" << top.out;
  }
  for (const std::string& command : commands) {
    const Result help = Xferd(command + " --help");
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_FALSE(HelpCodes(help.out).empty()) << command << " --help gives no exit codes";
  }
}

// No GPU to probe (CUDA_VISIBLE_DEVICES hides every GPU where there are some): exit 69 and
// one line on stderr that names the cause and says once how to try the simulated device,
// with nothing escaped that xferd wrote itself.
TEST_F(Usage, NoGpuIsOneLineThatSaysTheWayOutOnce) {
  const std::string state = (dir_.path() / "state").string();
  const std::string run_flags =
      " --state-dir '" + state + "' --web.listen-address 127.0.0.1:0 --log.level warn";
  for (const std::string command : {"probe", "run"}) {
    const Result r = Xferd(command + (command == "run" ? run_flags : ""), "CUDA_VISIBLE_DEVICES=");
    EXPECT_EQ(r.exit_code, 69) << command << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    ASSERT_FALSE(r.err.empty());
    const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
    // "no NVIDIA driver / GPU found (...)", or in a build without CUDA "no NVIDIA GPU can be
    // probed: this xferd was built without the CUDA backend ...".
    EXPECT_THAT(last, HasSubstr("no NVIDIA ")) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("\\x"))) << r.err;
    EXPECT_EQ(r.err.find("--simulate"), r.err.rfind("--simulate")) << "said twice: " << r.err;
    EXPECT_THAT(last, HasSubstr("`xferd " + command + " --simulate`")) << r.err;
  }
}

}  // namespace
}  // namespace xferd::usage_test
