// Logins under a flood of guesses: a correct password from an address that is not guessing
// always gets a verdict (never 503/429), the guesser is held to its lanes, unknown users
// cost what known ones do, and a stop answers every waiting login at once.
#include "web/password_verifier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/fakes.h"
#include "web/basic_auth.h"

namespace xferd::web {
namespace {

// bcrypt of "test-password" at cost 8 (~20 ms here) and of "x" at costs 5 and 6.
constexpr const char* kCost8 = "$2b$08$qr55TFhzCxlIpuasHiLI7uVMaIKaevcZ.RSOehHumTvj6DYv8Nz6.";
constexpr const char* kCost5 = "$2b$05$uwCUv.GjMulXo5oFsmr20uWkQsQj.T..rvqcdn7HtMyVgGXdW46iu";
constexpr const char* kCost6 = "$2b$06$/LJQV8tLz5lqSJG6zlG/B.cFGy7bYeN5XbWldjBqldeIJ9X0OJHHO";
// bcrypt of "slow-password" at cost 12, the highest accepted (~0.4 s here).
constexpr const char* kCost12 = "$2b$12$jadT/.hzfyd15AJVxz5NPeb0BD2.q7gNTWqkFgg.WPl4VaMezXkJu";

// One login through the verifier, waited for.
class Login {
 public:
  Login(PasswordVerifier& verifier, const std::string& address, const std::string& user,
        const std::string& password) {
    const auto now = verifier.Check(
        address, user, password, [this] { parked_ = true; },
        [this](LoginVerdict v) {
          std::lock_guard lock(mutex_);
          verdict_ = v;
          done_.notify_all();
        });
    if (now) verdict_ = *now;
  }
  LoginVerdict Wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return verdict_.has_value(); });
    return *verdict_;
  }
  bool parked() const { return parked_; }
  bool answered() {
    std::lock_guard lock(mutex_);
    return verdict_.has_value();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::optional<LoginVerdict> verdict_;
  bool parked_ = false;
};

LoginVerdict CheckOnce(PasswordVerifier& verifier, const std::string& address,
                       const std::string& user, const std::string& password) {
  Login login(verifier, address, user, password);
  return login.Wait();
}

TEST(PasswordVerifier, AllowsTheRightPasswordAndCachesIt) {
  PasswordVerifier verifier;
  verifier.SetUsers({{"prometheus", kCost8}});
  EXPECT_EQ(verifier.CheckCached("prometheus", "test-password"), std::nullopt);
  EXPECT_EQ(CheckOnce(verifier, "10.0.0.1", "prometheus", "test-password"), LoginVerdict::kAllowed);
  EXPECT_EQ(verifier.CheckCached("prometheus", "test-password"), LoginVerdict::kAllowed);
  EXPECT_EQ(CheckOnce(verifier, "10.0.0.1", "prometheus", "wrong"), LoginVerdict::kDenied);
  EXPECT_EQ(CheckOnce(verifier, "10.0.0.1", "nobody", "test-password"), LoginVerdict::kDenied);
  // Byte for byte: a NUL and what follows it are part of what was sent (crypt(3) would stop
  // at it and let "test-password\0x" pass), in the password and in the name alike; neither
  // costs a bcrypt, and neither is let in by the cache of the real password either.
  EXPECT_EQ(CheckOnce(verifier, "10.0.0.1", "prometheus", std::string("test-password\0x", 15)),
            LoginVerdict::kDenied);
  EXPECT_EQ(verifier.CheckCached("prometheus", std::string("test-password\0x", 15)),
            LoginVerdict::kDenied);
  EXPECT_EQ(CheckOnce(verifier, "10.0.0.1", std::string("prometheus\0x", 12), "test-password"),
            LoginVerdict::kDenied);
  // New users forget the cache.
  verifier.SetUsers({{"prometheus", kCost8}});
  EXPECT_EQ(verifier.CheckCached("prometheus", "test-password"), std::nullopt);
}

