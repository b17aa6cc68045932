#include "exporter/exposition.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <sstream>

namespace xferd::exporter {

std::string RenderExposition(const Collectables& collectables, std::string_view name_prefix) {
  std::string text;
  std::ostringstream family_text;
  const prometheus::TextSerializer serializer;
  for (const auto& weak : collectables) {
    const auto collectable = weak.lock();
    if (!collectable) continue;
    std::vector<prometheus::MetricFamily> families = collectable->Collect();
    // A family at a time, each let go once written: a 64-GPU host's registry is ~19,000
    // series, whose families cost several times their text; they and the text were all
    // held at once, and the text twice (a stream, then its copy).
    for (auto& family : families) {
      if (family.name.compare(0, name_prefix.size(), name_prefix) == 0) {
        family_text.str(std::string());
        serializer.Serialize(family_text, std::vector<prometheus::MetricFamily>{std::move(family)});
        text += family_text.view();
      }
      family = prometheus::MetricFamily{};
    }
  }
  return text;
}

}  // namespace xferd::exporter
