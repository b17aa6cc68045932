#include "web/password_verifier.h"

#include <crypt.h>
#include <gnutls/crypto.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "web/basic_auth.h"

namespace xferd::web {
namespace {

using Clock = std::chrono::steady_clock;

// Addresses remembered for their failed logins; past this the oldest records go (a
// guesser with more addresses than this still meets the lanes' bounds).
constexpr std::size_t kMaxFailureRecords = 10000;

std::string Sha256(const std::string& data) {
  std::array<unsigned char, 32> digest{};
  if (gnutls_hash_fast(GNUTLS_DIG_SHA256, data.data(), data.size(), digest.data()) < 0) {
    throw std::runtime_error("gnutls_hash_fast(SHA256) failed");
  }
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// "$2b$12$..." -> 12; 10 for anything else (only bcrypt reaches here: the web config
// refuses other hashes).
int BcryptCost(const std::string& hash) {
  if (hash.size() > 7 && hash[0] == '$' && hash[1] == '2' && hash[3] == '$' && hash[6] == '$' &&
      std::isdigit(static_cast<unsigned char>(hash[4])) &&
      std::isdigit(static_cast<unsigned char>(hash[5]))) {
    return (hash[4] - '0') * 10 + (hash[5] - '0');
  }
  return 10;
}

// A bcrypt setting ("$2b$CC$" and a random salt): crypt_r computes a full hash of that cost
// from it, which never equals the setting, so it is a hash no password matches.
std::string DummySetting(int cost) {
  char setting[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2b$", static_cast<unsigned long>(cost), nullptr, 0, setting,
                       sizeof setting) != nullptr) {
    return setting;
  }
  // No randomness available: a fixed salt serves as well, no password matches it either.
  std::snprintf(setting, sizeof setting, "$2b$%02d$%s", cost, "xferdxferdxferdxferdxe");
  return setting;
}

// A NUL is never part of a user name (the web config refuses one) or of a password a bcrypt
// can check (crypt(3) stops at it, so "pw\0zzz" would pass for "pw"): such a login is
// refused at once, without a bcrypt.
bool HoldsNul(const std::string& user, const std::string& password) {
  return user.find('\0') != std::string::npos || password.find('\0') != std::string::npos;
}

}  // namespace

// Named, not anonymous: State (declared in the header) holds them.
namespace verifier_detail {

struct Entry {
  std::string address, password, hash, cache_key;
  bool known_user = false;
  bool priority = false;
  Clock::time_point place;  // where it stands in its address's queue: its first arrival
  Clock::time_point deadline;
  std::function<void(LoginVerdict)> done;
  bool answered = false;
};

struct FailureRecord {
  std::size_t count = 0;
  Clock::time_point window_start;
};

}  // namespace verifier_detail

using verifier_detail::Entry;
using verifier_detail::FailureRecord;

struct PasswordVerifier::State {
  PasswordVerifierOptions options;
  std::mutex mutex;
  std::condition_variable work;
  bool stopping = false;

  std::map<std::string, std::string> users;
  std::vector<int> user_costs;  // one per user, in name order
  std::map<int, std::string> dummy_by_cost;
  std::uint64_t name_salt = std::random_device{}();

  std::set<std::string> cache;  // SHA-256(user, password, hash) of recent successes
  std::deque<std::string> cache_order;

  std::deque<std::shared_ptr<Entry>> priority;
  // The penalty lane: a queue per address, answered in order of arrival, the addresses in
  // turn (one login of each, round and round), so that behind a guessing address a login
  // waits for the guesses ahead of it in its queue, not for whichever comes next.
  std::unordered_map<std::string, std::deque<std::shared_ptr<Entry>>> penalty;
  std::deque<std::string> penalty_turns;  // the addresses with a login in `penalty`
  std::size_t penalty_size = 0;
  std::set<std::shared_ptr<Entry>> running;
  std::unordered_map<std::string, std::size_t> running_per_address;
  std::unordered_map<std::string, std::size_t> waiting;  // per address, both lanes
  std::unordered_map<std::string, FailureRecord> failures;
  // The places of logins that waited past their bound, by address and cache key: the same
  // login from the same address, coming back, takes its place again (a guess that comes
  // back has its old place too, so it gains nothing a new one would not: one check at a
  // time per address either way).
  std::map<std::pair<std::string, std::string>, Clock::time_point> places;

  void KeepPlaceLocked(const Entry& entry, Clock::time_point now) {
    if (options.places_kept == 0) return;
    for (auto it = places.begin(); it != places.end();) {
      it = now - it->second > options.failure_window ? places.erase(it) : std::next(it);
    }
    if (places.size() >= options.places_kept) {
      auto oldest = places.begin();
      for (auto it = places.begin(); it != places.end(); ++it) {
        if (it->second < oldest->second) oldest = it;
      }
      places.erase(oldest);
    }
    places.emplace(std::make_pair(entry.address, entry.cache_key), entry.place);
  }

