#include "core/state_file.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <istream>
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
// The document nests 4 deep (root, baselines, GPU, series); far deeper is not ours.
constexpr int kMaxDepth = 64;
// The incident log holds kIncidentLogCapacity entries of ~20 values: a log of many more is
// not one xferd wrote. Its strings are held to a few hundred bytes when read
// (IncidentFromJson); longer ones are cut here already.
constexpr std::size_t kMaxIncidentValues = 1u << 14;
constexpr std::size_t kMaxIncidentStringBytes = 1024;
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

// The state file as a stream of bytes for the JSON parser, read through the bounded reader.
class StateFileBuffer : public std::streambuf {
 public:
  explicit StateFileBuffer(platform::BoundedFile& file) : file_(file) {}

 protected:
  int_type underflow() override {
    const std::size_t n = file_.Read(buffer_.data(), buffer_.size());
    if (n == 0) return traits_type::eof();
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(buffer_[0]);
  }

 private:
  platform::BoundedFile& file_;
  std::array<char, 65536> buffer_{};
};

// Reads the document as the parser walks it (nlohmann's SAX interface) into BaselineSet,
// keeping only what a configuration can use: no tree of the whole file is ever built. It
// never stops at the first problem (except nesting past kMaxDepth): a file from a newer
// xferd must be told by its version, which may come last.
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
  // The "incidents" array as it came (IncidentFromJson reads each entry), and what was
  // wrong with it as a whole; a problem here does not make the file corrupt.
  json incidents;
  bool incidents_seen = false;
  std::string incidents_problem;
  // What the file holds beyond what is kept: the daemon keeps a copy of such a file.
  std::size_t values_dropped = 0, series_cut = 0, longest_series = 0;
  std::vector<std::string> unknown_sections;  // top-level keys xferd does not write

  bool null() { return capture_.empty() ? Scalar("null") : Capture(nullptr); }
  bool boolean(bool v) { return capture_.empty() ? Scalar("a boolean") : Capture(v); }
  bool number_integer(json::number_integer_t v) {
    return capture_.empty() ? Number(static_cast<double>(v), true, v) : Capture(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (!capture_.empty()) return Capture(v);
    return Number(static_cast<double>(v), v <= INT64_MAX, static_cast<std::int64_t>(v));
  }
  bool number_float(json::number_float_t v, const json::string_t&) {
    return capture_.empty() ? Number(v, false, 0) : Capture(v);
  }
  bool string(json::string_t& v) {
    if (capture_.empty()) return Scalar("a string");
    if (v.size() > kMaxIncidentStringBytes) v.resize(kMaxIncidentStringBytes);
    return Capture(std::move(v));
  }
  bool binary(json::binary_t&) {
    return capture_.empty() ? Scalar("binary data") : Capture(nullptr);
  }

  bool start_object(std::size_t) { return Open(true); }
  bool start_array(std::size_t) { return Open(false); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(json::string_t& name) {
    if (!capture_.empty()) {
      if (name.size() > kMaxNameBytes) name.resize(kMaxNameBytes);
      capture_key_ = name;
      return true;
    }
    if (name.size() > kMaxNameBytes) {
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
        IncidentsProblem("\"incidents\" is not an array");
        break;
      case Where::kElsewhere: break;
    }
    return true;
  }

  void IncidentsProblem(std::string what) {
    if (incidents_problem.empty()) incidents_problem = std::move(what);
  }

  // Inside "incidents": each value is added to the container open at the top of capture_
  // (nullptr: one being skipped, past kMaxIncidentValues); returns where it went.
  json* Add(json value) {
    json* top = capture_.back();
    if (top == nullptr) return nullptr;
    if (++captured_ > kMaxIncidentValues) {
      IncidentsProblem("more than " + std::to_string(kMaxIncidentValues) +
                       " values in \"incidents\"");
      return nullptr;
    }
    if (top->is_array()) {
      top->push_back(std::move(value));
      return &top->back();
    }
    json& slot = (*top)[capture_key_];
    slot = std::move(value);
    return &slot;
  }
  bool Capture(json value) {
    Add(std::move(value));
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
    if (!capture_.empty()) {
      capture_.push_back(Add(object ? json::object() : json::array()));
      return Deeper();
    }
    const Where here = Here();
    switch (here) {
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
        if (object) {
          IncidentsProblem("\"incidents\" is not an array");
        } else {
          incidents = json::array();
          capture_.push_back(&incidents);
        }
        break;
      case Where::kElsewhere: break;
    }
    return Deeper();
  }

  bool Deeper() {
    if (++depth_ > kMaxDepth) {
      Problem("nested more than " + std::to_string(kMaxDepth) + " deep");
      return false;
    }
    return true;
  }

  bool Close() {
    --depth_;
    if (!capture_.empty()) {
      capture_.pop_back();
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
  bool root_is_object_ = false, in_baselines_ = false, in_gpu_ = false, in_series_ = false;
  std::string root_key_, uuid_, series_;
  std::vector<double> values_;
  std::size_t kept_ = 0, series_count_ = 0;
  std::vector<json*> capture_;  // the open containers inside "incidents", innermost last
  std::string capture_key_;
  std::size_t captured_ = 0;
};

// The incident log of a file that loaded: each entry IncidentFromJson accepts; the first
// problem, if any, in `out.incidents_message`.
void ReadIncidents(const BaselineReader& reader, const std::filesystem::path& path,
                   StateLoad& out) {
  std::string problem = reader.incidents_problem;
  if (problem.empty() && reader.incidents.is_array()) {
    std::size_t index = 0;
    for (const nlohmann::json& entry : reader.incidents) {
      std::string why;
      if (auto incident = IncidentFromJson(entry, why)) {
        out.incidents.push_back(std::move(*incident));
      } else if (problem.empty()) {
        problem = "entry " + std::to_string(index) + ": " + why;
      }
      ++index;
    }
  } else if (!problem.empty()) {
    out.incidents.clear();
  }
  if (problem.empty()) return;
  out.incidents_message =
      "state file " + platform::Printable(path.string(), 512) +
      ": incident log: " + platform::Printable(problem, 300) +
      (out.incidents.empty() ? "; starting an empty one" : "; that entry is left out") +
      " (baselines are unaffected)";
}

// What a whole file holds that is not kept ("" when it is kept as it is), for the log.
std::string DroppedOnLoad(const BaselineReader& reader, std::size_t keep_per_series) {
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
  try {
    platform::BoundedFile file(path_, kMaxStateBytes, "state file");
    StateFileBuffer buffer(file);
    std::istream in(&buffer);
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
  ReadIncidents(reader, path_, out);
  const std::string dropped = DroppedOnLoad(reader, keep_per_series);
  if (!dropped.empty()) KeepCopyBeforeDropping(dropped, now, out);
  return out;
}

void StateFile::KeepUnreadable(int error, const std::string& cause, StateLoad& out) {
  persisting_ = false;
  out.outcome = StateLoad::Outcome::kUnreadable;
  if (error == 0) {
    // Not a regular file, or far too large: not something xferd wrote. Kept for a look.
    not_persisting_reason_ = "state file is not one xferd wrote";
    out.message = "state file " + platform::Printable(path_.string(), 512) + ": " + cause +
                  ": keeping it untouched and learning baselines in memory only; move it "
                  "away and restart";
    return;
  }
  not_persisting_reason_ = "cannot read " + path_.string();
  out.message = "cannot read state file " + platform::Printable(path_.string(), 512) + " (" +
                cause +
                "): keeping it untouched and learning baselines in memory only; fix its "
                "permissions (owner: the xferd user) and restart";
}

void StateFile::KeepNewerVersion(std::int64_t version, StateLoad& out) {
  persisting_ = false;
  not_persisting_reason_ = "state file from a newer xferd";
  out.outcome = StateLoad::Outcome::kFutureVersion;
  out.message = "state file " + platform::Printable(path_.string(), 512) + " has version " +
                std::to_string(version) + ", newer than this xferd understands (" +
                std::to_string(kStateVersion) +
                "): keeping it untouched and learning baselines in memory only; upgrade "
                "xferd, or move the file away to start fresh";
}

// Read whole but not kept as it is: the next write would drop the rest, so the file as it
// was is kept beside it first, and the log says what goes and where the copy is.
void StateFile::KeepCopyBeforeDropping(const std::string& dropped,
                                       std::chrono::system_clock::time_point now, StateLoad& out) {
  const std::string file = platform::Printable(path_.string(), 512);
  try {
    out.set_aside = platform::KeepCopy(path_, "trimmed", now);
    out.message = "state file " + file + " holds more than xferd keeps: " + dropped +
                  "; the file as it was is kept as " +
                  platform::Printable(out.set_aside.string(), 512) +
                  ", and the next write keeps only the rest";
  } catch (const platform::FileError& e) {
    // Without a copy the file is not replaced: what it holds beyond the kept part stays.
    persisting_ = false;
    not_persisting_reason_ = "no copy could be kept of what it holds beyond what is kept";
    out.message = "state file " + file + " holds more than xferd keeps: " + dropped +
                  ", and no copy of it could be kept (" + e.cause() +
                  "); keeping it untouched and learning baselines in memory only";
  }
}

// Corrupt or truncated: keep it for inspection under a name of its own, start fresh.
void StateFile::SetCorruptAside(const std::string& problem_as_read,
                                std::chrono::system_clock::time_point now, StateLoad& out) {
  out.outcome = StateLoad::Outcome::kCorrupt;
  const std::string problem = platform::Printable(problem_as_read, 300);
  try {
    out.set_aside = platform::MoveAside(path_, "corrupt", now);
    out.message = "state file " + platform::Printable(path_.string(), 512) + " is corrupt (" +
                  problem + "); moved it to " + platform::Printable(out.set_aside.string(), 512) +
                  " and started learning afresh";
  } catch (const platform::FileError& e) {
    // Not replaced by a write either: what is in it stays for a look.
    persisting_ = false;
    not_persisting_reason_ = "the corrupt state file could not be moved aside";
    out.message = "state file " + platform::Printable(path_.string(), 512) + " is corrupt (" +
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
           platform::Printable(platform::KeepCopy(path_, "trimmed", now).string(), 512);
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
