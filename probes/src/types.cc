#include "xferd/probes/types.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <vector>

#include "xferd/probes/stats.h"

namespace xferd::probes {

std::vector<std::pair<TransferMode, Direction>> AllModeDirections() {
  std::vector<std::pair<TransferMode, Direction>> pairs;
  for (TransferMode mode : kAllModes) {
    pairs.emplace_back(mode, Direction::kH2D);
    pairs.emplace_back(mode, Direction::kD2H);
    if (mode == TransferMode::kPinned) pairs.emplace_back(mode, Direction::kBidirectional);
  }
  return pairs;
}

namespace {

// Each value's name: what metrics, config and JSON call it. ToString and Parse both read it.
constexpr std::pair<TransferMode, std::string_view> kModeNames[] = {
    {TransferMode::kPageable, "pageable"},
    {TransferMode::kPinned, "pinned"},
    {TransferMode::kPinnedAsync, "pinned_async"},
    {TransferMode::kZeroCopy, "zero_copy"},
    {TransferMode::kManaged, "managed"},
    {TransferMode::kManagedPrefetch, "managed_prefetch"}};
constexpr std::pair<Direction, std::string_view> kDirectionNames[] = {
    {Direction::kH2D, "h2d"}, {Direction::kD2H, "d2h"}, {Direction::kBidirectional, "bidir"}};
constexpr std::pair<ProbeStatus, std::string_view> kStatusNames[] = {
    {ProbeStatus::kOk, "ok"},
    {ProbeStatus::kError, "error"},
    {ProbeStatus::kTimeout, "timeout"},
    {ProbeStatus::kUnsupported, "unsupported"}};
constexpr std::pair<ContentionState, std::string_view> kContentionNames[] = {
    {ContentionState::kUnknown, "unknown"},
    {ContentionState::kClear, "clear"},
    {ContentionState::kContended, "contended"}};

template <typename T, std::size_t N>
std::string_view NameOf(const std::pair<T, std::string_view> (&names)[N], T value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return "unknown";
}

template <typename T, std::size_t N>
std::optional<T> ValueOf(const std::pair<T, std::string_view> (&names)[N], std::string_view text) {
  for (const auto& [v, name] : names) {
    if (name == text) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string_view ToString(TransferMode mode) {
  return NameOf(kModeNames, mode);
}
std::string_view ToString(Direction direction) {
  return NameOf(kDirectionNames, direction);
}
std::string_view ToString(ProbeStatus status) {
  return NameOf(kStatusNames, status);
}

std::string_view ToString(ContentionState state) {
  return NameOf(kContentionNames, state);
}

std::pair<double, double> ProbeSample::OwnLinkBytes() const {
  if (link_h2d_bytes > 0 || link_d2h_bytes > 0) {
    return {static_cast<double>(link_h2d_bytes), static_cast<double>(link_d2h_bytes)};
  }
  // The warm-ups and the timed transfers that ran (a device-time target may stop short of
  // `iterations`; a sample without durations counts what the spec asks for).
  const int timed = spec.target_device_s > 0 && !durations_s.empty()
                        ? static_cast<int>(durations_s.size())
                        : spec.iterations;
  const double bytes =
      static_cast<double>(spec.size_bytes) * static_cast<double>(spec.warmup + timed);
  switch (spec.direction) {
    case Direction::kH2D: return {bytes, 0.0};
    case Direction::kD2H: return {0.0, bytes};
    case Direction::kBidirectional: return {bytes, bytes};
  }
  return {0.0, 0.0};
}

std::string AllModeNames() {
  std::string out;
  for (TransferMode mode : kAllModes) {
    if (!out.empty()) out += ", ";
    out += ToString(mode);
  }
  return out;
}

std::optional<TransferMode> ParseMode(std::string_view text) {
  return ValueOf(kModeNames, text);
}

std::optional<Direction> ParseDirection(std::string_view text) {
  return ValueOf(kDirectionNames, text);
}

bool IsValidPair(TransferMode mode, Direction direction) {
  return direction != Direction::kBidirectional || mode == TransferMode::kPinned;
}

bool IsLinkBound(TransferMode mode) {
  return mode == TransferMode::kPinned || mode == TransferMode::kPinnedAsync ||
         mode == TransferMode::kZeroCopy || mode == TransferMode::kManagedPrefetch;
}

bool IsLinkBound(TransferMode mode, Direction direction) {
  if (mode == TransferMode::kManagedPrefetch && direction == Direction::kD2H) return false;
  return IsLinkBound(mode);
}

std::string FormatSize(std::uint64_t bytes) {
  constexpr std::pair<std::uint64_t, const char*> kUnits[] = {
      {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  for (const auto& [unit, suffix] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes) + "B";
}

std::optional<std::uint64_t> ParseSize(std::string_view text) {
  std::uint64_t value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  std::string unit(ptr, end);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = 1ull << 10;
  else if (unit == "m" || unit == "mib")
    scale = 1ull << 20;
  else if (unit == "g" || unit == "gib")
    scale = 1ull << 30;
  else
    return std::nullopt;
  if (value > UINT64_MAX / scale) return std::nullopt;
  return value * scale;
}

std::string SpecProblem(const ProbeSpec& spec) {
  if (!IsValidPair(spec.mode, spec.direction)) {
    return std::string("mode ") + std::string(ToString(spec.mode)) + " has no direction " +
           std::string(ToString(spec.direction)) + " (only pinned runs both ways at once)";
  }
  if (spec.size_bytes == 0) {
    return "a probe of 0 bytes measures nothing: give a size of 1 KiB or more";
  }
  if (spec.iterations < 1) return "iterations must be at least 1";
  if (spec.warmup < 0) return "warmup must not be negative";
  if (!(spec.target_device_s >= 0)) return "a probe's device-time target must not be negative";
  if (spec.mode == TransferMode::kPinnedAsync) {
    if (spec.chunk_bytes < kMinChunkBytes) {
      return "pinned_async chunks of " + FormatSize(spec.chunk_bytes) + " are below the " +
             FormatSize(kMinChunkBytes) +
             " minimum: smaller chunks measure launch overhead, not the link";
    }
    if (spec.streams < 1 || spec.streams > kMaxStreams) {
      return "pinned_async needs 1 to " + std::to_string(kMaxStreams) + " streams, not " +
             std::to_string(spec.streams);
    }
  }
  return "";
}

bool IsLastTransfer(const ProbeSpec& spec, int index, double elapsed_s, double previous_s) {
  const int timed_after = index + 1 - spec.warmup;  // timed transfers once this one is done
  if (timed_after >= spec.iterations) return true;
  if (spec.target_device_s <= 0 || timed_after < std::max(1, spec.min_iterations)) return false;
  return elapsed_s + previous_s >= spec.target_device_s;
}

int ExpectedTransfers(const ProbeSpec& spec, double transfer_s) {
  const int most = std::max(0, spec.warmup) + std::max(1, spec.iterations);
  double elapsed = 0;
  for (int i = 0; i < most; ++i) {
    if (IsLastTransfer(spec, i, elapsed, i == 0 ? 0.0 : transfer_s)) return i + 1;
    elapsed += transfer_s;
  }
  return most;
}

double ProbeSample::MedianBandwidth() const {
  const double median = Median(durations_s);
  return median > 0 ? static_cast<double>(bytes_per_transfer) / median : 0.0;
}

}  // namespace xferd::probes
