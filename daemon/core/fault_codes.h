// Stable fault codes and recommended actions: the one table that remediation systems
// (node-problem-detector's condition, a Slurm drain reason, NVSentinel, tickets) match on.
// Every cause (DiagnosisCause) has a code, and so has every state that is no verdict a
// remediation may act on (pending, stale, unknown, xferd itself unhealthy or unreachable).
// A code names one meaning for good: it is never renumbered, and never reused for another
// meaning once a cause is retired. docs/health.md ("Fault codes") is the table in words;
// tests/unit/core/fault_codes_test.cc holds the docs, the surfaces and the example
// remediation policy (deploy/kubernetes/remediation/) to it.
//
// The scheme, by hundreds:
//   1xx  the PCIe link on the GPU's path (trained down, erring, flapping)
//   2xx  the host's placement and settings (NUMA, IOMMU, staging)
//   3xx  bandwidth below what is expected, no cause xferd can name
//   5xx  notes: not a fault, never the reason of a verdict; nothing to act on
//   9xx  no verdict: nothing is known to act on (must not act; must not resume either)
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/diagnosis.h"

namespace xferd::core {

// What to do about a code, from a small fixed set. Read beside NVSentinel's
// RecommendedAction and gpud's RepairActionType (docs/health.md maps each onto theirs).
enum class RecommendedAction {
  kNone,           // "none": nothing to do on the node (a note, or no verdict)
  kDiagnose,       // "diagnose": bandwidth is low and xferd names no cause to fix: run a
                   // deeper diagnostic and read the evidence record
  kReboot,         // "reboot": a reset retrains the link; a code that comes back after one
                   // escalates to inspect_link
  kInspectLink,    // "inspect_link": re-seat or inspect the card, riser, cable and slot
  kFixHostConfig,  // "fix_host": the host's NUMA placement, IOMMU mode, memlock (no hardware)
  kReplace,        // "replace": RMA the GPU or the board; the end of the escalation
};
inline constexpr std::array<RecommendedAction, 6> kAllRecommendedActions = {
    RecommendedAction::kNone,          RecommendedAction::kDiagnose,
    RecommendedAction::kReboot,        RecommendedAction::kInspectLink,
    RecommendedAction::kFixHostConfig, RecommendedAction::kReplace};
std::string_view ToString(RecommendedAction action);
std::optional<RecommendedAction> ParseRecommendedAction(std::string_view text);

// States with a code that are no verdict to act on. Those a GPU can be in (pending, stale,
// the two unknowns) and those of xferd itself (`xferd health` cannot judge).
enum class NoVerdict {
  kPending,                // 900: no verdict yet (first cycle, re-judging after a restart)
  kStale,                  // 901: the GPU's headline readings are not current
  kConfidentialComputing,  // 902: confidential computing on, its GPUs not ready for work
  kMigNoInstance,          // 903: MIG enabled, no GPU instance to probe through
  kDaemonUnhealthy,        // 910: the probe loop is stuck or its last cycle is too old
  kDaemonUnreachable,      // 911: no answer, or an answer that is not a status document
};
inline constexpr std::array<NoVerdict, 6> kAllNoVerdicts = {
    NoVerdict::kPending,       NoVerdict::kStale,           NoVerdict::kConfidentialComputing,
    NoVerdict::kMigNoInstance, NoVerdict::kDaemonUnhealthy, NoVerdict::kDaemonUnreachable};

struct FaultCode {
  int number = 0;         // 101: shown as "XFERD-101"
  std::string_view name;  // the cause's label, or the state's name ("stale")
  std::string_view meaning;
  RecommendedAction action = RecommendedAction::kNone;
  // A remediation system may act on it (drain, reboot, a ticket). False for the notes and
  // every 9xx: acting on what xferd does not know would drain healthy nodes.
  bool acts = false;
  // Kept for a cause or state this build does not produce yet: the number is taken.
  bool reserved = false;
  std::string Code() const;  // "XFERD-101"
};

// Degraded, and no cause named: the GPU is on its way back (its last reading good), or the
// daemon names a cause this xferd does not know.
inline constexpr int kDegradedNoCauseCode = 300;

// The table, in number order: every cause, every state, the reserved numbers.
std::span<const FaultCode> AllFaultCodes();
const FaultCode& FaultOf(DiagnosisCause cause);
const FaultCode& FaultOf(NoVerdict state);
const FaultCode& DegradedNoCause();
// Why a GPU's verdict is unknown (probes::UnjudgeableReason names the same two shapes): its
// confidential computing on with the GPUs not ready, else MIG with no instance to probe
// through.
NoVerdict UnjudgeableState(const probes::ConfidentialComputing& cc);
// "XFERD-101" (exactly: upper case, three digits) -> its entry; nullptr otherwise.
const FaultCode* FindFault(std::string_view code);
// A cause's label -> its entry; nullptr for a label this xferd does not know.
const FaultCode* FaultOfLabel(std::string_view cause);

// "XFERD-101/reboot": the token every line (the health line, the NPD condition's message,
// the Slurm drain reason) carries right after its first word.
std::string FaultToken(const FaultCode& fault);

}  // namespace xferd::core
