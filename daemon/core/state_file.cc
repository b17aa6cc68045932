#include "core/state_file.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <deque>
#include <istream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <streambuf>
#include <string_view>
#include <system_error>
#include <vector>

#include "platform/files.h"
#include "platform/printable.h"

namespace xferd::core {
namespace {

constexpr const char* kStateName = "state.json";
// A few KiB per GPU with the defaults; ~3 MB per GPU at the most a configuration may keep
// (config::kMaxBaselineValuesPerGpu): 64 MiB holds 20 GPUs of that. Read as a stream, so
// what the file costs in memory is the values kept, not its size.
constexpr std::size_t kMaxStateBytes = 64u << 20;
// The longest baseline window a configuration may set: older values are never used.
constexpr std::size_t kMaxValuesPerSeries = kMaxBaselineWindow;
// More than any configuration keeps (20 GPUs at the most of config's budget, 2.6 million):
// a file with more is not one xferd wrote, and holding it all would cost memory for nothing.
constexpr std::size_t kMaxValuesKept = 4u << 20;
constexpr std::size_t kMaxSeries = 1u << 16;
constexpr std::size_t kMaxNameBytes = 256;  // a GPU UUID or a series key ("pinned/h2d/64MiB")
// The document nests 4 deep (root, baselines, GPU, series) and an incident 4 more: deeper
// than this inside an incident is not an incident (counted, never held: a file nested a
// million deep costs the parser a bit per level).
constexpr int kMaxIncidentDepth = 8;
// One incident as read holds at most this many values (xferd writes ~20, ~160 with every
// cause): an entry with more is not one xferd wrote, and is not held.
constexpr std::size_t kMaxIncidentValues = 1024;
// Strings of the incident log are held to a few hundred bytes when read (IncidentFromJson);
// longer ones are cut here already.
constexpr std::size_t kMaxIncidentStringBytes = 1024;
// No token the parser sees is longer than these: a string (a GPU UUID, a series key, an
// incident's detail: a few hundred bytes at most) is cut past kMaxStringBytes, a number
// (xferd writes at most 24 characters) longer than kMaxNumberBytes is read as null. The
// parser builds each token whole in memory before it hands it over: a 60 MB string made
// reading the file cost 134 MB.
constexpr std::size_t kMaxStringBytes = 4096;
constexpr std::size_t kMaxNumberBytes = 64;
// Every top-level key Save writes. A file holding another (a newer xferd's section) is kept
// as a copy before the next write drops it: a section added to Save belongs here too.
constexpr std::array<std::string_view, 4> kSectionsWritten = {"version", "written_at", "baselines",
                                                              "incidents"};

std::string UtcStamp(std::chrono::system_clock::time_point t, const char* format) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// The state file as a stream of bytes for the JSON parser, read through the bounded reader,
// with every token held to a size before the parser sees it (kMaxStringBytes,
// kMaxNumberBytes): a string past its bound is cut at a character's start (never inside an
// escape, a \u pair or a UTF-8 sequence) and closed, the rest skipped; a number past its
// bound becomes null. What was cut is counted: the file is then not kept as it is (its copy
// is kept, as for anything else read and not kept).
class BoundedTokenBuffer : public std::streambuf {
 public:
  explicit BoundedTokenBuffer(platform::BoundedFile& file) : file_(file) {}

  std::size_t strings_cut = 0, longest_string = 0, numbers_dropped = 0;

 protected:
  int_type underflow() override {
    for (;;) {
      const std::size_t n = file_.Read(in_.data(), in_.size());
      out_.clear();
      if (n == 0) {
        Flush();  // a number at the very end
        if (out_.empty()) return traits_type::eof();
      } else {
        Scan(n);
        if (out_.empty()) continue;  // all of it skipped
      }
      setg(out_.data(), out_.data(), out_.data() + out_.size());
      return traits_type::to_int_type(out_[0]);
    }
  }

 private:
  enum class State { kOutside, kString, kSkipString, kNumber, kSkipNumber };

  static bool NumberByte(unsigned char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
  }
  static int Hex(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 0;
  }

