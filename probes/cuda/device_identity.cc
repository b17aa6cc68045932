#include "probes/cuda/device_identity.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "platform/files.h"

namespace xferd::probes::cuda {

std::string FormatGpuUuid(const unsigned char (&b)[16]) {
  char text[48];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

std::string NormalizeBusId(std::string_view bus_id) {
  std::string out(bus_id);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // CUDA pads the domain to 8 digits ("00000000:00:06.0"); sysfs uses 4.
  if (out.size() == 16 && out.compare(0, 4, "0000") == 0 && out[8] == ':') out.erase(0, 4);
  return out;
}

std::string ParseProcDriverVersion(std::string_view text) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue ..." (or "Open Kernel
  // Module"): the first token shaped like digits.digits(.digits).
  std::istringstream in{std::string(text.substr(0, text.find('\n')))};
  std::string token;
  while (in >> token) {
    int dots = 0;
    bool shaped = std::isdigit(static_cast<unsigned char>(token.front())) &&
                  std::isdigit(static_cast<unsigned char>(token.back()));
    for (char c : token) {
      if (c == '.')
        ++dots;
      else if (!std::isdigit(static_cast<unsigned char>(c)))
        shaped = false;
    }
    if (shaped && dots >= 1 && dots <= 2) return token;
  }
  return "";
}

int ParseDeviceMinor(std::string_view text) {
  constexpr std::string_view kKey = "Device Minor:";
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    int minor = 0;
    std::size_t digits = 0;
    for (; digits < line.size() && digits < 6 &&
           std::isdigit(static_cast<unsigned char>(line[digits]));
         ++digits) {
      minor = minor * 10 + (line[digits] - '0');
    }
    return digits > 0 ? minor : -1;
  }
  return -1;
}

int DeviceMinor(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) return -1;
  const auto text = platform::TryReadFileBounded(
      "/proc/driver/nvidia/gpus/" + pci_bus_id + "/information", 16384);
  return text ? ParseDeviceMinor(*text) : -1;
}

namespace {

// NVML is loaded at run time: the GPU host has it with the driver, the build needs no header.
std::string NvmlDriverVersion() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return "";
  using InitFn = int (*)();
  using VersionFn = int (*)(char*, unsigned int);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto version = reinterpret_cast<VersionFn>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
  std::string result;
  if (init != nullptr && version != nullptr && shutdown != nullptr && init() == 0) {
    char text[96] = {};
    if (version(text, sizeof(text)) == 0) result = text;
    shutdown();
  }
  dlclose(nvml);
  return result;
}

}  // namespace

std::string DriverVersion(int cuda_driver_version) {
  if (std::string v = NvmlDriverVersion(); !v.empty()) return v;
  if (const auto text = platform::TryReadFileBounded("/proc/driver/nvidia/version", 4096)) {
    if (std::string v = ParseProcDriverVersion(*text); !v.empty()) return v;
  }
  return "CUDA driver API " + std::to_string(cuda_driver_version / 1000) + "." +
         std::to_string(cuda_driver_version % 1000 / 10);
}

}  // namespace xferd::probes::cuda
