#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

namespace tessera {

namespace {

struct CtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string to_hex(const unsigned char* digest, unsigned int n) {
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * static_cast<size_t>(n), '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  // EVP_Digest fails only on allocation failure: report an empty digest then (never a wrong one).
  if (EVP_Digest(data, size, digest, &n, EVP_sha256(), nullptr) != 1) return std::string();
  return to_hex(digest, n);
}

namespace {

// The digest `md` of `prefix` followed by the file's bytes.
Expected<std::string> digest_file(const std::string& path, const EVP_MD* md,
                                  const std::string& prefix) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return not_found(path + ": cannot open for its checksum: " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), md, nullptr) != 1) {
    return internal_error(path + ": digest context could not be created");
  }
  if (!prefix.empty() && EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size()) != 1) {
    return internal_error(path + ": digest update failed");
  }
  std::vector<unsigned char> block(1 << 20);
  for (;;) {
    const size_t got = std::fread(block.data(), 1, block.size(), f.get());
    if (got > 0 && EVP_DigestUpdate(ctx.get(), block.data(), got) != 1) {
      return internal_error(path + ": digest update failed");
    }
    if (got < block.size()) {
      if (std::ferror(f.get())) return io_error(path + ": read error while computing its checksum");
      break;
    }
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &n) != 1) {
    return internal_error(path + ": digest final failed");
  }
  return to_hex(digest, n);
}

}  // namespace

Expected<std::string> sha256_file(const std::string& path) {
  return digest_file(path, EVP_sha256(), "");
}

Expected<std::string> git_blob_sha1_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return not_found(path + ": cannot open for its checksum: " + ec.message());
  std::string header = "blob " + std::to_string(size);
  header.push_back('\0');
  return digest_file(path, EVP_sha1(), header);
}

}  // namespace tessera
