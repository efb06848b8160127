// SHA-256 (FIPS 180-4) digests (and Git's SHA-1 blob ids) as lowercase hex, through OpenSSL's
// libcrypto (Debian's libssl-dev): the checksums of batch manifests (a generated file's, a model's
// weights').
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace tessera {

// 64 hex characters.
std::string sha256_hex(const void* data, size_t size);
// Streams the file in blocks (a multi-GB checkpoint never sits in memory). Errors name the path:
// missing, unreadable, a read error part way.
Expected<std::string> sha256_file(const std::string& path);
// The Git object id of the file's contents (SHA-1 of "blob <size>\0" + bytes, 40 hex characters):
// what the Hugging Face Hub states as the ETag of a file kept in Git rather than LFS.
Expected<std::string> git_blob_sha1_file(const std::string& path);

}  // namespace tessera