// The case of the review: during a wrong-password flood, a correct login that is not yet
// cached (the first scrape after a restart) got 503 every time.
TEST(PasswordVerifier, ACorrectLoginGetsThroughAFloodOfGuessesFromAnotherAddress) {
  PasswordVerifierOptions options;
  options.penalty_per_address = 8;  // fewer than the guessers: some are told to come back
  PasswordVerifier verifier(options);
  verifier.SetUsers({{"prometheus", kCost8}});
  std::atomic<int> guesses{0}, denied{0}, pushed_back{0};
  // More guessers than the address's queue holds: some are told 429.
  fakes::Flood guessers(12, [&](int t, int n) {
    ++guesses;
    const LoginVerdict v = CheckOnce(verifier, "192.0.2.66", "prometheus",
                                     "guess-" + std::to_string(t) + "-" + std::to_string(n));
    if (v == LoginVerdict::kDenied) ++denied;
    if (v == LoginVerdict::kBusy || v == LoginVerdict::kRateLimited) ++pushed_back;
    EXPECT_NE(v, LoginVerdict::kAllowed);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<LoginVerdict> scrapes;
  for (int i = 0; i < 10; ++i) {
    verifier.SetUsers({{"prometheus", kCost8}});  // a restart: nothing cached
    scrapes.push_back(CheckOnce(verifier, "10.0.0.1", "prometheus", "test-password"));
  }
  guessers.Stop();
  for (const LoginVerdict v : scrapes) EXPECT_EQ(v, LoginVerdict::kAllowed);
  EXPECT_GT(denied, 0);       // guesses are still checked, one at a time for that address
  EXPECT_GT(pushed_back, 0);  // and those past its queue told to come back, costing no bcrypt
}

// The review: behind the guessing address itself, a correct login that was not cached got
// 429 every time in four runs of ten (whichever guess came next took the one slot). Now the
// address's logins wait in its queue in order of arrival: a correct one is checked after
// the guesses queued ahead of it, however fast the guessers come back.
TEST(PasswordVerifier, ACorrectLoginFromTheGuessingAddressGetsItsTurn) {
  PasswordVerifier verifier;
  verifier.SetUsers({{"prometheus", kCost8}});
  std::atomic<int> denied{0}, other{0};
  fakes::Flood guessers(4, [&](int t, int n) {
    const LoginVerdict v = CheckOnce(verifier, "192.0.2.66", "prometheus",
                                     "guess-" + std::to_string(t) + "-" + std::to_string(n));
    (v == LoginVerdict::kDenied ? denied : other)++;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<LoginVerdict> scrapes;
  for (int i = 0; i < 10; ++i) {
    verifier.SetUsers({{"prometheus", kCost8}});  // nothing cached
    scrapes.push_back(CheckOnce(verifier, "192.0.2.66", "prometheus", "test-password"));
  }
  guessers.Stop();
  for (const LoginVerdict v : scrapes) EXPECT_EQ(v, LoginVerdict::kAllowed);
  EXPECT_GT(denied, 10);  // the guesses took their turns too, one check at a time
  EXPECT_EQ(other, 0);    // four guessers fit the queue: none was told 429
}

// The review: a correct login got through beside at most 8 guessers on its address (the
// queue was 8 deep): 1 in 20 with 9, none with 12 or 16. The queue now holds one login per
// connection an address may hold, so beside 16 or 32 guessers a correct login is checked
// after the guesses that came before it, on its first try.
TEST(PasswordVerifier, ACorrectLoginBesideManyGuessersOnItsAddressGetsThrough) {
  for (const int guessers : {16, 32}) {
    PasswordVerifier verifier;
    verifier.SetUsers({{"prometheus", kCost8}});
    std::atomic<int> denied{0}, other{0};
    fakes::Flood flood(guessers, [&](int t, int n) {
      const LoginVerdict v = CheckOnce(verifier, "192.0.2.66", "prometheus",
                                       "guess-" + std::to_string(t) + "-" + std::to_string(n));
      (v == LoginVerdict::kDenied ? denied : other)++;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<LoginVerdict> scrapes;
    for (int i = 0; i < 3; ++i) {
      verifier.SetUsers({{"prometheus", kCost8}});  // nothing cached
      scrapes.push_back(CheckOnce(verifier, "192.0.2.66", "prometheus", "test-password"));
    }
    flood.Stop();
    for (const LoginVerdict v : scrapes) EXPECT_EQ(v, LoginVerdict::kAllowed) << guessers;
    EXPECT_GT(denied, 10) << guessers;  // the guesses took their turns, one at a time
  }
}

// Past the wait bound (the guesses ahead take longer than it): the login is told 503, and
// keeps its place; coming back, it stands ahead of every guess that came after it, so a
// scraper's next try gets through however many guessers there are.
TEST(PasswordVerifier, ALoginToldToComeBackKeepsItsPlace) {
  PasswordVerifierOptions options;
  options.max_wait = std::chrono::milliseconds(300);
  PasswordVerifier verifier(options);
  verifier.SetUsers({{"prometheus", kCost8}});
  std::atomic<bool> go{true};
  fakes::Flood flood(48, [&](int t, int n) {
    CheckOnce(verifier, "192.0.2.66", "prometheus",
              "guess-" + std::to_string(t) + "-" + std::to_string(n));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int tries = 0;
  LoginVerdict last = LoginVerdict::kBusy;
  while (tries < 4 && last != LoginVerdict::kAllowed) {
    ++tries;
    last = CheckOnce(verifier, "192.0.2.66", "prometheus", "test-password");
  }
  flood.Stop();
  EXPECT_EQ(last, LoginVerdict::kAllowed) << "after " << tries << " tries";
  EXPECT_LE(tries, 3);
}

TEST(PasswordVerifier, AnAddressThatKeepsFailingGetsOneCheckAtATime) {
  PasswordVerifierOptions options;
  options.penalty_after_failures = 2;
  options.penalty_per_address = 2;
  PasswordVerifier verifier(options);
  verifier.SetUsers({{"prometheus", kCost8}, {"slow", kCost12}});
  EXPECT_EQ(CheckOnce(verifier, "192.0.2.1", "prometheus", "a"), LoginVerdict::kDenied);
  EXPECT_EQ(CheckOnce(verifier, "192.0.2.1", "prometheus", "b"), LoginVerdict::kDenied);
  // The one verifier thread busy with another address's slow login, so that none of the
  // failing address's starts before all three have asked (on a loaded machine the first
  // could otherwise be checked and gone, and make room for the third).
  Login busy(verifier, "10.0.0.9", "slow", "x");
  ASSERT_TRUE(busy.parked());
  // Now failing: its logins queue, two at most; the next at the same time is told 429.
  Login first(verifier, "192.0.2.1", "prometheus", "c");
  Login second(verifier, "192.0.2.1", "prometheus", "d");
  Login third(verifier, "192.0.2.1", "prometheus", "e");
  EXPECT_TRUE(first.parked());
  EXPECT_TRUE(second.parked());
  EXPECT_FALSE(third.parked());
  EXPECT_EQ(third.Wait(), LoginVerdict::kRateLimited);
  // Both queued ones are checked.
  EXPECT_EQ(first.Wait(), LoginVerdict::kDenied);
  EXPECT_EQ(second.Wait(), LoginVerdict::kDenied);
  EXPECT_EQ(busy.Wait(), LoginVerdict::kDenied);
  // Its right password still works, and clears the record.
  EXPECT_EQ(CheckOnce(verifier, "192.0.2.1", "prometheus", "test-password"),
            LoginVerdict::kAllowed);
}

// Timing must not tell which user names exist: an unknown name is checked against a dummy
// setting of a configured user's cost (cost 5 took 3 ms and an unknown user 80 ms).
TEST(PasswordVerifier, UnknownUsersAreCheckedAtTheCostOfConfiguredOnes) {
  PasswordVerifier verifier;
  verifier.SetUsers({{"alice", kCost6}});
  for (const std::string name : {"bob", "root", "admin", "x"}) {
    EXPECT_EQ(verifier.HashFor(name).substr(0, 7), "$2b$06$") << name;
  }
  // Several costs: each unknown name gets one of them, the same one every time.
  verifier.SetUsers({{"alice", kCost5}, {"bob", kCost8}});
  std::set<std::string> costs;
  for (int i = 0; i < 64; ++i) {
    const std::string name = "user" + std::to_string(i);
    const std::string hash = verifier.HashFor(name);
    costs.insert(hash.substr(0, 7));
    EXPECT_EQ(verifier.HashFor(name), hash);
    EXPECT_FALSE(VerifyPasswordHash("x", hash));
  }
  EXPECT_EQ(costs, (std::set<std::string>{"$2b$05$", "$2b$08$"}));
  EXPECT_EQ(verifier.HashFor("alice"), kCost5);
}

// Shutdown never waits for a bcrypt (cost 20 made it hang past 5 s): Stop answers every
// waiting login at once, the running one included.
TEST(PasswordVerifier, StopAnswersEveryWaitingLoginAtOnce) {
  PasswordVerifier verifier;
  verifier.SetUsers({{"prometheus", kCost12}});
  Login running(verifier, "10.0.0.1", "prometheus", "slow-password");
  Login waiting(verifier, "10.0.0.2", "prometheus", "slow-password");
  ASSERT_TRUE(running.parked());
  ASSERT_TRUE(waiting.parked());
  verifier.Stop();
  EXPECT_TRUE(running.answered());
  EXPECT_TRUE(waiting.answered());
  EXPECT_EQ(running.Wait(), LoginVerdict::kBusy);
  EXPECT_EQ(waiting.Wait(), LoginVerdict::kBusy);
  EXPECT_EQ(CheckOnce(verifier, "10.0.0.3", "prometheus", "slow-password"), LoginVerdict::kBusy);
}

TEST(PasswordVerifier, ALoginThatWaitsPastItsDeadlineIsToldToComeBack) {
  PasswordVerifierOptions options;
  options.max_wait = std::chrono::milliseconds(50);
  PasswordVerifier verifier(options);
  verifier.SetUsers({{"prometheus", kCost12}});
  Login running(verifier, "10.0.0.1", "prometheus", "slow-password");
  Login behind(verifier, "10.0.0.2", "prometheus", "slow-password");
  // The second waits for the first's ~0.4 s bcrypt, past its 50 ms.
  EXPECT_EQ(behind.Wait(), LoginVerdict::kBusy);
  EXPECT_EQ(running.Wait(), LoginVerdict::kAllowed);
}

TEST(BcryptHashProblem, CostsAboveTheLimitAreRefused) {
  EXPECT_FALSE(BcryptHashProblem(kCost12));
  const auto problem =
      BcryptHashProblem("$2b$13$jadT/.hzfyd15AJVxz5NPeb0BD2.q7gNTWqkFgg.WPl4VaMezXkJu");
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("above xferd's limit of 12"), std::string::npos) << *problem;
  EXPECT_TRUE(BcryptHashProblem("$2b$31$jadT/.hzfyd15AJVxz5NPeb0BD2.q7gNTWqkFgg.WPl4VaMezXkJu"));
  EXPECT_TRUE(BcryptHashProblem("$2b$03$jadT/.hzfyd15AJVxz5NPeb0BD2.q7gNTWqkFgg.WPl4VaMezXkJu"));
}

}  // namespace
}  // namespace xferd::web
