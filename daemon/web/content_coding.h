// Content negotiation for the one coding the server offers besides identity.
#pragma once

#include <string_view>

namespace xferd::web {

// Whether an Accept-Encoding header value allows gzip (RFC 9110, 12.5.3): "gzip" or
// "x-gzip" listed with a quality above 0, or "*" above 0 with gzip not listed at 0. Names
// are case-insensitive; an entry with a malformed quality counts as not listed. Empty or
// absent: identity only.
bool AcceptsGzip(std::string_view accept_encoding);

}  // namespace xferd::web
