#include "core/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/band.h"

namespace xferd::core {
namespace {

// Slower than this and a one-shot probe is taken for stuck (Deadlines::kStretchedToSize).
constexpr double kSlowestPlausibleBytesPerSecond = 0.5e9;

bool EqualIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool Has(const std::vector<probes::TransferMode>& modes, probes::TransferMode mode) {
  return std::find(modes.begin(), modes.end(), mode) != modes.end();
}

}  // namespace

UnknownGpuError::UnknownGpuError(std::string gpu, std::string known)
    : std::runtime_error(fmt::format("no GPU \"{}\" on this machine; found: {}", gpu, known)),
      gpu_(std::move(gpu)),
      known_(std::move(known)) {}

bool NamesDevice(std::string_view id, const probes::DeviceInfo& device) {
  return id == std::to_string(device.index) ||
         (!device.uuid.empty() && EqualIgnoringCase(id, device.uuid));
}

std::vector<probes::DeviceInfo> SelectDevices(const std::vector<probes::DeviceInfo>& devices,
                                              const std::vector<std::string>& ids) {
  if (ids.empty()) return devices;
  std::vector<probes::DeviceInfo> selected;
  for (const std::string& id : ids) {
    auto it = std::find_if(devices.begin(), devices.end(),
                           [&](const probes::DeviceInfo& d) { return NamesDevice(id, d); });
    if (it == devices.end()) {
      std::string known;
      for (const auto& d : devices) {
        known += fmt::format("{}{} ({})", known.empty() ? "" : ", ", d.index, d.uuid);
      }
      throw UnknownGpuError(id, known.empty() ? "none" : known);
    }
    if (std::none_of(selected.begin(), selected.end(),
                     [&](const auto& d) { return d.index == it->index; })) {
      selected.push_back(*it);
    }
  }
  return selected;
}

std::uint64_t PlannedSize(const Settings& settings, std::uint64_t size_bytes,
                          double link_bytes_per_s) {
  if (!settings.sizes_follow_link) return size_bytes;
  return ScaledToLink(size_bytes, link_bytes_per_s, kSizeReferenceBytesPerSecond);
}

std::vector<probes::ProbeSpec> PlanProbes(const Settings& settings, Deadlines deadlines,
                                          double link_bytes_per_s) {
  std::vector<probes::ProbeSpec> plan;
  const bool bidirectional =
      settings.bidirectional && Has(settings.modes, probes::TransferMode::kPinned);
  std::vector<std::uint64_t> planned;  // sizes already planned: two may scale to one
  for (std::uint64_t configured : settings.sizes) {
    const std::uint64_t size = PlannedSize(settings, configured, link_bytes_per_s);
    if (std::find(planned.begin(), planned.end(), size) != planned.end()) continue;
    planned.push_back(size);
    auto add = [&](probes::TransferMode mode, probes::Direction direction) {
      probes::ProbeSpec spec;
      spec.mode = mode;
      spec.direction = direction;
      spec.size_bytes = size;
      spec.iterations = settings.iterations;
      spec.warmup = settings.warmup;
      spec.target_device_s = std::chrono::duration<double>(settings.probe_time).count();
      spec.min_iterations =
          std::clamp(settings.min_iterations, 1, std::max(1, settings.iterations));
      spec.deadline = settings.probe_deadline;
      spec.streams = settings.streams;
      spec.chunk_bytes = settings.chunk_bytes;
      if (deadlines == Deadlines::kStretchedToSize) {
        const double bytes = static_cast<double>(size) * (spec.iterations + spec.warmup) *
                             (direction == probes::Direction::kBidirectional ? 2 : 1);
        spec.deadline = std::max(spec.deadline,
                                 std::chrono::milliseconds(static_cast<std::int64_t>(
                                     std::ceil(bytes / kSlowestPlausibleBytesPerSecond * 1000))));
      }
      plan.push_back(spec);
    };
    for (probes::TransferMode mode : settings.modes) {
      add(mode, probes::Direction::kH2D);
      add(mode, probes::Direction::kD2H);
    }
    if (bidirectional) add(probes::TransferMode::kPinned, probes::Direction::kBidirectional);
  }
  return plan;
}

bool IsHeadline(const probes::ProbeSpec& spec, const Settings& settings) {
  if (spec.direction == probes::Direction::kBidirectional || settings.modes.empty()) return false;
  const bool pinned = Has(settings.modes, probes::TransferMode::kPinned);
  return spec.mode == (pinned ? probes::TransferMode::kPinned : settings.modes.front());
}

bool KeepsHistogram(const probes::ProbeSpec& spec, const Settings& settings) {
  return settings.histograms == Settings::Histograms::kAll || IsHeadline(spec, settings);
}

}  // namespace xferd::core
