#include "core/fault_codes.h"

#include <algorithm>
#include <cstdio>

namespace xferd::core {
namespace {

using A = RecommendedAction;

// The table. A row is never renumbered nor given another meaning; a retired cause keeps
// its row, reserved. Number order.
constexpr std::array kFaults = {
    // 1xx: the link.
    FaultCode{101, "link_downtrained",
              "a PCIe link on the GPU's path runs below what both of its ends can do", A::kReboot,
              true, false},
    FaultCode{102, "link_errors",
              "the path's PCIe error counters grew around a low reading (replays, AER errors)",
              A::kInspectLink, true, false},
    FaultCode{103, "link_flapping",
              "a PCIe link on the GPU's path retrains between probes (width or speed changes)",
              A::kInspectLink, true, false},
    // 2xx: the host.
    FaultCode{201, "numa_remote", "the host buffers sit on another NUMA node than the GPU",
              A::kFixHostConfig, true, false},
    FaultCode{202, "iommu_translating", "the IOMMU translates the GPU's DMA while bandwidth is low",
              A::kFixHostConfig, true, false},
    FaultCode{203, "pinned_pageable_ratio",
              "pinned against pageable copies outside 1.5-10x: pinning or staging is off",
              A::kFixHostConfig, true, false},
    // 3xx: the reading, no cause named.
    FaultCode{kDegradedNoCauseCode, "degraded",
              "degraded, no cause named (recovering, or a cause this xferd does not know)",
              A::kDiagnose, true, false},
    FaultCode{301, "below_band", "a link-bound copy below the band its link should carry",
              A::kDiagnose, true, false},
    FaultCode{302, "below_baseline", "a copy below its own (or its peers') learned baseline",
              A::kDiagnose, true, false},
    // 5xx: notes.
    FaultCode{501, "capability_mismatch",
              "not a fault: the slot or a port upstream caps the GPU below what it can do",
              A::kNone, false, false},
    FaultCode{502, "shared_uplink",
              "not a fault: GPUs behind one switch share its uplink when they move data at once",
              A::kNone, false, false},
    FaultCode{503, "link_shared",
              "not a fault: another process's traffic on the link; those readings set aside",
              A::kNone, false, false},
    FaultCode{504, "gpu_busy", "not a fault: the GPU was busy, its probes did not run", A::kNone,
              false, false},
    // 9xx: no verdict.
    FaultCode{900, "pending",
              "no verdict yet: the first cycle runs, or the GPU is judged again after a restart",
              A::kNone, false, false},
    FaultCode{901, "stale", "the GPU's headline probes have no current reading: not known",
              A::kNone, false, false},
    FaultCode{902, "unknown_confidential_computing",
              "confidential computing is on and its GPUs are not ready for work: not judged",
              A::kNone, false, false},
    FaultCode{903, "unknown_mig_no_instance",
              "MIG is enabled and no GPU instance can be probed through: not judged", A::kNone,
              false, false},
    FaultCode{910, "xferd_unhealthy",
              "xferd's probe loop is stuck (a hung probe) or its last cycle is too old", A::kNone,
              false, false},
    FaultCode{911, "xferd_unreachable",
              "xferd did not answer, or its answer is not a status document this xferd reads",
              A::kNone, false, false},
};

const FaultCode& ByNumber(int number) {
  for (const FaultCode& f : kFaults) {
    if (f.number == number) return f;
  }
  return kFaults.front();  // unreachable: every caller names a row of the table
}

}  // namespace

std::string_view ToString(RecommendedAction action) {
  switch (action) {
    case A::kNone: return "none";
    case A::kDiagnose: return "diagnose";
    case A::kReboot: return "reboot";
    case A::kInspectLink: return "inspect_link";
    case A::kFixHostConfig: return "fix_host";
    case A::kReplace: return "replace";
  }
  return "none";
}

std::optional<RecommendedAction> ParseRecommendedAction(std::string_view text) {
  for (RecommendedAction a : kAllRecommendedActions) {
    if (ToString(a) == text) return a;
  }
  return std::nullopt;
}

std::string FaultCode::Code() const {
  char text[16];
  std::snprintf(text, sizeof text, "XFERD-%03d", number);
  return text;
}

std::span<const FaultCode> AllFaultCodes() {
  return kFaults;
}

// A switch with no default: a new cause without a code does not build without a warning,
// and FaultCodes.EveryCauseHasItsOwnCode fails.
const FaultCode& FaultOf(DiagnosisCause cause) {
  switch (cause) {
    case DiagnosisCause::kLinkDowntrained: return ByNumber(101);
    case DiagnosisCause::kLinkErrors: return ByNumber(102);
    case DiagnosisCause::kLinkFlapping: return ByNumber(103);
    case DiagnosisCause::kNumaRemote: return ByNumber(201);
    case DiagnosisCause::kIommuTranslating: return ByNumber(202);
    case DiagnosisCause::kPinnedPageableRatio: return ByNumber(203);
    case DiagnosisCause::kBelowBand: return ByNumber(301);
    case DiagnosisCause::kBelowBaseline: return ByNumber(302);
    case DiagnosisCause::kCapabilityMismatch: return ByNumber(501);
    case DiagnosisCause::kSharedUplink: return ByNumber(502);
    case DiagnosisCause::kLinkShared: return ByNumber(503);
    case DiagnosisCause::kGpuBusy: return ByNumber(504);
  }
  return DegradedNoCause();
}

const FaultCode& FaultOf(NoVerdict state) {
  switch (state) {
    case NoVerdict::kPending: return ByNumber(900);
    case NoVerdict::kStale: return ByNumber(901);
    case NoVerdict::kConfidentialComputing: return ByNumber(902);
    case NoVerdict::kMigNoInstance: return ByNumber(903);
    case NoVerdict::kDaemonUnhealthy: return ByNumber(910);
    case NoVerdict::kDaemonUnreachable: return ByNumber(911);
  }
  return ByNumber(911);
}

const FaultCode& DegradedNoCause() {
  return ByNumber(kDegradedNoCauseCode);
}

NoVerdict UnjudgeableState(const probes::ConfidentialComputing& cc) {
  return cc.NotReady() ? NoVerdict::kConfidentialComputing : NoVerdict::kMigNoInstance;
}

const FaultCode* FindFault(std::string_view code) {
  if (code.size() != 9 || !code.starts_with("XFERD-")) return nullptr;
  int number = 0;
  for (char c : code.substr(6)) {
    if (c < '0' || c > '9') return nullptr;
    number = number * 10 + (c - '0');
  }
  const auto it = std::find_if(kFaults.begin(), kFaults.end(),
                               [&](const FaultCode& f) { return f.number == number; });
  return it == kFaults.end() ? nullptr : &*it;
}

const FaultCode* FaultOfLabel(std::string_view cause) {
  const std::optional<DiagnosisCause> parsed = ParseDiagnosisCause(cause);
  return parsed ? &FaultOf(*parsed) : nullptr;
}

std::string FaultToken(const FaultCode& fault) {
  return fault.Code() + "/" + std::string(ToString(fault.action));
}

}  // namespace xferd::core
