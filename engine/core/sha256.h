// SHA-256 (FIPS 180-4) digests as lowercase hex, through OpenSSL's libcrypto (Debian's libssl-dev):
// the checksums of batch manifests (a generated file's, a model's weights').
#pragma once

#include <cstddef>
#include <string>

#include "engine/core/status.h"

namespace tessera {

// 64 hex characters.
std::string sha256_hex(const void* data, size_t size);
// Streams the file in blocks (a multi-GB checkpoint never sits in memory). Errors name the path:
// missing, unreadable, a read error part way.
Expected<std::string> sha256_file(const std::string& path);

}  // namespace tessera