  // The bytes read, through Take; runs that need no decision (the inside of a string, the
  // digits of a number, whitespace and punctuation between tokens) are copied whole.
  void Scan(std::size_t n) {
    const char* in = in_.data();
    for (std::size_t i = 0; i < n;) {
      std::size_t j = i;
      if (state_ == State::kString && escape_ == 0 && !high_surrogate_) {
        while (j < n && in[j] != '"' && in[j] != '\\' && length_ + (j - i) < kMaxStringBytes) ++j;
        out_.append(in + i, j - i);
        length_ += j - i;
      } else if (state_ == State::kOutside) {
        while (j < n && in[j] != '"' && in[j] != '-' && (in[j] < '0' || in[j] > '9')) ++j;
        out_.append(in + i, j - i);
      } else if (state_ == State::kNumber) {
        while (j < n && number_.size() + (j - i) < kMaxNumberBytes &&
               NumberByte(static_cast<unsigned char>(in[j]))) {
          ++j;
        }
        number_.append(in + i, j - i);
      }
      if (j == n) return;
      Take(static_cast<unsigned char>(in[j]));
      i = j + 1;
    }
  }

  void Flush() {
    if (state_ == State::kNumber) out_.append(number_);
    if (state_ == State::kNumber || state_ == State::kSkipNumber) state_ = State::kOutside;
  }

  void Take(unsigned char c) {
    switch (state_) {
      case State::kOutside:
        if (c == '"') {
          state_ = State::kString;
          length_ = 0, escape_ = 0, high_surrogate_ = false;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
          state_ = State::kNumber;
          number_.assign(1, static_cast<char>(c));
          return;
        }
        out_.push_back(static_cast<char>(c));
        return;
      case State::kNumber:
        if (NumberByte(c)) {
          if (number_.size() < kMaxNumberBytes) {
            number_.push_back(static_cast<char>(c));
          } else {
            ++numbers_dropped;
            out_.append("null");
            state_ = State::kSkipNumber;
          }
          return;
        }
        out_.append(number_);
        state_ = State::kOutside;
        Take(c);
        return;
      case State::kSkipNumber:
        if (NumberByte(c)) return;
        state_ = State::kOutside;
        Take(c);
        return;
      case State::kString: String(c); return;
      case State::kSkipString:
        ++length_;
        if (escape_ != 0) {
          escape_ = 0;
        } else if (c == '\\') {
          escape_ = 1;
        } else if (c == '"') {
          longest_string = std::max(longest_string, length_ - 1);
          state_ = State::kOutside;
        }
        return;
    }
  }

  // Inside a string: where it may be cut is where nothing is half-said.
  void String(unsigned char c) {
    const bool may_cut = escape_ == 0 && !high_surrogate_ && (c < 0x80 || c >= 0xc0);
    if (length_ >= kMaxStringBytes && may_cut && c != '"') {
      out_.push_back('"');
      ++strings_cut;
      state_ = State::kSkipString;
      Take(c);  // skipped, as the rest will be
      return;
    }
    out_.push_back(static_cast<char>(c));
    ++length_;
    if (escape_ == 1) {
      escape_ = c == 'u' ? 2 : 0;
      code_ = 0;
    } else if (escape_ >= 2) {
      code_ = code_ * 16 + Hex(c);
      if (++escape_ == 6) {
        escape_ = 0;
        // A high surrogate and its low one are never parted.
        high_surrogate_ = code_ >= 0xd800 && code_ <= 0xdbff;
      }
    } else if (c == '\\') {
      escape_ = 1;
    } else if (c == '"') {
      state_ = State::kOutside;
    } else if (high_surrogate_) {
      high_surrogate_ = false;  // not followed by its pair: the parser says so
    }
  }

