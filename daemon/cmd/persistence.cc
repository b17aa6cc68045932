#include "cmd/persistence.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <system_error>
#include <utility>

#include "exporter/exposition.h"
#include "exporter/textfile.h"
#include "platform/files.h"
#include "platform/printable.h"

namespace xferd::cmd {

Persistence::Persistence(core::StateFile& state, const core::HealthTracker& health,
                         const core::IncidentLog& incidents, exporter::Metrics& metrics,
                         std::function<std::shared_ptr<const config::Config>()> config)
    : state_(state),
      health_(health),
      incidents_(incidents),
      metrics_(metrics),
      config_(std::move(config)) {}

void Persistence::OnCycleEnd(const core::CycleReport& report, const core::Settings& settings) {
  (void)report, (void)settings;
  SaveState();
  WriteTextfile(*config_());
}

void Persistence::SaveState() {
  const core::StateWrite w = state_.Save(health_.Snapshot(), incidents_.Incidents());
  if (w.skipped) return;
  metrics_.RecordStateWrite(w.ok);
  // Said when it starts and stops failing, not every cycle (intervals can be short).
  if (!w.ok && !state_write_failing_) {
    spdlog::error("state: {} (said once; xferd_state_write_errors_total counts each failure)",
                  w.error);
  } else if (w.ok && state_write_failing_) {
    spdlog::info("state: writing {} works again", state_.path().string());
  }
  state_write_failing_ = !w.ok;
}

void Persistence::WriteTextfile(const config::Config& config) {
  if (config.textfile_path.empty()) return;
  if (config.textfile_path != textfile_swept_) {
    // Once per path (at start, and when a reload names another): what writes of an earlier
    // run interrupted by a crash left beside it, and only that (platform/files.h).
    textfile_swept_ = config.textfile_path;
    if (const std::size_t removed = platform::RemoveAbandonedTempFiles(config.textfile_path)) {
      spdlog::info(
          "textfile: removed {} temporary file(s) ({}*) that writes interrupted by a "
          "crash left",
          removed,
          (config.textfile_path.parent_path() / platform::AtomicTempPrefix(config.textfile_path))
              .string());
    }
  }
  std::error_code ec;
  if (std::filesystem::is_symlink(config.textfile_path, ec)) {
    // Said once per link: the write replaces it with the file itself (platform/files.h).
    const auto target = std::filesystem::read_symlink(config.textfile_path, ec);
    spdlog::warn(
        "textfile: {} is a symbolic link (to {}); it is replaced by a regular file of "
        "xferd's own mode (0644) and group: xferd never writes through a link, nor "
        "takes its target's permissions; point [daemon] textfile_path at the file "
        "node_exporter reads",
        platform::PrintablePath(config.textfile_path.string()),
        platform::PrintablePath(target.string()));
  }
  try {
    exporter::WriteTextfile(
        config.textfile_path,
        exporter::RenderExposition(exporter::Collectables{metrics_.Exposition()}, "xferd_"));
    if (textfile_failing_) {
      spdlog::info("textfile: writing {} works again", config.textfile_path.string());
    }
    textfile_failing_ = false;
  } catch (const std::exception& e) {
    metrics_.RecordTextfileWrite(false);
    if (!textfile_failing_) spdlog::error("textfile: {}", e.what());
    textfile_failing_ = true;
  }
}

}  // namespace xferd::cmd
