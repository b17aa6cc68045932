// Evidence kept with an incident: when a GPU turns DEGRADED, what xferd saw goes into a
// record in <state_dir>/evidence/, so the technician who comes after a drain can read it
// (`xferd evidence`). A record holds each hop of the GPU's PCIe path (its link state and
// capability), the path's error counters before and during the streak, the readings that
// flipped the verdict and their times, NUMA and IOMMU facts, the driver version, and
// `lspci -vvv` of each device of the path where lspci is installed. docs/health.md
// ("Evidence records") has the record field by field; docs/reliability.md the file rules.
//
// Bounds: at most kEvidenceRecordsKept records (the oldest go when a new one is written),
// each at most kEvidenceRecordBytes (lspci's output is cut to kEvidenceLspciBytes per device
// and kEvidenceLspciTimeout for a record). The probe thread only copies what it saw into a
// queue of at most kEvidenceQueue records; one writer thread runs lspci and writes, so a
// slow lspci or disk never holds the probe loop up. A record that cannot be written (a
// full disk, the directory a link) is dropped, with a log line and a count; the daemon
// goes on. Files: written atomically (platform::WriteFileAtomically: no half record after a
// crash; what a crash left is removed at start), read back without following links and
// bounded; what is not a record of xferd's own (a link, a FIFO, another name) is never
// read, counted nor removed.
//
// Use (the service): EvidenceKeeper evidence(options, on_done); evidence.Start(); and it
// takes each GPU's judgement as a consumer of the core::CyclePipeline (OnJudged calls
// Observe with what the cycle saw and the incident it logged).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "core/cycle_pipeline.h"
#include "core/diagnosis.h"
#include "core/health_tracker.h"
#include "core/incident_log.h"
#include "core/link_errors.h"

namespace xferd::core {

inline constexpr std::size_t kEvidenceRecordsKept = 16;
inline constexpr std::size_t kEvidenceRecordBytes = 256 * 1024;
inline constexpr std::size_t kEvidenceLspciBytes = 16 * 1024;
inline constexpr std::chrono::seconds kEvidenceLspciTimeout{5};
inline constexpr std::size_t kEvidenceReadingsPerSeries = 8;
inline constexpr std::size_t kEvidenceLinkErrorReadings = 8;
inline constexpr std::size_t kEvidenceQueue = 4;
inline constexpr int kEvidenceVersion = 1;

// The evidence directory: the records' names and the rules for what in it is xferd's.
class EvidenceStore {
 public:
  explicit EvidenceStore(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  // "20261201T100000123Z-gpu0.json": the incident's time (UTC, milliseconds) and the GPU.
  static std::string RecordName(std::chrono::system_clock::time_point time, int gpu);
  // A name RecordName gives; the GPU index it names.
  static bool IsRecordName(std::string_view name);
  static std::optional<int> GpuOf(std::string_view name);

  struct Entry {
    std::string name;
    int gpu = 0;
    std::uintmax_t bytes = 0;
  };
  // The records: regular files (never a link) named as records, newest first. A directory
  // that does not exist has none.
  std::vector<Entry> List() const;
  // One record, at most kEvidenceRecordBytes (and a little), never through a link. Throws
  // platform::FileError naming the file and the cause.
  std::string Read(std::string_view name) const;

  // What writes of records interrupted by a crash left (platform::RemoveAbandonedTempFiles).
  std::size_t RemoveAbandoned() const;
  // Makes the directory (0750) when missing; throws platform::FileError when it cannot be,
  // or when something else is in its place (a link: xferd never writes through one).
  void Prepare() const;
  // Removes the oldest records past `keep`; returns their names.
  std::vector<std::string> Prune(std::size_t keep) const;

 private:
  std::filesystem::path dir_;
};

// What a record's writing came to, for the service (log, counter, the incident's link).
struct EvidenceWritten {
  int gpu = 0;
  std::string uuid;
  std::chrono::system_clock::time_point incident_time;
  std::string code, cause;  // the verdict's, as the record says
  std::string name;         // the record's file name
  std::filesystem::path path;
  bool ok = false;
  std::string problem;  // why it was dropped
  std::size_t bytes = 0;
  std::vector<std::string> pruned;  // older records removed to keep the bound
};

struct EvidenceOptions {
  std::filesystem::path dir;  // <state_dir>/evidence
  // lspci, where installed (nullopt: not run, the record says so). `xferd run` looks for it
  // in /usr/bin, /usr/sbin, /sbin and /bin.
  std::optional<std::filesystem::path> lspci;
  std::chrono::milliseconds lspci_timeout = kEvidenceLspciTimeout;
  std::size_t lspci_bytes = kEvidenceLspciBytes;
  // Where the host's facts are read: <root>/proc/cmdline, <root>/sys/module/nvidia/version.
  std::filesystem::path host_root = "/";
  std::size_t keep = kEvidenceRecordsKept;
  std::size_t max_bytes = kEvidenceRecordBytes;
  // How a record is written (default: platform::WriteFileAtomically): a seam for a disk
  // that fills up in tests.
  std::function<void(const std::filesystem::path&, std::string_view)> write;
};

class EvidenceKeeper final : public CycleConsumer {
 public:
  // `on_done` is called from the writer thread after each record, written or dropped.
  EvidenceKeeper(EvidenceOptions options, std::function<void(const EvidenceWritten&)> on_done);
  // Stops the writer: a record in progress ends early (lspci killed), the rest are dropped.
  ~EvidenceKeeper() override;
  EvidenceKeeper(const EvidenceKeeper&) = delete;
  EvidenceKeeper& operator=(const EvidenceKeeper&) = delete;