  platform::BoundedFile& file_;
  std::array<char, 65536> in_{};
  std::string out_;
  std::string number_;
  State state_ = State::kOutside;
  std::size_t length_ = 0;  // bytes of the string so far, as written
  int escape_ = 0;          // 0; 1 after '\\'; 2..5 in the hex digits of \\u
  unsigned code_ = 0;
  bool high_surrogate_ = false;
};

// What an incident read from the file holds that `kept` (the incident as xferd writes it
// back, IncidentToJson) does not: "" when it reads back whole; else the first thing lost,
// for the log. Fields `kept` adds (a cause's empty "detail") lose nothing; a time written
// another way but naming the same instant loses nothing either.
std::string LostOnReading(const nlohmann::json& read, const nlohmann::json& kept,
                          const std::string& where) {
  const std::string at = "\"" + platform::Printable(where, 80, true) + "\"";
  if (read.is_object()) {
    if (!kept.is_object()) return at + " as written";
    for (const auto& [key, value] : read.items()) {
      const std::string inner = where.empty() ? key : where + "." + key;
      const auto it = kept.find(key);
      if (it == kept.end()) {
        return "the field \"" + platform::Printable(inner, 80, true) +
               "\", which this xferd does not keep";
      }
      if (where.empty() && key == "time" && value.is_string() && it->is_string() &&
          ParseUtcTime(value.get<std::string>()) == ParseUtcTime(it->get<std::string>())) {
        continue;
      }
      std::string lost = LostOnReading(value, *it, inner);
      if (!lost.empty()) return lost;
    }
    return "";
  }
  if (read.is_array()) {
    if (!kept.is_array() || kept.size() != read.size()) {
      return "entries of " + at + " that this xferd cannot place";
    }
    for (std::size_t i = 0; i < read.size(); ++i) {
      std::string lost = LostOnReading(read[i], kept[i], where + "[" + std::to_string(i) + "]");
      if (!lost.empty()) return lost;
    }
    return "";
  }
  if (read == kept) return "";
  if (read.is_number() && kept.is_number() && read.get<double>() == kept.get<double>()) return "";
  return at + " as written (this xferd keeps it shorter or escaped)";
}

// The incident log as the file holds it, read entry by entry: each entry is held only while
// it is read (at most kMaxIncidentValues values, kMaxIncidentDepth deep), then judged
// (IncidentFromJson) and let go; the newest kIncidentLogCapacity are kept. Whatever is not
// kept as it was read is counted, so that the file is kept beside it before a write drops it.
class IncidentLogReader {
 public:
  using json = nlohmann::json;

  std::deque<Incident> kept;  // oldest first
  std::size_t entries = 0, bad = 0, changed = 0, oldest_dropped = 0;
  std::string first_bad, first_changed;  // "entry 3: ..."
  std::string not_a_list;                // the whole section is not a list: what it is

  // The value of "incidents" starts: `kind` a scalar's kind, or "an object" / "a list".
  void Start(bool list, const char* kind) {
    if (!list) not_a_list = kind;
  }

  // Within the list (depth 1: its entries). Returns false past what is held.
  void Value(json value, int depth) {
    if (depth == 1) {
      ++entries;
      Bad(std::string("it is ") + Kind(value) + ", not an incident");
      return;
    }
    Add(std::move(value));
  }
  void Open(bool object, int depth) {
    if (depth == 1) {
      ++entries;
      entry_ = object ? json::object() : json::array();
      open_.assign(1, &entry_);
      values_ = 0, too_deep_ = false, too_many_ = false;
      return;
    }
    if (depth > kMaxIncidentDepth) {
      too_deep_ = true;
      return;  // not held, only counted by the caller's depth
    }
    json* slot = Add(object ? json::object() : json::array());
    open_.push_back(slot);
  }
  void Close(int depth) {
    if (depth > kMaxIncidentDepth) return;
    if (!open_.empty()) open_.pop_back();
    if (depth == 1) Judge();
  }
  void Key(const std::string& name) { key_ = name; }

 private:
  static std::string Kind(const json& value) {
    switch (value.type()) {
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      case json::value_t::null: return "null";
      case json::value_t::object: return "an object";
      case json::value_t::array: return "a list";
      default: return "a number";
    }
  }

