// The real notifier against a real AF_UNIX datagram socket, as systemd provides it.
#include "platform/systemd_notifier.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace xferd::platform {
namespace {

class NotifySocket {
 public:
  NotifySocket() {
    path_ = std::filesystem::temp_directory_path() /
            ("xferd-notify-" + std::to_string(getpid()) + ".sock");
    std::filesystem::remove(path_);
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path_.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{2, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setenv("NOTIFY_SOCKET", path_.c_str(), 1);
  }
  ~NotifySocket() {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    close(fd_);
    std::filesystem::remove(path_);
  }
  std::string Receive() {
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

TEST(SystemdNotifier, SendsEachMessageToNotifySocket) {
  NotifySocket sock;
  auto n = MakeSystemdNotifier();
  n->Ready();
  EXPECT_EQ(sock.Receive(), "READY=1");
  n->Status("ok: 13/13\nwithin band");
  EXPECT_EQ(sock.Receive(), "STATUS=ok: 13/13 within band");
  n->Watchdog();
  EXPECT_EQ(sock.Receive(), "WATCHDOG=1");
  n->Reloading();
  const std::string reloading = sock.Receive();
  EXPECT_EQ(reloading.rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << reloading;
  EXPECT_GT(std::stoull(reloading.substr(reloading.find('=', 12) + 1)), 0u);
  n->Stopping();
  EXPECT_EQ(sock.Receive(), "STOPPING=1");
}

TEST(SystemdNotifier, WatchdogIntervalFollowsWatchdogUsecForThisPid) {
  NotifySocket sock;
  setenv("WATCHDOG_USEC", "3000000", 1);
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  auto n = MakeSystemdNotifier();
  ASSERT_TRUE(n->WatchdogInterval());
  EXPECT_EQ(*n->WatchdogInterval(), std::chrono::seconds(3));
  // Meant for another process (a parent that exec'd us without fixing the variables).
  setenv("WATCHDOG_PID", "1", 1);
  EXPECT_FALSE(MakeSystemdNotifier()->WatchdogInterval());
}

TEST(SystemdNotifier, WithoutNotifySocketEverythingIsANoOp) {
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  auto n = MakeSystemdNotifier();
  n->Ready();
  n->Watchdog();
  n->Stopping();
  EXPECT_FALSE(n->WatchdogInterval());
}

}  // namespace
}  // namespace xferd::platform