  std::string HashForLocked(const std::string& user, bool* known) const {
    const auto it = users.find(user);
    *known = it != users.end();
    if (*known) return it->second;
    int cost = 10;
    if (!user_costs.empty()) {
      const std::size_t pick = std::hash<std::string>{}(std::to_string(name_salt) + '\0' + user);
      cost = user_costs[pick % user_costs.size()];
    }
    const auto dummy = dummy_by_cost.find(cost);
    return dummy != dummy_by_cost.end() ? dummy->second : DummySetting(cost);
  }

  bool PenalizedLocked(const std::string& address, Clock::time_point now) {
    const auto it = failures.find(address);
    if (it == failures.end()) return false;
    if (now - it->second.window_start > options.failure_window) {
      failures.erase(it);
      return false;
    }
    return it->second.count >= options.penalty_after_failures;
  }

  void RecordFailureLocked(const std::string& address, Clock::time_point now) {
    if (failures.size() >= kMaxFailureRecords && failures.count(address) == 0) {
      for (auto it = failures.begin(); it != failures.end();) {
        it = now - it->second.window_start > options.failure_window ? failures.erase(it)
                                                                    : std::next(it);
      }
      if (failures.size() >= kMaxFailureRecords) failures.clear();
    }
    FailureRecord& record = failures[address];
    if (record.count == 0 || now - record.window_start > options.failure_window) {
      record = {0, now};
    }
    ++record.count;
  }

  void ReleaseLocked(const Entry& entry) {
    if (--waiting[entry.address] == 0) waiting.erase(entry.address);
  }

  // The next penalty login to check: the first of the next address in turn that has no
  // check running (one at a time per address, whatever the verifier threads); null if none.
  std::shared_ptr<Entry> TakePenaltyTurnLocked() {
    for (std::size_t tried = 0; tried < penalty_turns.size(); ++tried) {
      const std::string address = std::move(penalty_turns.front());
      penalty_turns.pop_front();
      if (running_per_address.count(address) != 0) {
        penalty_turns.push_back(address);
        continue;
      }
      auto& queue = penalty[address];
      auto entry = queue.front();
      queue.pop_front();
      --penalty_size;
      if (queue.empty()) {
        penalty.erase(address);
      } else {
        penalty_turns.push_back(address);
      }
      return entry;
    }
    return nullptr;
  }

  static void AnswerLocked(Entry& entry, LoginVerdict verdict) {
    if (entry.answered) return;
    entry.answered = true;
    std::fill(entry.password.begin(), entry.password.end(), '\0');
    auto done = std::move(entry.done);
    done(verdict);
  }

  // Logins that waited past their deadline get 503 instead of a late bcrypt, and keep their
  // place for when they come back.
  void ExpireLocked(Clock::time_point now) {
    const auto expire = [&](std::deque<std::shared_ptr<Entry>>& queue) {
      std::size_t expired = 0;
      // In order of place, so of deadline but for logins that came back to an old place
      // (their deadline is their own): any entry may be due.
      for (auto it = queue.begin(); it != queue.end();) {
        if ((*it)->deadline > now) {
          ++it;
          continue;
        }
        const auto entry = *it;
        it = queue.erase(it);
        ReleaseLocked(*entry);
        KeepPlaceLocked(*entry, now);
        AnswerLocked(*entry, LoginVerdict::kBusy);
        ++expired;
      }
      return expired;
    };
    expire(priority);
    for (auto it = penalty_turns.begin(); it != penalty_turns.end();) {
      auto& queue = penalty[*it];
      penalty_size -= expire(queue);
      if (queue.empty()) {
        penalty.erase(*it);
        it = penalty_turns.erase(it);
      } else {
        ++it;
      }
    }
  }

  void CacheLocked(const std::string& key) {
    if (!cache.insert(key).second) return;
    cache_order.push_back(key);
    while (cache_order.size() > std::max<std::size_t>(options.cache_entries, 1)) {
      cache.erase(cache_order.front());
      cache_order.pop_front();
    }
  }

