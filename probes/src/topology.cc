#include "xferd/probes/topology.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>

#include "platform/files.h"

namespace xferd::probes {
namespace {

namespace fs = std::filesystem;

struct PcieGeneration {
  double gigatransfers_per_s;
  double encoding_efficiency;
};

// Index = generation - 1.
constexpr std::array<PcieGeneration, 6> kGenerations = {{
    {2.5, 8.0 / 10.0},
    {5.0, 8.0 / 10.0},
    {8.0, 128.0 / 130.0},
    {16.0, 128.0 / 130.0},
    {32.0, 128.0 / 130.0},
    {64.0, 242.0 / 256.0},  // FLIT mode: 242 payload bytes in every 256-byte flit
}};

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

bool IsHex(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(),
                                      [](unsigned char c) { return std::isxdigit(c) != 0; });
}

// The first line of a sysfs attribute; nullopt when it cannot be read.
std::optional<std::string> ReadAttribute(const fs::path& file) {
  // sysfs attributes are a line; a page is the most the kernel hands out.
  const std::optional<std::string> text = platform::TryReadFileBounded(file, 4096);
  if (!text) return std::nullopt;
  return std::string(Trim(std::string_view(*text).substr(0, text->find('\n'))));
}

void AddNote(LinkPath& path, const std::string& note) {
  if (!path.note.empty()) path.note += "; ";
  path.note += note;
}

PcieLink ReadLink(const fs::path& dir, LinkPath& path) {
  PcieLink link;
  link.bdf = dir.filename().string();
  const auto current_speed = ReadAttribute(dir / "current_link_speed");
  const auto current_width = ReadAttribute(dir / "current_link_width");
  const auto max_speed = ReadAttribute(dir / "max_link_speed");
  const auto max_width = ReadAttribute(dir / "max_link_width");
  if (current_speed) link.current_gen = ParseLinkSpeed(*current_speed);
  if (current_width) link.current_width = ParseLinkWidth(*current_width);
  if (max_speed) link.max_gen = ParseLinkSpeed(*max_speed);
  if (max_width) link.max_width = ParseLinkWidth(*max_width);
  if (!current_speed && !current_width) {
    AddNote(path, link.bdf + ": no link attributes in sysfs (not a PCIe link?)");
  } else if (link.current_gen == 0 || link.current_width == 0) {
    AddNote(path, link.bdf + ": link speed/width unknown (\"" + current_speed.value_or("") +
                      "\", \"" + current_width.value_or("") + "\")");
  }
  return link;
}

}  // namespace

bool LooksLikeBdf(std::string_view name) {
  const auto dot = name.rfind('.');
  if (dot == std::string_view::npos || dot + 2 != name.size()) return false;
  if (name[dot + 1] < '0' || name[dot + 1] > '7') return false;
  const std::string_view head = name.substr(0, dot);  // domain:bus:device
  const auto c2 = head.rfind(':');
  if (c2 == std::string_view::npos || c2 == 0) return false;
  const auto c1 = head.rfind(':', c2 - 1);
  if (c1 == std::string_view::npos) return false;
  const auto domain = head.substr(0, c1);
  const auto bus = head.substr(c1 + 1, c2 - c1 - 1);
  const auto device = head.substr(c2 + 1);
  return domain.size() >= 4 && IsHex(domain) && bus.size() == 2 && IsHex(bus) &&
         device.size() == 2 && IsHex(device);
}

std::string NormalizeBdf(std::string_view bdf) {
  std::string out = Lower(Trim(bdf));
  if (std::count(out.begin(), out.end(), ':') == 1) out = "0000:" + out;
  const auto colon = out.find(':');
  if (colon != std::string::npos && colon > 4) {
    const std::string_view extra(out.data(), colon - 4);
    if (std::all_of(extra.begin(), extra.end(), [](char c) { return c == '0'; })) {
      out.erase(0, colon - 4);
    }
  }
  return out;
}

double PcieBytesPerSecond(int generation, int width) {
  if (generation < 1 || generation > static_cast<int>(kGenerations.size()) || width <= 0) {
    return 0.0;
  }
  const PcieGeneration& g = kGenerations[generation - 1];
  return g.gigatransfers_per_s * 1e9 * width * g.encoding_efficiency / 8.0;
}

int ParseLinkSpeed(std::string_view text) {
  text = Trim(text);
  double rate = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), rate);
  if (ec != std::errc() || ptr == text.data()) return 0;
  // What follows the number must be the unit; "16.0 GT/s PCIe" and "16.0GT/s" both occur.
  std::string_view rest = Trim(std::string_view(ptr, text.data() + text.size() - ptr));
  if (!rest.starts_with("GT/s")) return 0;
  for (std::size_t i = 0; i < kGenerations.size(); ++i) {
    if (std::fabs(kGenerations[i].gigatransfers_per_s - rate) < 0.01) {
      return static_cast<int>(i) + 1;
    }
  }
  return 0;
}

int ParseLinkWidth(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && (text.front() == 'x' || text.front() == 'X')) text.remove_prefix(1);
  int width = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), width);
  if (ec != std::errc() || ptr != text.data() + text.size() || width < 0) return 0;
  return width;
}