  // Removes what writes interrupted by a crash left and starts the writer. Returns how many
  // files it removed.
  std::size_t Start();

  // The probe thread, after each cycle or confirmation round of one GPU and
  // IncidentLog::Observe: keeps its readings (the last few of each series, the link's error
  // counters); when `incident` (the one Observe logged, if any) turned the GPU DEGRADED,
  // queues a record of it. Cheap: copies, no I/O.
  void Observe(const CycleObservation& observation, const DeviceHealth& health,
               const Incident* incident);
  // The pipeline's judgement of one GPU after a cycle or confirmation round (an expiry
  // measured nothing: no readings to keep).
  void OnJudged(const GpuJudgement& judgement) override {
    if (judgement.observation != nullptr) {
      Observe(*judgement.observation, judgement.health, judgement.logged);
    }
  }

  struct Stats {
    std::uint64_t written = 0, dropped = 0;
    std::string last_problem;  // the last drop's reason; "" when none
  };
  Stats GetStats() const;
  const std::filesystem::path& dir() const { return store_.dir(); }
  std::size_t keep() const { return options_.keep; }

  // Tests: waits until the queue is empty and the writer idle (at most `timeout`).
  bool WaitIdle(std::chrono::milliseconds timeout);

 private:
  struct Reading {
    std::chrono::system_clock::time_point time;
    probes::ProbeStatus status = probes::ProbeStatus::kOk;
    double bytes_per_s = 0;
    std::optional<bool> bad;  // as judged; nullopt for a reading the cycle re-measured
    bool contended = false, confirmation = false;
  };
  using SeriesKey = std::tuple<probes::TransferMode, probes::Direction, std::uint64_t>;
  struct Gpu {
    // Oldest first, kEvidenceReadingsPerSeries at most: a vector reserved once (a deque's
    // first node alone is 512 bytes, 850 KiB for 64 GPUs' series).
    std::map<SeriesKey, std::vector<Reading>> readings;
    // As read: made JSON only for a record (a JSON tree of every reading of 64 GPUs held
    // 2.4 MiB).
    std::deque<std::pair<std::chrono::system_clock::time_point, LinkErrorReading>> link_errors;
  };
  struct Job {
    EvidenceWritten what;
    nlohmann::json record;                // all but what the writer adds
    std::vector<std::string> lspci_bdfs;  // the devices of the path; empty: lspci not run
    std::string lspci_not_run;            // why not, when it is not
    bool simulated = false;
  };

  nlohmann::json Snapshot(const CycleObservation& observation, const DeviceHealth& health,
                          const Incident& incident, const Gpu& gpu) const;
  void Write(Job& job);
  void WriterLoop();
  void Done(const EvidenceWritten& what);

  EvidenceOptions options_;
  EvidenceStore store_;
  std::function<void(const EvidenceWritten&)> on_done_;
  std::map<std::string, Gpu> gpus_;  // by UUID; the probe thread only

  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;
  bool busy_ = false;
  std::atomic<bool> stop_{false};
  Stats stats_;
  std::thread writer_;
};

}  // namespace xferd::core