  static void Work(const std::shared_ptr<State>& self) {
    std::unique_lock lock(self->mutex);
    for (;;) {
      if (self->stopping) return;
      self->ExpireLocked(Clock::now());
      std::shared_ptr<Entry> entry;
      if (!self->priority.empty()) {
        entry = self->priority.front();
        self->priority.pop_front();
      } else {
        entry = self->TakePenaltyTurnLocked();
      }
      if (entry == nullptr) {
        self->work.wait(lock);
        continue;
      }
      self->running.insert(entry);
      ++self->running_per_address[entry->address];
      self->places.erase({entry->address, entry->cache_key});  // its turn came
      // Copies for the bcrypt outside the lock: a stop may answer the entry meanwhile.
      std::string password = std::move(entry->password);
      entry->password.clear();
      const std::string hash = entry->hash;
      lock.unlock();
      const bool match = VerifyPasswordHash(password, hash);
      std::fill(password.begin(), password.end(), '\0');
      lock.lock();
      self->running.erase(entry);
      if (--self->running_per_address[entry->address] == 0) {
        self->running_per_address.erase(entry->address);
        self->work.notify_one();  // its address's next login may go now
      }
      if (entry->answered) continue;  // stopped meanwhile: Stop() released it
      self->ReleaseLocked(*entry);
      const bool ok = match && entry->known_user;
      if (ok) {
        self->CacheLocked(entry->cache_key);
        self->failures.erase(entry->address);
      } else {
        self->RecordFailureLocked(entry->address, Clock::now());
      }
      AnswerLocked(*entry, ok ? LoginVerdict::kAllowed : LoginVerdict::kDenied);
    }
  }
};

PasswordVerifier::PasswordVerifier(PasswordVerifierOptions options)
    : state_(std::make_shared<State>()) {
  state_->options = options;
  // Detached: a thread in a bcrypt cannot be interrupted, and stopping the server must not
  // wait for it (docs/http.md); each holds the state until it returns.
  for (unsigned i = 0; i < std::max(1u, options.threads); ++i) {
    std::thread([state = state_] { State::Work(state); }).detach();
  }
}

PasswordVerifier::~PasswordVerifier() {
  Stop();
}

void PasswordVerifier::SetUsers(std::map<std::string, std::string> users) {
  std::vector<int> costs;
  std::map<int, std::string> dummies;
  for (const auto& [user, hash] : users) {
    costs.push_back(BcryptCost(hash));
    if (dummies.count(costs.back()) == 0) dummies[costs.back()] = DummySetting(costs.back());
  }
  std::lock_guard lock(state_->mutex);
  state_->users = std::move(users);
  state_->user_costs = std::move(costs);
  state_->dummy_by_cost = std::move(dummies);
  state_->cache.clear();
  state_->cache_order.clear();
  state_->places.clear();
}

std::string PasswordVerifier::HashFor(const std::string& user) const {
  std::lock_guard lock(state_->mutex);
  bool known = false;
  return state_->HashForLocked(user, &known);
}

std::optional<LoginVerdict> PasswordVerifier::CheckCached(const std::string& user,
                                                          const std::string& password) {
  if (HoldsNul(user, password)) return LoginVerdict::kDenied;
  std::lock_guard lock(state_->mutex);
  bool known = false;
  const std::string hash = state_->HashForLocked(user, &known);
  if (known && state_->cache.count(Sha256(user + '\0' + password + '\0' + hash)) != 0) {
    return LoginVerdict::kAllowed;
  }
  return std::nullopt;
}

std::optional<LoginVerdict> PasswordVerifier::Check(const std::string& address,
                                                    const std::string& user,
                                                    const std::string& password,
                                                    const std::function<void()>& park,
                                                    std::function<void(LoginVerdict)> done) {
  if (HoldsNul(user, password)) return LoginVerdict::kDenied;
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (s.stopping) return LoginVerdict::kBusy;
  auto entry = std::make_shared<Entry>();
  entry->hash = s.HashForLocked(user, &entry->known_user);
  entry->cache_key = Sha256(user + '\0' + password + '\0' + entry->hash);
  if (entry->known_user && s.cache.count(entry->cache_key) != 0) return LoginVerdict::kAllowed;

  const auto now = Clock::now();
  s.ExpireLocked(now);
  const bool penalized = s.PenalizedLocked(address, now);
  const std::size_t waiting = s.waiting.count(address) ? s.waiting.at(address) : 0;
  if (!penalized && waiting == 0) {
    if (s.priority.size() >= s.options.priority_slots) return LoginVerdict::kBusy;
    entry->priority = true;
  } else {
    const auto queue = s.penalty.find(address);
    const std::size_t queued = queue != s.penalty.end() ? queue->second.size() : 0;
    if (queued >= s.options.penalty_per_address || s.penalty_size >= s.options.penalty_slots) {
      return LoginVerdict::kRateLimited;
    }
  }
  entry->address = address;
  entry->password = password;
  entry->place = now;
  if (const auto kept = s.places.find({address, entry->cache_key}); kept != s.places.end()) {
    entry->place = kept->second;  // came back: where it stood before
  }
  entry->deadline = now + s.options.max_wait;
  entry->done = std::move(done);
  park();
  if (entry->priority) {
    s.priority.push_back(entry);
  } else {
    auto& queue = s.penalty[address];
    if (queue.empty()) s.penalty_turns.push_back(address);
    // In order of place: after every login that stood there first.
    auto at = queue.end();
    while (at != queue.begin() && (*std::prev(at))->place > entry->place) --at;
    queue.insert(at, entry);
    ++s.penalty_size;
  }
  ++s.waiting[address];
  s.work.notify_one();
  return std::nullopt;
}

void PasswordVerifier::Stop() {
  std::lock_guard lock(state_->mutex);
  State& s = *state_;
  s.stopping = true;
  for (const auto& entry : s.priority) State::AnswerLocked(*entry, LoginVerdict::kBusy);
  s.priority.clear();
  for (const auto& [address, queue] : s.penalty) {
    for (const auto& entry : queue) State::AnswerLocked(*entry, LoginVerdict::kBusy);
  }
  s.penalty.clear();
  s.penalty_turns.clear();
  s.penalty_size = 0;
  // Running ones are answered now too; their threads find them answered and drop the result.
  for (const auto& entry : s.running) State::AnswerLocked(*entry, LoginVerdict::kBusy);
  s.waiting.clear();
  s.work.notify_all();
}

}  // namespace xferd::web
