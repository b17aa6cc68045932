// A plain HTTP/1.1 client over loopback sockets for the tests of the HTTP server and the
// exporter's routes: raw requests as a scraper (or an attacker) sends them, and the answer
// as it came back, without any HTTP library between.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace xferd::fakes {

// A connection to the loopback `port`, from the address `source` when one is given
// (another loopback address stands for another host); -1 when it fails.
int ConnectFrom(std::uint16_t port, const char* source, std::chrono::seconds timeout);
int Connect(std::uint16_t port, std::chrono::seconds timeout);

struct RawResponse {
  int status = 0;                              // 0: the server closed without an answer
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// An answer as it came over the wire; status 0 when it is not one.
RawResponse ParseResponse(const std::string& raw);

// Sends `request` as is and reads until the server closes the connection.
RawResponse Exchange(std::uint16_t port, const std::string& request,
                     std::chrono::seconds timeout = std::chrono::seconds(20));

// `method` `path` with `extra_headers` ("Name: value\r\n" each) and Connection: close.
RawResponse Get(std::uint16_t port, const std::string& path, const std::string& method = "GET",
                const std::string& extra_headers = "");

// Sends `request` on the connected `fd`, reads the answer until the server closes it, and
// closes `fd`.
RawResponse ExchangeOn(int fd, const std::string& request);

// GET /metrics from the loopback address `source`.
RawResponse GetFrom(const char* source, std::uint16_t port, const std::string& extra_headers = "",
                    std::chrono::seconds timeout = std::chrono::seconds(20));

// The tests' one login: kTestHash is bcrypt (cost 10) of kTestPassword, made with Python's
// crypt module.
inline constexpr const char* kTestPassword = "test-password";
inline constexpr const char* kTestHash =
    "$2b$10$vIbEObMaGbDL.GbjHgrxYO9QYD9UwSrwNjNwG8gv1W/NE9EGO.CVi";

// "Authorization: Basic ...\r\n" for `user` and `password`.
std::string BasicAuth(const std::string& user, const std::string& password);

}  // namespace xferd::fakes
