// Basic-auth logins checked without letting a flood of guesses keep a correct password out
// and without blocking the HTTP server's threads (docs/http.md, "Basic auth under a flood").
//
// A login whose password is in the cache of recent successes is answered at once. Any other
// costs a bcrypt (tens to hundreds of ms), run by a verifier thread while the request waits
// parked (its connection suspended). Waiting logins go into one of two lanes:
//  - the priority lane, for an address with no recent failed login and none of its own
//    already waiting: a few slots, always served first, so a correct login from such an
//    address waits at most (slots + 1) x one bcrypt;
//  - the penalty lane, for an address that failed `penalty_after_failures` times in the
//    last `failure_window`, or already has a login waiting: a queue per address, answered in
//    order of arrival and one check at a time, the addresses in turn; a login that finds its
//    address's queue (or the lane) full gets 429 (too many) at once, without a bcrypt. The
//    queue is as deep as the connections one client address may hold over TLS, so every
//    connection of a guessing address can have its login waiting: a correct login from
//    behind it waits for the guesses that came before it, not for the ones after, however
//    many guessers there are. One that waited past its bound (503) keeps its place: when
//    the same login comes back from the same address, it goes where it stood, ahead of
//    every guess that came after it. So a guesser still gets one check at a time, and a
//    correct login from its address gets through, on its first try while the guesses ahead
//    fit the wait bound, else on its retry.
// A full priority lane answers 503 at once. An unknown user is checked against a dummy
// setting of a configured user's cost, so a wrong name costs what a wrong password does.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace xferd::web {

enum class LoginVerdict {
  kAllowed,
  kDenied,       // wrong user or password: 401
  kBusy,         // the priority lane is full, the wait ran out or the server stops: 503
  kRateLimited,  // this address failed too often and has a login waiting already: 429
};

struct PasswordVerifierOptions {
  unsigned threads = 1;  // concurrent bcrypts
  std::size_t priority_slots = 4;
  // Waiting from one penalized address: as many as its TLS connections (HttpServerOptions::
  // tls_connections_per_address), so one login per connection fits.
  std::size_t penalty_per_address = 128;
  std::size_t penalty_slots = 512;  // waiting in the penalty lane in all
  // Logins that waited past max_wait and keep their place for when they come back (per
  // address and credentials), for failure_window at most.
  std::size_t places_kept = 1024;
  std::size_t penalty_after_failures = 2;
  std::chrono::seconds failure_window{60};
  // A login waiting longer than this (not yet started) is answered 503.
  std::chrono::milliseconds max_wait{5000};
  std::size_t cache_entries = 64;  // successful logins remembered
};

class PasswordVerifier {
 public:
  explicit PasswordVerifier(PasswordVerifierOptions options = {});
  // Stop(); verifier threads in a bcrypt are left to finish on their own.
  ~PasswordVerifier();
  PasswordVerifier(const PasswordVerifier&) = delete;
  PasswordVerifier& operator=(const PasswordVerifier&) = delete;

  // user -> bcrypt hash; forgets cached logins. An empty map: every login is denied.
  void SetUsers(std::map<std::string, std::string> users);

  // The verdict now, when the cache, the lanes or a stop decide it (a user or password
  // holding a NUL is refused at once). Otherwise nullopt: the
  // login waits, `park` has been called (with the verifier's lock held, so that a stop
  // cannot answer before the request is parked), and `done` will be called exactly once,
  // from another thread, with the lock held: `done` must not call back into the verifier.
  std::optional<LoginVerdict> Check(const std::string& address, const std::string& user,
                                    const std::string& password, const std::function<void()>& park,
                                    std::function<void(LoginVerdict)> done);

  // The verdict if the cache knows this login; nullopt when it would cost a bcrypt.
  std::optional<LoginVerdict> CheckCached(const std::string& user, const std::string& password);

  // Answers every waiting login kBusy now; later Checks answer kBusy at once. Returns
  // without waiting for a bcrypt in progress.
  void Stop();

  // The hash a login for `user` is checked against: the configured one, or for an unknown
  // user a dummy setting with the cost of a configured user (chosen by the name, so the
  // same name always costs the same, and the costs of unknown names are spread as the
  // configured users' are).
  std::string HashFor(const std::string& user) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace xferd::web
