// TransferBackend: the one interface between the daemon and whatever moves bytes.
#pragma once

#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include "platform/exit_codes.h"
#include "xferd/probes/topology.h"
#include "xferd/probes/types.h"

namespace xferd::probes {

class TransferBackend {
 public:
  virtual ~TransferBackend() = default;

  // "cuda" or "sim".
  virtual std::string Name() const = 0;

  // Every device this backend can probe, indexed from 0.
  virtual std::vector<DeviceInfo> Devices() const = 0;

  virtual Capabilities GetCapabilities(int device) const = 0;

  // Read the devices' shape again (confidential computing, MIG: what the driver says now),
  // for Devices() and GetCapabilities() from then on: at start and on reload. A backend
  // whose shape is set otherwise (the simulated one's, by its config) keeps it.
  virtual void RefreshShape() {}

  // The PCIe path from the device to its root port, read now (link speeds drop when idle:
  // call it while a probe runs to see the trained link).
  virtual LinkPath ReadLinkPath(int device) const = 0;

  // Run one probe. Never throws for device trouble: errors, timeouts and unsupported
  // modes come back as the sample's status with a message. `stop` asks a probe in
  // progress to give up early (the result is then kError, "cancelled").
  // Thread-safety: calls for different devices may run concurrently; calls for one
  // device are serialised by the caller.
  virtual ProbeSample Run(int device, const ProbeSpec& spec, std::stop_token stop = {}) = 0;

  // Run `spec` on every device of `devices` at the same moment (a concurrent group): one
  // sample per device, in the order given, each timed on its own device. What each device
  // gets then is what it gets while its neighbours move data too. The default starts one
  // thread per device and releases them together, so the calls for different devices run
  // concurrently (as Run allows); a backend that models shared links overrides it. The
  // caller serialises it with every other call for these devices.
  virtual std::vector<ProbeSample> RunConcurrent(const std::vector<int>& devices,
                                                 const ProbeSpec& spec, std::stop_token stop = {});
};

// Raised by a backend's factory when no device can be used at all (no driver, no GPU);
// the message names the cause and what to do.
class NoDeviceError : public platform::Error {
 public:
  explicit NoDeviceError(const std::string& message)
      : platform::Error(platform::Failure::kNoDevice, message) {}
};

}  // namespace xferd::probes
