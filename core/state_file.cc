#include "core/state_file.h"

#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <system_error>

#include "platform/files.h"

namespace xferd::core {
namespace {

constexpr const char* kStateName = "state.json";
// A few KiB per GPU; far more is not a state file xferd wrote.
constexpr std::size_t kMaxStateBytes = 64u << 20;

std::string UtcStamp(std::chrono::system_clock::time_point t, const char* format) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

// Parse and check the whole document; throws std::runtime_error naming what is wrong.
BaselineSet ParseBaselines(const nlohmann::json& doc) {
  if (!doc.contains("baselines") || !doc["baselines"].is_object()) {
    throw std::runtime_error("no \"baselines\" object");
  }
  BaselineSet out;
  for (const auto& [uuid, series] : doc["baselines"].items()) {
    if (!series.is_object()) throw std::runtime_error("baselines of " + uuid + " not an object");
    for (const auto& [key, medians] : series.items()) {
      if (!medians.is_array()) throw std::runtime_error(uuid + "/" + key + " not an array");
      std::vector<double> values;
      for (const auto& m : medians) {
        if (!m.is_number() || !std::isfinite(m.get<double>()) || m.get<double>() <= 0) {
          throw std::runtime_error(uuid + "/" + key +
                                   " holds a value that is not a positive "
                                   "number");
        }
        values.push_back(m.get<double>());
      }
      if (!values.empty()) out[uuid][key] = std::move(values);
    }
  }
  return out;
}

}  // namespace

StateFile::StateFile(std::filesystem::path dir) : dir_(std::move(dir)), path_(dir_ / kStateName) {}

StateLoad StateFile::Load(std::chrono::system_clock::time_point now) {
  namespace fs = std::filesystem;
  StateLoad out;
  std::error_code ec;

  // Temp files of a write that never reached its rename: the state file itself is whole.
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().filename().string().starts_with(platform::AtomicTempPrefix(path_))) {
      std::error_code ignored;
      fs::remove(entry.path(), ignored);
    }
  }

  if (!fs::exists(path_, ec)) {
    out.outcome = StateLoad::Outcome::kFresh;
    return out;
  }
  std::string text;
  try {
    text = platform::ReadFileBounded(path_, kMaxStateBytes, "state file");
  } catch (const platform::FileError& e) {
    if (e.error() == 0) {
      // Not a regular file, or far too large: not something xferd wrote. Kept for a look.
      persisting_ = false;
      not_persisting_reason_ = "state file is not one xferd wrote";
      out.outcome = StateLoad::Outcome::kUnreadable;
      out.message = "state file " + path_.string() + ": " + e.cause() +
                    ": keeping it untouched and learning baselines in memory only; move it "
                    "away and restart";
      return out;
    }
    persisting_ = false;
    not_persisting_reason_ = "cannot read " + path_.string();
    out.outcome = StateLoad::Outcome::kUnreadable;
    out.message = "cannot read state file " + path_.string() + " (" + e.cause() +
                  "): keeping it untouched and learning baselines in memory only; fix its "
                  "permissions (owner: the xferd user) and restart";
    return out;
  }

  std::string problem;
  try {
    const nlohmann::json doc = nlohmann::json::parse(text);
    if (!doc.is_object() || !doc.contains("version") || !doc["version"].is_number_integer()) {
      problem = "no integer \"version\"";
    } else {
      const int version = doc["version"].get<int>();
      if (version > kStateVersion) {
        persisting_ = false;
        not_persisting_reason_ = "state file from a newer xferd";
        out.outcome = StateLoad::Outcome::kFutureVersion;
        out.message = "state file " + path_.string() + " has version " + std::to_string(version) +
                      ", newer than this xferd understands (" + std::to_string(kStateVersion) +
                      "): keeping it untouched and learning baselines in memory only; upgrade "
                      "xferd, or move the file away to start fresh";
        return out;
      }
      if (version < 1) {
        problem = "version " + std::to_string(version) + " is not valid";
      } else {
        out.baselines = ParseBaselines(doc);
        out.outcome = StateLoad::Outcome::kLoaded;
        return out;
      }
    }
  } catch (const std::exception& e) {
    problem = e.what();
  }

  // Corrupt or truncated: keep it for inspection, start fresh.
  fs::path aside = path_;
  aside += ".corrupt-" + UtcStamp(now, "%Y%m%dT%H%M%SZ");
  out.outcome = StateLoad::Outcome::kCorrupt;
  fs::rename(path_, aside, ec);
  if (ec) {
    out.message = "state file " + path_.string() + " is corrupt (" + problem +
                  ") and could not be moved aside (" + ec.message() +
                  "); starting fresh, it will be replaced on the next write";
  } else {
    out.message = "state file " + path_.string() + " is corrupt (" + problem + "); moved it to " +
                  aside.string() + " and started learning afresh";
  }
  return out;
}

StateWrite StateFile::Save(const BaselineSet& baselines,
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
