// The Prometheus text exposition (format 0.0.4) of a set of collectables: what /metrics
// serves and what the node_exporter textfile holds. prometheus-cpp's TextSerializer does
// the formatting.
#pragma once

#include <prometheus/collectable.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xferd::exporter {

// Like prometheus::Exposer::RegisterCollectable: held weakly, so a collectable that is gone
// (a registry replaced on reload) drops out instead of dangling.
using Collectables = std::vector<std::weak_ptr<prometheus::Collectable>>;

inline constexpr std::string_view kExpositionContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Every family of every live collectable, in order. With `name_prefix`, only families
// whose name starts with it (e.g. "xferd_" for a textfile, where node_exporter already
// exports its own process_* metrics).
std::string RenderExposition(const Collectables& collectables, std::string_view name_prefix = {});

}  // namespace xferd::exporter
