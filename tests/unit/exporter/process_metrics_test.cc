// process_* metrics from procfs: parsing on a fake procfs, and sanity on the real one.
#include "exporter/process_metrics.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "exporter/exposition.h"

namespace xferd::exporter {

namespace {

std::map<std::string, double> Values(const ProcessMetrics& metrics) {
  std::map<std::string, double> out;
  for (const auto& family : metrics.Collect()) {
    EXPECT_EQ(family.metric.size(), 1u) << family.name;
    const auto& m = family.metric.at(0);
    out[family.name] =
        family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return out;
}

class FakeProc {
 public:
  FakeProc() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xferd-proc-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
    std::filesystem::create_directories(root_ / "4242" / "fd");
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  const std::filesystem::path& root() const { return root_; }
  void Write(const std::string& relative, const std::string& text) {
    std::ofstream(root_ / relative) << text;
  }

 private:
  std::filesystem::path root_;
};

TEST(ProcessMetrics, ParsesAFakeProcfs) {
  FakeProc proc;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // The command name holds spaces and parentheses, as a process may name itself.
  proc.Write("4242/stat",
             "4242 (xferd (probe) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 "
             "250 50 0 0 20 0 7 0 1000 123456789 2048 18446744073709551615 "
             "1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n");
  proc.Write("stat", "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n");
  proc.Write("4242/limits",
             "Limit                     Soft Limit           Hard Limit           Units     \n"
             "Max cpu time              unlimited            unlimited            seconds   \n"
             "Max open files            4096                 524288               files     \n");
  for (int fd : {0, 1, 2, 7, 9}) proc.Write("4242/fd/" + std::to_string(fd), "");

  const auto values = Values(ProcessMetrics(proc.root(), "4242"));
  EXPECT_DOUBLE_EQ(values.at("process_cpu_seconds_total"), 300 / ticks);
  EXPECT_DOUBLE_EQ(values.at("process_virtual_memory_bytes"), 123456789);
  EXPECT_DOUBLE_EQ(values.at("process_resident_memory_bytes"), 2048 * page);
  EXPECT_DOUBLE_EQ(values.at("process_start_time_seconds"), 1700000000 + 1000 / ticks);
  EXPECT_DOUBLE_EQ(values.at("xferd_process_threads"), 7);
  EXPECT_DOUBLE_EQ(values.at("process_open_fds"), 5);
  EXPECT_DOUBLE_EQ(values.at("process_max_fds"), 4096);
}

TEST(ProcessMetrics, LeavesOutWhatItCannotRead) {
  FakeProc proc;
  proc.Write("4242/stat", "4242 (truncated");
  proc.Write("4242/limits", "Max open files            unlimited            unlimited   files\n");
  const auto values = Values(ProcessMetrics(proc.root(), "4242"));
  EXPECT_EQ(values.count("process_cpu_seconds_total"), 0u);
  EXPECT_EQ(values.count("process_max_fds"), 0u);
  EXPECT_EQ(values.at("process_open_fds"), 0);  // the fd directory exists, empty
  EXPECT_TRUE(Values(ProcessMetrics(proc.root() / "missing", "1")).empty());
}

TEST(ProcessMetrics, ReportsThisProcess) {
  ProcessMetrics metrics;
  const auto before = Values(metrics);
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_start_time_seconds",
                           "process_open_fds", "process_max_fds", "xferd_process_threads"}) {
    EXPECT_EQ(before.count(name), 1u) << name;
  }
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur != RLIM_INFINITY) {
    EXPECT_DOUBLE_EQ(before.at("process_max_fds"), static_cast<double>(limit.rlim_cur));
  }
  EXPECT_GT(before.at("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(before.at("process_virtual_memory_bytes"), before.at("process_resident_memory_bytes"));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(before.at("process_start_time_seconds"), now + 1);
  EXPECT_GT(before.at("process_start_time_seconds"), now - 24 * 3600);

  // Two more descriptors show as two more.
  const int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto after = Values(metrics);
  close(a);
  close(b);
  EXPECT_DOUBLE_EQ(after.at("process_open_fds"), before.at("process_open_fds") + 2);
}

TEST(ProcessMetrics, SerializesAsValidExposition) {
  auto metrics = std::make_shared<ProcessMetrics>();
  const std::string text = RenderExposition({metrics});
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE process_open_fds gauge"), std::string::npos);
  EXPECT_EQ(RenderExposition({metrics}, "xferd_").find("process_open_fds"), std::string::npos);
  EXPECT_NE(RenderExposition({metrics}, "xferd_").find("xferd_process_threads"), std::string::npos);
}

}  // namespace
}  // namespace xferd::exporter
