// A read that may hang runs where a stop signal still stops the caller.
#include "platform/abandonable_call.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include "testing/fakes.h"

namespace xferd::platform {
namespace {

TEST(CallUnlessStopped, ReturnsWhenTheWorkIsDoneAndPassesItsException) {
  fakes::FakeSignals signals;
  int value = 0;
  EXPECT_FALSE(CallUnlessStopped([&] { value = 42; }, signals));
  EXPECT_EQ(value, 42);
  EXPECT_THROW(CallUnlessStopped([] { throw std::runtime_error("bad file"); }, signals),
               std::runtime_error);
}

// The review: a SIGHUP while the config was first read was dropped; the file may have
// changed after it was read. It is reported, so the caller reloads once it can.
TEST(CallUnlessStopped, AReloadMeanwhileIsReportedNotDropped) {
  fakes::FakeSignals signals;
  auto release = std::make_shared<std::promise<void>>();
  std::thread hup([&] {
    signals.Send(Signal::Kind::kReload);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    release->set_value();
  });
  bool reload_asked = false;
  EXPECT_FALSE(
      CallUnlessStopped([release] { release->get_future().wait(); }, signals, &reload_asked));
  hup.join();
  EXPECT_TRUE(reload_asked);
  // No reload asked: none reported.
  bool none = false;
  EXPECT_FALSE(CallUnlessStopped([] {}, signals, &none));
  EXPECT_FALSE(none);
}

// A read stuck in a hung file system: the stop signal ends the wait, the work is left.
TEST(CallUnlessStopped, AStopSignalEndsTheWaitForWorkThatHangs) {
  fakes::FakeSignals signals;
  auto release = std::make_shared<std::promise<void>>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    signals.Send(Signal::Kind::kReload);
    signals.Send(Signal::Kind::kStop);
  });
  const auto stop = CallUnlessStopped(
      [release, finished] {
        release->get_future().wait();
        *finished = true;
      },
      signals);
  stopper.join();
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->kind, Signal::Kind::kStop);
  EXPECT_FALSE(*finished);
  release->set_value();  // let the abandoned thread end before the test process does
}

}  // namespace
}  // namespace xferd::platform
