// How the commands print a band and a rate: one text form for the tables and one JSON form
// for --json, whichever command prints them (check-config, probe, probe --concurrent).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/band.h"

namespace xferd::cmd {

// Bytes per second as the probe tables print them: GB/s with two decimals ("54.97").
std::string Gbps(double bytes_per_s);

// A band as the probe tables print it: "39.70-52.30 GB/s per direction (SOURCE)", or only
// its source where it is unknown (which says why).
std::string BandText(const core::ExpectedBand& band);

// {"lower_bytes_per_s", "upper_bytes_per_s", "source"}: every "expected_band" of --json.
nlohmann::json BandJson(const core::ExpectedBand& band);

// How a result of (mode, direction, size) stands to the GPU's `band` (core::HoldOf):
// {"hold": "held" or why not, "lower_bytes_per_s", "upper_bytes_per_s" (the mode's band
// where held, else null), "expected_link_share" (where the per-copy model gives one, else
// null)}: each result's "band" in `xferd probe --json`.
nlohmann::json ModeHoldJson(const core::ExpectedBand& band, probes::TransferMode mode,
                            probes::Direction direction, std::uint64_t size_bytes);

// A GPU's shape as the commands print it: "confidential computing on (production, GPUs
// ready); MIG enabled: 2 instances (1 3g.71gb, 2 3g.71gb)". And its JSON form,
// {"confidential_computing": {"state", "gpus_ready", "detail", "problem"}, "mig": {"mode",
// "whole_gpu_copy_engines", "instances": [...], "problem"}}: probe and check-config.
std::string ShapeText(const probes::DeviceInfo& device);
nlohmann::json CcJson(const probes::ConfidentialComputing& cc);
nlohmann::json ShapeJson(const probes::DeviceInfo& device);

}  // namespace xferd::cmd
