#include "engine/core/png.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

// Both stb libraries are header-only; their implementations live in this translation unit with
// static linkage (the studio's renderer has its own static copy of stb_image_write).
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#include <stb/stb_image.h>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#include <stb/stb_image_write.h>

namespace tessera {

namespace {

// stb's reason for the last failure; stb can fail without one (a null pointer).
std::string failure_reason() {
  const char* reason = stbi_failure_reason();
  return reason != nullptr ? reason : "no reason given by the decoder";
}

// stb_image copies each IDAT chunk into a buffer it grows only for non-empty chunks, so an empty
// IDAT before any data hands memcpy a null destination (undefined behaviour, found by
// glb_import_fuzz). Empty IDAT chunks carry nothing: returns the stream without them, or an empty
// string when there are none. The walk stops at the first chunk the bytes cannot hold (stb reports
// the truncation).
std::string without_empty_idat(const uint8_t* bytes, size_t size) {
  auto be32 = [&](size_t at) {
    return (uint32_t{bytes[at]} << 24) | (uint32_t{bytes[at + 1]} << 16) |
           (uint32_t{bytes[at + 2]} << 8) | uint32_t{bytes[at + 3]};
  };
  std::vector<std::pair<size_t, size_t>> drop;  // [begin, end) of each empty IDAT chunk
  size_t at = 8;
  while (size >= at + 8) {  // a chunk's length and type are there
    const uint64_t length = be32(at);
    const bool idat = std::memcmp(bytes + at + 4, "IDAT", 4) == 0;
    if (idat && length == 0) {
      // stb copies the (empty) data before it reads the CRC, so a truncated CRC does not save it.
      drop.emplace_back(at, std::min(size, at + 12));
      at += 12;
      continue;
    }
    if (length > size - at - 8 || size - at - 8 - length < 4) break;  // data + CRC cut short
    at += 12 + static_cast<size_t>(length);
  }
  if (drop.empty()) return {};
  std::string out;
  out.reserve(size);
  size_t from = 0;
  for (const auto& [begin, end] : drop) {
    out.append(reinterpret_cast<const char*>(bytes) + from, begin - from);
    from = end;
  }
  out.append(reinterpret_cast<const char*>(bytes) + from, size - from);
  return out;
}

}  // namespace

namespace {
void append(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data),
                                             static_cast<size_t>(size));
}
}  // namespace

Expected<std::string> encode_png(const uint8_t* pixels, int64_t width, int64_t height,
                                 int channels) {
  if (width < 1 || height < 1 || width > kMaxPngSide || height > kMaxPngSide) {
    return invalid_argument("png: image size " + std::to_string(width) + "x" +
                            std::to_string(height) + " is outside [1, " +
                            std::to_string(kMaxPngSide) + "] per side");
  }
  if (channels < 1 || channels > 4) {
    return invalid_argument("png: " + std::to_string(channels) + " channels (1 to 4 allowed)");
  }
  if (pixels == nullptr) return invalid_argument("png: no pixels");
  std::string out;
  const int w = static_cast<int>(width), h = static_cast<int>(height);
  if (stbi_write_png_to_func(append, &out, w, h, channels, pixels, w * channels) == 0) {
    return internal_error("png: stb_image_write failed to encode a " + std::to_string(width) + "x" +
                          std::to_string(height) + " image");
  }
  return out;
}

Expected<PngPixels> decode_png(const void* data, size_t size, int channels,
                               const std::string& what) {
  if (channels < 1 || channels > 4) {
    return invalid_argument(what + ": " + std::to_string(channels) +
                            " channels requested (1 to 4)");
  }
  if (size > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return invalid_argument(what + ": " + std::to_string(size) + " bytes is too large for a PNG");
  }
  const auto* bytes = static_cast<const stbi_uc*>(data);
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size < 8 || std::memcmp(bytes, kSignature, 8) != 0) {
    return invalid_argument(what + ": not a PNG file (bad signature)");
  }
  const std::string cleaned = without_empty_idat(bytes, size);
  if (!cleaned.empty()) {
    bytes = reinterpret_cast<const stbi_uc*>(cleaned.data());
    size = cleaned.size();
  }
  const int len = static_cast<int>(size);
  int w = 0, h = 0, n = 0;
  // Refuse huge images before stb allocates for them.
  if (stbi_info_from_memory(bytes, len, &w, &h, &n) == 0) {
    return invalid_argument(what + ": not a decodable PNG (" + failure_reason() + ")");
  }
  if (w < 1 || h < 1 || w > kMaxPngSide || h > kMaxPngSide) {
    return invalid_argument(what + ": PNG size " + std::to_string(w) + "x" + std::to_string(h) +
                            " is outside [1, " + std::to_string(kMaxPngSide) + "] per side");
  }
  stbi_uc* decoded = stbi_load_from_memory(bytes, len, &w, &h, &n, channels);
  if (decoded == nullptr) {
    return invalid_argument(what + ": not a decodable PNG (" + failure_reason() + ")");
  }
  PngPixels out;
  out.width = w;
  out.height = h;
  out.channels = channels;
  out.pixels.assign(decoded, decoded + static_cast<size_t>(w) * static_cast<size_t>(h) *
                                           static_cast<size_t>(channels));
  stbi_image_free(decoded);
  return out;
}

}  // namespace tessera