std::string FormatLink(int generation, int width) {
  return "Gen" + (generation > 0 ? std::to_string(generation) : std::string("?")) + " x" +
         (width > 0 ? std::to_string(width) : std::string("?"));
}

double PcieLink::CurrentBytesPerSecond() const {
  return PcieBytesPerSecond(current_gen, current_width);
}

double PcieLink::MaxBytesPerSecond() const {
  return PcieBytesPerSecond(max_gen, max_width);
}

namespace {

// The lower of two maxima, either of which may be unknown (0).
int LowerKnown(int a, int b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

}  // namespace

int PcieLink::LinkMaxGen() const {
  return LowerKnown(max_gen, other_end_max_gen);
}

int PcieLink::LinkMaxWidth() const {
  return LowerKnown(max_width, other_end_max_width);
}

double PcieLink::LinkMaxBytesPerSecond() const {
  return PcieBytesPerSecond(LinkMaxGen(), LinkMaxWidth());
}

bool PcieLink::Downtrained() const {
  const int gen = LinkMaxGen(), width = LinkMaxWidth();
  if (current_gen == 0 || current_width == 0 || gen == 0 || width == 0) return false;
  return current_gen < gen || current_width < width;
}

bool PcieLink::CappedByOtherEnd() const {
  return (max_gen > 0 && other_end_max_gen > 0 && max_gen > other_end_max_gen) ||
         (max_width > 0 && other_end_max_width > 0 && max_width > other_end_max_width);
}

void PairLinkEnds(LinkPath& path) {
  for (std::size_t i = 0; i + 1 < path.links.size(); i += 2) {
    PcieLink& lower = path.links[i];
    PcieLink& upper = path.links[i + 1];
    lower.other_end_bdf = upper.bdf;
    lower.other_end_max_gen = upper.max_gen;
    lower.other_end_max_width = upper.max_width;
    upper.other_end_bdf = lower.bdf;
    upper.other_end_max_gen = lower.max_gen;
    upper.other_end_max_width = lower.max_width;
  }
}

namespace {
// The link of `links` with the lowest known (positive) `rate`; nullptr when none is known.
const PcieLink* LowestRate(const std::vector<PcieLink>& links, double (PcieLink::*rate)() const) {
  const PcieLink* lowest = nullptr;
  for (const PcieLink& link : links) {
    const double r = (link.*rate)();
    if (r > 0 && (lowest == nullptr || r < (lowest->*rate)())) lowest = &link;
  }
  return lowest;
}
}  // namespace

const PcieLink* LinkPath::Narrowest() const {
  return LowestRate(links, &PcieLink::CurrentBytesPerSecond);
}

const PcieLink* LinkPath::NarrowestMax() const {
  return LowestRate(links, &PcieLink::LinkMaxBytesPerSecond);
}

LinkPath ReadLinkPath(const fs::path& sysfs_root, std::string_view bdf) {
  LinkPath path;
  if (Trim(bdf).empty()) {
    path.pcie = false;
    path.note = "no PCI bus id: an integrated GPU or a device without a PCIe link";
    return path;
  }
  const std::string address = NormalizeBdf(bdf);
  if (!LooksLikeBdf(address)) {
    path.note = "\"" + std::string(bdf) + "\" is not a PCI address (want 0000:01:00.0)";
    return path;
  }
  const fs::path entry = sysfs_root / "bus" / "pci" / "devices" / address;
  std::error_code ec;
  // /sys/bus/pci/devices/<bdf> links to /sys/devices/pci0000:00/<bridges>/<bdf>: the
  // directories above it are the bridges on the way to the root port.
  fs::path device = fs::canonical(entry, ec);
  if (ec) {
    path.note = "no PCI device " + address + " under " + (sysfs_root / "bus/pci/devices").string() +
                " (is sysfs mounted, or --sysfs-root right?)";
    return path;
  }

  if (auto numa = ReadAttribute(device / "numa_node")) {
    int node = -1;
    auto [ptr, parse_ec] = std::from_chars(numa->data(), numa->data() + numa->size(), node);
    if (parse_ec == std::errc() && node >= 0) path.numa_node = node;
  }
  if (fs::exists(device / "iommu_group", ec)) {
    // A group without a type file (older kernels) still means translation is on.
    path.iommu_type = ReadAttribute(device / "iommu_group" / "type").value_or("DMA");
  }

  for (fs::path dir = device; LooksLikeBdf(dir.filename().string()); dir = dir.parent_path()) {
    path.links.push_back(ReadLink(dir, path));
    if (dir.parent_path() == dir) break;
  }
  PairLinkEnds(path);
  return path;
}

std::string_view ToString(HostLink link) {
  switch (link) {
    case HostLink::kPcie: return "pcie";
    case HostLink::kC2c: return "c2c";
    case HostLink::kIntegrated: return "integrated";
  }
  return "pcie";
}

HostLink HostLinkOf(const DeviceInfo& device) {
  if (device.integrated) return HostLink::kIntegrated;
  return device.c2c ? HostLink::kC2c : HostLink::kPcie;
}

}  // namespace xferd::probes
