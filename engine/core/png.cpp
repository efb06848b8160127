#include "engine/core/png.h"

#include <cstring>
#include <limits>

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
  const int len = static_cast<int>(size);
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size < 8 || std::memcmp(bytes, kSignature, 8) != 0) {
    return invalid_argument(what + ": not a PNG file (bad signature)");
  }
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