  // Adds `value` to the innermost open container; where it went (null when not held).
  json* Add(json value) {
    json* top = open_.empty() ? nullptr : open_.back();
    if (top == nullptr || too_deep_) return nullptr;
    if (++values_ > kMaxIncidentValues) {
      too_many_ = true;
      return nullptr;
    }
    if (value.is_string() && value.get_ref<std::string&>().size() > kMaxIncidentStringBytes) {
      value.get_ref<std::string&>().resize(kMaxIncidentStringBytes);
    }
    if (top->is_array()) {
      top->push_back(std::move(value));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(value);
    return &slot;
  }

  void Bad(const std::string& why) {
    if (bad++ == 0) first_bad = "entry " + std::to_string(entries - 1) + ": " + why;
  }

  void Judge() {
    std::string why;
    if (too_deep_) {
      why = "nested more than " + std::to_string(kMaxIncidentDepth) + " deep";
    } else if (too_many_) {
      why = "more than " + std::to_string(kMaxIncidentValues) + " values";
    }
    std::optional<Incident> incident;
    if (why.empty()) incident = IncidentFromJson(entry_, why);
    if (!incident) {
      Bad(platform::Printable(why, 200));
    } else {
      const std::string lost = LostOnReading(entry_, IncidentToJson(*incident), "");
      if (!lost.empty() && changed++ == 0) {
        first_changed = "entry " + std::to_string(entries - 1) + ": " + lost;
      }
      kept.push_back(std::move(*incident));
      if (kept.size() > kIncidentLogCapacity) {
        kept.pop_front();
        ++oldest_dropped;
      }
    }
    entry_ = nullptr;
    open_.clear();
  }

  json entry_;
  std::vector<json*> open_;  // the open containers of the entry, innermost last
  std::string key_;
  std::size_t values_ = 0;
  bool too_deep_ = false, too_many_ = false;
};

// Reads the document as the parser walks it (nlohmann's SAX interface) into BaselineSet and
// the incident log, keeping only what a configuration can use: no tree of the whole file is
// ever built, nesting costs a counter, and a bad incident log costs only the log. It never
// stops at a problem: a file from a newer xferd must be told by its version, which may come
// last.
class BaselineReader {
 public:
  using json = nlohmann::json;

  // At most this many values of each series are kept (the newest): the configuration's
  // baseline window, never more than kMaxValuesPerSeries.
  explicit BaselineReader(std::size_t keep_per_series) : keep_(keep_per_series) {}

  std::optional<std::int64_t> version;
  bool version_seen = false;
  std::string problem;  // the first thing wrong; empty when the file is whole and ours
  BaselineSet baselines;
  bool baselines_seen = false;
  IncidentLogReader incidents;
  bool incidents_seen = false;
  // What the file holds beyond what is kept: the daemon keeps a copy of such a file.
  std::size_t values_dropped = 0, series_cut = 0, longest_series = 0;
  std::vector<std::string> unknown_sections;  // top-level keys xferd does not write

