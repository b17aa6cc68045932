#include "web/listen_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace xferd::web {
namespace {

constexpr const char* kListenFix =
    "give --web.listen-address (or [web] listen_address) as HOST:PORT, e.g. :9742, "
    "127.0.0.1:9742 or [::1]:9742";

}  // namespace

ListenAddress ParseListenAddress(const std::string& address) {
  const auto bad = [&](const std::string& why) {
    return HttpError("listen address '" + address + "': " + why, kListenFix);
  };
  ListenAddress out;
  std::string port;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      throw bad("an IPv6 address needs brackets and a port, like [::1]:9742");
    }
    out.host = address.substr(1, close - 1);
    port = address.substr(close + 2);
    in6_addr probe{};
    if (inet_pton(AF_INET6, out.host.c_str(), &probe) != 1) {
      throw bad("'" + out.host + "' is not an IPv6 address");
    }
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) throw bad("no port (missing ':PORT')");
    out.host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      throw bad("an IPv6 address must be in brackets, like [::1]:9742");
    }
    // A name or an IPv4 address: nothing that could smuggle other syntax into a lookup.
    if (!std::all_of(out.host.begin(), out.host.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '-'; })) {
      throw bad("the host may hold only letters, digits, '.' and '-'");
    }
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(port) > 65535) {
    throw bad("port '" + port + "' is not a number from 0 to 65535");
  }
  out.port = static_cast<std::uint16_t>(std::stoul(port));
  return out;
}

}  // namespace xferd::web
