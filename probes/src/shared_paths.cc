#include "xferd/probes/shared_paths.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

namespace xferd::probes {
namespace {

// A full link's leftover, relative to its capacity: rounding, not room.
constexpr double kFullFraction = 1e-9;

// The links of one path that have a known capacity, each once.
std::map<std::string, double> Capacities(const LinkPath& path, std::size_t index,
                                         LinkRate rate_of) {
  std::map<std::string, double> out;
  if (path.c2c) {
    out["c2c#" + std::to_string(index)] = kC2cBytesPerSecond;
    return out;
  }
  if (!path.pcie) return out;
  for (const PcieLink& link : path.links) {
    const double rate = rate_of(link);
    if (rate > 0) out.emplace(link.bdf, rate);
  }
  return out;
}

}  // namespace

double TrainedRate(const PcieLink& link) {
  return link.CurrentBytesPerSecond();
}

std::vector<double> FairShares(const std::vector<LinkPath>& paths, LinkRate rate_of) {
  std::vector<double> share(paths.size(), 0.0);
  std::vector<std::map<std::string, double>> links;
  std::map<std::string, double> room;  // what each link has left
  std::map<std::string, double> capacity;
  std::vector<bool> growing(paths.size(), false);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    links.push_back(Capacities(paths[i], i, rate_of));
    growing[i] = !links[i].empty();
    for (const auto& [key, rate] : links[i]) {
      room.emplace(key, rate);
      capacity.emplace(key, rate);
    }
  }
  for (;;) {
    std::map<std::string, int> users;
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (!growing[i]) continue;
      for (const auto& [key, rate] : links[i]) ++users[key];
    }
    if (users.empty()) break;
    double step = std::numeric_limits<double>::infinity();
    for (const auto& [key, n] : users) step = std::min(step, room[key] / n);
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (!growing[i]) continue;
      share[i] += step;
      for (const auto& [key, rate] : links[i]) room[key] -= step;
    }
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (!growing[i]) continue;
      for (const auto& [key, rate] : links[i]) {
        if (room[key] <= kFullFraction * capacity[key]) growing[i] = false;
      }
    }
  }
  return share;
}

double AggregateCapacity(const std::vector<LinkPath>& paths, LinkRate rate_of) {
  const std::vector<double> shares = FairShares(paths, rate_of);
  double sum = 0;
  for (double s : shares) {
    if (s <= 0) return 0;
    sum += s;
  }
  return sum;
}

}  // namespace xferd::probes
