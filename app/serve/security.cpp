#include "app/serve/security.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/mapped_file.h"
#include "engine/runtime/user_dirs.h"

namespace tessera::serve {

namespace fs = std::filesystem;

namespace {

// "9000" -> 9000; nullopt for anything but 1-5 digits within 0-65535.
std::optional<int> port_number(const std::string& text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return std::nullopt;
  return value;
}

}  // namespace

Expected<ListenAddress> parse_listen(const std::string& text, int port_option, bool port_given) {
  const std::string what = "--listen " + text;
  ListenAddress out;
  out.port = port_option;
  std::string port_text;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) {
      return invalid_argument(what + ": an IPv6 address in brackets needs its ']'");
    }
    out.host = text.substr(1, close - 1);
    out.ipv6 = true;
    const std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return invalid_argument(what + ": after ']' only :PORT may follow");
      }
      port_text = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t first = text.find(':');
    if (first != std::string::npos && text.find(':', first + 1) != std::string::npos) {
      out.host = text;  // a bare IPv6 address: its colons are the address's own
      out.ipv6 = true;
    } else if (first != std::string::npos) {
      out.host = text.substr(0, first);
      port_text = text.substr(first + 1);
      has_port = true;
    } else {
      out.host = text;
    }
  }
  if (out.host.empty()) {
    return invalid_argument(what +
                            ": names no address (write 127.0.0.1:PORT, 0.0.0.0:PORT or [::]:PORT)");
  }
  if (out.host.find_first_of(" /\t") != std::string::npos) {
    return invalid_argument(what + ": \"" + out.host + "\" is not an address or host name");
  }
  if (has_port) {
    const std::optional<int> port = port_number(port_text);
    if (!port) {
      return invalid_argument(what + ": the port \"" + port_text + "\" must be a number 0-65535");
    }
    if (port_given && *port != port_option) {
      return invalid_argument(what + " and --port " + std::to_string(port_option) +
                              " name two ports: give one");
    }
    out.port = *port;
  }
  return out;
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost";
}

std::string host_name(const std::string& host_header) {
  if (!host_header.empty() && host_header.front() == '[') {
    const size_t close = host_header.find(']');
    return close == std::string::npos ? host_header : host_header.substr(0, close + 1);
  }
  const size_t colon = host_header.rfind(':');
  return colon == std::string::npos ? host_header : host_header.substr(0, colon);
}

GateAnswer gate(const RequestFacts& request, const GateOptions& options) {
  auto refuse = [](int status, std::string message, std::string field) {
    GateAnswer a;
    a.kind = GateAnswer::Kind::kRefuse;
    a.refusal = Refusal{status, std::move(message), std::move(field)};
    return a;
  };
  // Web pages: one on another site must not drive the server (a form post, a rebound DNS name):
  // a browser's Origin must be the --cors one, and without a token the Host must be a loopback
  // name.
  if (!request.origin.empty() && request.origin != options.cors) {
    return refuse(403,
                  "requests from web pages are refused (origin " + request.origin +
                      "; allow one with --cors)",
                  "Origin");
  }
  if (request.method == "OPTIONS") return GateAnswer{GateAnswer::Kind::kPreflight, {}};
  if (options.token.empty()) {
    const std::string host = host_name(request.host);
    const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
    if (!is_loopback(bracketed ? host.substr(1, host.size() - 2) : host)) {
      return refuse(403, "Host " + host + " is not this machine's loopback", "Host");
    }
    return GateAnswer{};
  }
  if (request.path == "/healthz" || request.path == "/readyz") return GateAnswer{};
  if (request.authorization != "Bearer " + options.token) {
    return refuse(401,
                  "a bearer token is required (Authorization: Bearer <the token in the server's "
                  "serve-token file>)",
                  "Authorization");
  }
  return GateAnswer{};
}

Expected<std::string> server_token() {
  const fs::path dir = runtime::user_config_dir();
  const fs::path file = dir / "serve-token";
  std::ifstream in(file);
  std::string token;
  if (in >> token && token.size() >= 32) {
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      return invalid_argument("the server token " + file.string() +
                              " can be read by other users: chmod 600 it");
    }
    return token;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  token.clear();
  for (int i = 0; i < 48; ++i) token += kHex[rd() & 15];
  const std::string text = token + "\n";
  const mode_t old_mask = ::umask(077);  // never readable by others, not even for a moment
  const Status written = write_file_atomic(file.string(), text.data(), text.size());
  ::umask(old_mask);
  if (!written.ok()) {
    return io_error("the server token " + file.string() + ": " + written.message());
  }
  std::fprintf(stderr, "tessera serve: a new token was written to %s\n", file.c_str());
  return token;
}

}  // namespace tessera::serve
