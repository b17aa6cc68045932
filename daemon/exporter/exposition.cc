#include "exporter/exposition.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <sstream>

namespace xferd::exporter {

std::string RenderExposition(const Collectables& collectables, std::string_view name_prefix) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables) {
    const auto collectable = weak.lock();
    if (!collectable) continue;
    for (auto& family : collectable->Collect()) {
      if (family.name.compare(0, name_prefix.size(), name_prefix) != 0) continue;
      families.push_back(std::move(family));
    }
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace xferd::exporter
