// The one parser of a listen address, for the flag, the config file and the server.
#pragma once

#include <cstdint>
#include <string>

#include "web/http_error.h"

namespace xferd::web {

// node_exporter's spelling: ":9742" (every interface), "127.0.0.1:0", "[::1]:9742",
// "localhost:9742". Port 0 picks a free port.
struct ListenAddress {
  std::string host;  // "" = every interface; IPv6 literals without brackets
  std::uint16_t port = 0;
};

// Throws HttpError naming the address (quoted), the problem and the fix.
ListenAddress ParseListenAddress(const std::string& address);

}  // namespace xferd::web
