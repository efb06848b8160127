// What tessera serve lets in: the address it listens on, and the gate every request passes before
// it is routed. Safe by default: 127.0.0.1 only; any other address needs the bearer token kept in
// XDG_CONFIG_HOME/tessera/serve-token (made on first use, mode 0600) on every request but /healthz
// and /readyz; a browser page from another origin than --cors is refused, and without a token the
// Host must be a loopback name (a rebound DNS name cannot reach the server). Pure functions but
// server_token(), which reads or writes the token file; no HTTP library types.
#pragma once

#include <optional>
#include <string>

#include "app/serve/answers.h"
#include "core/status.h"

namespace tessera::serve {

constexpr int kDefaultPort = 8590;

// Where to listen, from --listen as people write it: HOST, HOST:PORT, an IPv6 address bare
// (::1) or in brackets ([::1], [::1]:9000). `port_option` is --port's value (kDefaultPort when not
// given); a port in --listen wins over the default, and a different --port given as well is an
// error naming both.
struct ListenAddress {
  std::string host;  // without brackets: "127.0.0.1", "::1", "localhost", "0.0.0.0"
  int port = kDefaultPort;
  bool ipv6 = false;
  std::string url_host() const { return ipv6 ? "[" + host + "]" : host; }  // for http://HOST:PORT
};
Expected<ListenAddress> parse_listen(const std::string& text, int port_option, bool port_given);

// The names that mean this machine's loopback and need no token: 127.0.0.1, ::1, localhost.
bool is_loopback(const std::string& host);

// A Host header's name without its port: "localhost:8590" -> "localhost", "[::1]:8590" -> "[::1]".
std::string host_name(const std::string& host_header);

struct GateOptions {
  std::string cors;   // the one origin allowed to call from a browser; empty: none
  std::string token;  // the bearer token; empty when listening on loopback only
};

struct RequestFacts {
  std::string method, path;
  std::string origin, host, authorization;  // the headers, empty when absent
};

// What the gate says of a request: pass it on to the routes, answer a browser's preflight (204
// with the CORS headers), or refuse it (403 for a foreign page or host, 401 without the token).
struct GateAnswer {
  enum class Kind { kPass, kPreflight, kRefuse } kind = Kind::kPass;
  Refusal refusal;  // kRefuse only
};
GateAnswer gate(const RequestFacts& request, const GateOptions& options);

// The bearer token: XDG_CONFIG_HOME/tessera/serve-token, made (48 hex digits, mode 0600) when
// missing; an error when it exists but others can read it, or cannot be written.
Expected<std::string> server_token();

}  // namespace tessera::serve