  bool null() { return InLog() ? Logged(nullptr) : Scalar("null"); }
  bool boolean(bool v) { return InLog() ? Logged(v) : Scalar("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    return InLog() ? Logged(v) : Number(static_cast<double>(v), true, v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (InLog()) return Logged(v);
    return Number(static_cast<double>(v), v <= INT64_MAX, static_cast<std::int64_t>(v));
  }
  bool number_float(json::number_float_t v, const json::string_t&) {
    return InLog() ? Logged(v) : Number(v, false, 0);
  }
  bool string(json::string_t& v) { return InLog() ? Logged(std::move(v)) : Scalar("a string"); }
  bool binary(json::binary_t&) { return InLog() ? Logged(nullptr) : Scalar("binary data"); }

  bool start_object(std::size_t) { return Open(true); }
  bool start_array(std::size_t) { return Open(false); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(json::string_t& name) {
    if (InLog()) {
      incidents.Key(name);
      return true;
    }
    if (name.size() > kMaxNameBytes) {
      if (depth_ == 1 || in_baselines_)
        Problem("a name of " + std::to_string(name.size()) + " bytes");
      name.resize(kMaxNameBytes);
    }
    if (depth_ == 1) {
      root_key_ = name;
      if (std::find(kSectionsWritten.begin(), kSectionsWritten.end(), root_key_) ==
              kSectionsWritten.end() &&
          unknown_sections.size() < 8) {
        unknown_sections.push_back(platform::Printable(root_key_, 80));
      }
    } else if (depth_ == 2 && in_baselines_) {
      uuid_ = name;
    } else if (depth_ == 3 && in_gpu_) {
      series_ = name;
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    Problem("not valid JSON at byte " + std::to_string(position) + " (" + e.what() + ")");
    return false;
  }

 private:
  enum class Where { kRoot, kVersion, kBaselines, kIncidents, kGpu, kSeries, kValue, kElsewhere };

  // Inside the incident log's list: its depth there (1: an entry), 0 when outside it.
  bool InLog() const { return log_depth_ > 0; }
  bool Logged(json value) {
    incidents.Value(std::move(value), log_depth_);
    return true;
  }

  // What the value about to start is, from where the parser is.
  Where Here() const {
    if (depth_ == 0) return Where::kRoot;
    if (depth_ == 1 && root_is_object_) {
      if (root_key_ == "version") return Where::kVersion;
      if (root_key_ == "baselines") return Where::kBaselines;
      if (root_key_ == "incidents") return Where::kIncidents;
    }
    if (depth_ == 2 && in_baselines_) return Where::kGpu;
    if (depth_ == 3 && in_gpu_) return Where::kSeries;
    if (depth_ == 4 && in_series_) return Where::kValue;
    return Where::kElsewhere;
  }

  void Problem(std::string what) {
    if (problem.empty()) problem = std::move(what);
  }
  std::string Series() const {
    return platform::Printable(uuid_, 80) + "/" + platform::Printable(series_, 80);
  }

  bool Scalar(const char* kind) {
    switch (Here()) {
      case Where::kRoot: Problem("not a JSON object"); break;
      case Where::kVersion: version_seen = true; break;
      case Where::kBaselines:
        baselines_seen = true;
        Problem("\"baselines\" is not an object");
        break;
      case Where::kGpu:
        Problem("baselines of " + platform::Printable(uuid_, 80) + " not an object");
        break;
      case Where::kSeries: Problem(Series() + " not an array"); break;
      case Where::kValue: Problem(Series() + " holds " + kind + ", not a positive number"); break;
      case Where::kIncidents:
        incidents_seen = true;
        incidents.Start(false, kind);
        break;
      case Where::kElsewhere: break;
    }
    return true;
  }

  bool Number(double value, bool integral, std::int64_t as_integer) {
    const Where here = Here();
    if (here == Where::kVersion) {
      version_seen = true;
      if (integral) version = as_integer;
      return true;
    }
    if (here != Where::kValue) return Scalar("a number");
    if (!std::isfinite(value) || value <= 0) {
      Problem(Series() + " holds a value that is not a positive number");
      return true;
    }
    if (++kept_ > kMaxValuesKept) {
      Problem("more than " + std::to_string(kMaxValuesKept) +
              " values, more than any configuration keeps");
      return true;
    }
    values_.push_back(value);
    ++in_series_values_;
    // Only the last keep_ are used: drop the older ones as they come (counted, below).
    if (values_.size() >= 2 * keep_) {
      kept_ -= keep_;
      values_.erase(values_.begin(), values_.begin() + static_cast<long>(keep_));
    }
    return true;
  }

  bool Open(bool object) {
    if (InLog()) {
      incidents.Open(object, log_depth_++);
      ++depth_;
      return true;
    }
    switch (Here()) {
      case Where::kRoot:
        root_is_object_ = object;
        if (!object) Problem("not a JSON object");
        break;
      case Where::kVersion: version_seen = true; break;
      case Where::kBaselines:
        baselines_seen = true;
        in_baselines_ = object;
        if (!object) Problem("\"baselines\" is not an object");
        break;
      case Where::kGpu:
        in_gpu_ = object;
        if (!object) Problem("baselines of " + platform::Printable(uuid_, 80) + " not an object");
        break;
      case Where::kSeries:
        in_series_ = !object;
        values_.clear();
        in_series_values_ = 0;
        if (object) Problem(Series() + " not an array");
        break;
      case Where::kValue: Problem(Series() + " holds a value that is not a positive number"); break;
      case Where::kIncidents:
        incidents_seen = true;
        incidents.Start(!object, "an object");
        if (!object) log_depth_ = 1;
        break;
      case Where::kElsewhere: break;
    }
    ++depth_;
    return true;
  }

  bool Close() {
    --depth_;
    if (InLog()) {
      if (--log_depth_ > 0) incidents.Close(log_depth_);
      return true;
    }
    if (depth_ == 3 && in_series_) {
      in_series_ = false;
      if (values_.size() > keep_) {
        kept_ -= values_.size() - keep_;
        values_.erase(values_.begin(), values_.end() - static_cast<long>(keep_));
      }
      if (in_series_values_ > values_.size()) {
        values_dropped += in_series_values_ - values_.size();
        ++series_cut;
        longest_series = std::max(longest_series, in_series_values_);
      }
      if (!values_.empty()) {
        if (++series_count_ > kMaxSeries) {
          Problem("more than " + std::to_string(kMaxSeries) + " series");
        } else {
          baselines[uuid_][series_] = std::move(values_);
        }
      }
      values_ = {};
    } else if (depth_ == 2) {
      in_gpu_ = false;
    } else if (depth_ == 1) {
      in_baselines_ = false;
    }
    return true;
  }

  std::size_t keep_;
  std::size_t in_series_values_ = 0;  // values of the series being read, dropped ones too
  int depth_ = 0;
  int log_depth_ = 0;  // inside the incident log's list: 1 + the depth within it
  bool root_is_object_ = false, in_baselines_ = false, in_gpu_ = false, in_series_ = false;
  std::string root_key_, uuid_, series_;
  std::vector<double> values_;
  std::size_t kept_ = 0, series_count_ = 0;
};

// What the incident log of a file held that is not kept as it was ("" when all of it is),
// for the log.
std::string IncidentsDropped(const IncidentLogReader& log) {
  std::vector<std::string> parts;
  if (!log.not_a_list.empty()) {
    parts.push_back("\"incidents\" is " + log.not_a_list + ", not a list of incidents");
  }
  if (log.bad > 0) {
    parts.push_back(std::to_string(log.bad) + " of " + std::to_string(log.entries) +
                    " entries that are not incidents (" + log.first_bad + ")");
  }
  if (log.changed > 0) {
    parts.push_back(std::to_string(log.changed) + " entries holding more than this xferd keeps (" +
                    log.first_changed + ")");
  }
  if (log.oldest_dropped > 0) {
    parts.push_back("the oldest " + std::to_string(log.oldest_dropped) + " of " +
                    std::to_string(log.oldest_dropped + log.kept.size()) + " incidents (the log " +
                    "keeps the newest " + std::to_string(kIncidentLogCapacity) + ")");
  }
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : "; ") + part;
  return text;
}

// What a whole file holds that is not kept ("" when it is kept as it is), for the log.
std::string DroppedOnLoad(const BaselineReader& reader, const BoundedTokenBuffer& tokens,
                          std::size_t keep_per_series) {
  std::string dropped;
  if (reader.values_dropped > 0) {
    dropped = std::to_string(reader.values_dropped) + " older values of " +
              std::to_string(reader.series_cut) + " series longer than the " +
              std::to_string(keep_per_series) + " kept (health.baseline_window; the longest held " +
              std::to_string(reader.longest_series) + ")";
  }
  if (!reader.unknown_sections.empty()) {
    std::string names;
    for (const std::string& name : reader.unknown_sections) {
      names += (names.empty() ? "\"" : ", \"") + name + "\"";
    }
    if (!dropped.empty()) dropped += ", and ";
    dropped += "sections this xferd does not write (" + names + ")";
  }
  if (tokens.strings_cut > 0) {
    if (!dropped.empty()) dropped += ", and ";
    dropped += std::to_string(tokens.strings_cut) + " strings longer than " +
               std::to_string(kMaxStringBytes) + " bytes, read cut short (the longest held " +
               std::to_string(tokens.longest_string) + ")";
  }
  if (tokens.numbers_dropped > 0) {
    if (!dropped.empty()) dropped += ", and ";
    dropped += std::to_string(tokens.numbers_dropped) + " numbers written in more than " +
               std::to_string(kMaxNumberBytes) + " characters, read as null";
  }
  return dropped;
}

// Why a file that parsed (and is not from a newer xferd) is not a state file; "" when it is.
std::string CorruptionOf(const BaselineReader& reader) {
  if (!reader.problem.empty()) return reader.problem;
  if (!reader.version) return "no integer \"version\"";
  if (*reader.version < 1) return "version " + std::to_string(*reader.version) + " is not valid";
  if (!reader.baselines_seen) return "no \"baselines\" object";
  return "";
}

}  // namespace

StateFile::StateFile(std::filesystem::path dir) : dir_(std::move(dir)), path_(dir_ / kStateName) {}

StateLoad StateFile::Load(std::chrono::system_clock::time_point now, std::size_t keep_per_series) {
  namespace fs = std::filesystem;
  StateLoad out;
  std::error_code ec;

  // Temp files of a write that never reached its rename: the state file itself is whole.
  out.temp_files_removed = platform::RemoveAbandonedTempFiles(path_);

  if (!fs::exists(path_, ec)) {
    out.outcome = StateLoad::Outcome::kFresh;
    return out;
  }
  BaselineReader reader(std::clamp<std::size_t>(keep_per_series, 1, kMaxValuesPerSeries));
  std::unique_ptr<platform::BoundedFile> file;
  std::unique_ptr<BoundedTokenBuffer> tokens;
  try {
    file = std::make_unique<platform::BoundedFile>(path_, kMaxStateBytes, "state file");
    tokens = std::make_unique<BoundedTokenBuffer>(*file);
    std::istream in(tokens.get());
    nlohmann::json::sax_parse(in, &reader);
  } catch (const platform::FileError& e) {
    KeepUnreadable(e.error(), e.cause(), out);
    return out;
  }

  if (reader.version && *reader.version > kStateVersion) {
    KeepNewerVersion(*reader.version, out);
    return out;
  }
  const std::string problem = CorruptionOf(reader);
  if (!problem.empty()) {
    SetCorruptAside(problem, now, out);
    return out;
  }
  out.baselines = std::move(reader.baselines);
  out.outcome = StateLoad::Outcome::kLoaded;
  out.incidents.assign(std::make_move_iterator(reader.incidents.kept.begin()),
                       std::make_move_iterator(reader.incidents.kept.end()));
  const std::string dropped = DroppedOnLoad(reader, *tokens, keep_per_series);
  const std::string incidents_dropped = IncidentsDropped(reader.incidents);
  if (!dropped.empty() || !incidents_dropped.empty()) {
    KeepCopyBeforeDropping(dropped, incidents_dropped, now, out);
  }
  return out;
}

void StateFile::KeepUnreadable(int error, const std::string& cause, StateLoad& out) {
  persisting_ = false;
  out.outcome = StateLoad::Outcome::kUnreadable;
  if (error == 0) {
    // Not a regular file, or far too large: not something xferd wrote. Kept for a look.
    not_persisting_reason_ = "state file is not one xferd wrote";
    out.message = "state file " + platform::PrintablePath(path_.string(), 512) + ": " + cause +
                  ": keeping it untouched and learning baselines in memory only; move it "
                  "away and restart";
    return;
  }
  not_persisting_reason_ = "cannot read " + path_.string();
  out.message = "cannot read state file " + platform::PrintablePath(path_.string(), 512) + " (" +
                cause +
                "): keeping it untouched and learning baselines in memory only; fix its "
                "permissions (owner: the xferd user) and restart";
}

void StateFile::KeepNewerVersion(std::int64_t version, StateLoad& out) {
  persisting_ = false;
  not_persisting_reason_ = "state file from a newer xferd";
  out.outcome = StateLoad::Outcome::kFutureVersion;
  out.message = "state file " + platform::PrintablePath(path_.string(), 512) + " has version " +
                std::to_string(version) + ", newer than this xferd understands (" +
                std::to_string(kStateVersion) +
                "): keeping it untouched and learning baselines in memory only; upgrade "
                "xferd, or move the file away to start fresh";
}

// Read whole but not kept as it is: the next write would drop the rest, so the file as it
// was is kept beside it first, and the log says what goes and where the copy is. What the
// incident log loses is said apart (`out.incidents_message`): it costs only the log.
void StateFile::KeepCopyBeforeDropping(const std::string& dropped,
                                       const std::string& incidents_dropped,
                                       std::chrono::system_clock::time_point now, StateLoad& out) {
  const std::string file = platform::PrintablePath(path_.string(), 512);
  const auto say = [&](const std::string& kept) {
    if (!dropped.empty()) {
      out.message = "state file " + file + " holds more than xferd keeps: " + dropped + kept;
    }
    if (!incidents_dropped.empty()) {
      out.incidents_message = "state file " + file +
                              ": incident log: " + platform::Printable(incidents_dropped, 1000) +
                              kept + " (baselines are unaffected; " +
                              std::to_string(out.incidents.size()) + " incidents read)";
    }
  };
  try {
    out.set_aside = platform::KeepCopy(path_, "trimmed", now);
    say("; the file as it was is kept as " + platform::PrintablePath(out.set_aside.string(), 512) +
        ", and the next write keeps only the rest");
  } catch (const platform::FileError& e) {
    // Without a copy the file is not replaced: what it holds beyond the kept part stays.
    persisting_ = false;
    not_persisting_reason_ = "no copy could be kept of what it holds beyond what is kept";
    say(", and no copy of it could be kept (" + e.cause() +
        "); keeping it untouched and learning baselines in memory only");
  }
}

// Corrupt or truncated: keep it for inspection under a name of its own, start fresh.
void StateFile::SetCorruptAside(const std::string& problem_as_read,
                                std::chrono::system_clock::time_point now, StateLoad& out) {
  out.outcome = StateLoad::Outcome::kCorrupt;
  const std::string problem = platform::Printable(problem_as_read, 300);
  try {
    out.set_aside = platform::MoveAside(path_, "corrupt", now);
    out.message = "state file " + platform::PrintablePath(path_.string(), 512) + " is corrupt (" +
                  problem + "); moved it to " +
                  platform::PrintablePath(out.set_aside.string(), 512) +
                  " and started learning afresh";
  } catch (const platform::FileError& e) {
    // Not replaced by a write either: what is in it stays for a look.
    persisting_ = false;
    not_persisting_reason_ = "the corrupt state file could not be moved aside";
    out.message = "state file " + platform::PrintablePath(path_.string(), 512) + " is corrupt (" +
                  problem + ") and could not be moved aside (" + e.cause() +
                  "); keeping it untouched and learning baselines in memory only; move it away "
                  "and restart";
  }
}

std::string StateFile::KeepBeforeTrimming(const BaselineSet& held, std::size_t window,
                                          std::chrono::system_clock::time_point now) {
  std::size_t beyond = 0;
  for (const auto& [uuid, series] : held) {
    for (const auto& [key, values] : series) {
      if (values.size() > window) beyond += values.size() - window;
    }
  }
  std::error_code ec;
  if (beyond == 0 || !persisting_ || !std::filesystem::exists(path_, ec)) return "";
  const std::string what = "health.baseline_window is now " + std::to_string(window) + ": " +
                           std::to_string(beyond) + " older values go from the state file";
  try {
    return what + "; the file as it was is kept as " +
           platform::PrintablePath(platform::KeepCopy(path_, "trimmed", now).string(), 512);
  } catch (const platform::FileError& e) {
    return what + ", and no copy of it could be kept (" + e.cause() + ")";
  }
}

StateWrite StateFile::Save(const BaselineSet& baselines,
                           std::chrono::system_clock::time_point now) {
  return Save(baselines, {}, now);
}

StateWrite StateFile::Save(const BaselineSet& baselines, const std::vector<Incident>& incidents,
                           std::chrono::system_clock::time_point now) {
  namespace fs = std::filesystem;
  StateWrite out;
  if (!persisting_) {
    out.ok = false;
    out.skipped = true;
    out.error = "not writing " + path_.string() + ": " + not_persisting_reason_;
    return out;
  }
  const std::string fix = "; make " + dir_.string() +
                          " writable by the xferd user (systemd: StateDirectory=xferd) or "
                          "point --state-dir / [daemon] state_dir elsewhere; baselines are "
                          "kept in memory meanwhile";

  nlohmann::json doc;
  doc["version"] = kStateVersion;
  doc["written_at"] = UtcStamp(now, "%Y-%m-%dT%H:%M:%SZ");
  nlohmann::json b = nlohmann::json::object();
  for (const auto& [uuid, series] : baselines) {
    for (const auto& [key, medians] : series) b[uuid][key] = medians;
  }
  doc["baselines"] = std::move(b);
  if (!incidents.empty()) {
    nlohmann::json log = nlohmann::json::array();
    for (const Incident& incident : incidents) log.push_back(IncidentToJson(incident));
    doc["incidents"] = std::move(log);
  }
  const std::string text = doc.dump(1) + "\n";

  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    out.ok = false;
    out.error = "cannot create state directory " + dir_.string() + " (" + ec.message() + ")" + fix;
    return out;
  }

  try {
    // Baselines are not secret; operators may read them.
    platform::WriteFileAtomically(
        path_, text,
        {"state file", 0644, "--state-dir / [daemon] state_dir", "systemd: StateDirectory=xferd"});
  } catch (const platform::FileError& e) {
    out.ok = false;
    out.error = std::string(e.what()) + "; baselines are kept in memory meanwhile";
  }
  return out;
}

}  // namespace xferd::core
