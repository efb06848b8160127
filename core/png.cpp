#include "core/png.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

// Both stb libraries are header-only; their implementations live in this translation unit with
// static linkage; every PNG the product writes is encoded here (ui/render/image.h calls it).
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

namespace {

// zlib's CRC-32 (the one PNG specifies: ISO 3309 / ITU-T V.42).
uint32_t crc32_png(const char* data, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt part = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(data), part);
    data += part;
    n -= part;
  }
  return static_cast<uint32_t>(c);
}

void put_be32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xFF));
}

uint32_t get_be32(std::string_view s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) |
         (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) |
         uint32_t{static_cast<uint8_t>(s[at + 3])};
}

constexpr char kPngSignature[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};

}  // namespace

Expected<std::string> add_png_text(std::string png, const PngText& text) {
  if (png.size() < 33 || png.compare(0, 8, std::string(kPngSignature, 8)) != 0 ||
      png.compare(12, 4, "IHDR") != 0 || get_be32(png, 8) != 13) {
    return invalid_argument("png text: not a PNG with its IHDR first");
  }
  std::string chunks;
  for (const auto& [key, value] : text) {
    bool ok = !key.empty() && key.size() <= 79 && key.front() != ' ' && key.back() != ' ' &&
              key.find("  ") == std::string::npos;
    for (unsigned char c : key) ok = ok && ((c >= 32 && c <= 126) || c >= 161);
    if (!ok) return invalid_argument("png text: keyword '" + key + "' is not a PNG keyword");
    std::string body = "iTXt" + key;
    body.push_back('\0');  // keyword end
    body.push_back('\0');  // not compressed
    body.push_back('\0');  // compression method
    body.push_back('\0');  // language tag: none
    body.push_back('\0');  // translated keyword: none
    body += value;
    put_be32(chunks, static_cast<uint32_t>(body.size() - 4));
    chunks += body;
    put_be32(chunks, crc32_png(body.data(), body.size()));
  }
  png.insert(33, chunks);  // after the signature (8) and IHDR (4 + 4 + 13 + 4)
  return png;
}

Expected<PngText> read_png_text(std::string_view png, const std::string& what) {
  if (png.size() < 8 || png.substr(0, 8) != std::string_view(kPngSignature, 8)) {
    return invalid_argument(what + ": not a PNG file (bad signature)");
  }
  PngText out;
  size_t at = 8;
  while (png.size() - at >= 12) {
    const uint32_t length = get_be32(png, at);
    if (length > png.size() - at - 12) break;
    const std::string_view type = png.substr(at + 4, 4);
    const std::string_view data = png.substr(at + 8, length);
    if (type == "IEND") break;
    const size_t nul = data.find('\0');
    if (nul != std::string_view::npos && nul > 0) {
      const std::string key(data.substr(0, nul));
      if (type == "tEXt") {
        out.emplace_back(key, std::string(data.substr(nul + 1)));
      } else if (type == "iTXt" && data.size() >= nul + 3 && data[nul + 1] == 0) {
        // flag, method, then language and translated keyword, each NUL-terminated.
        const size_t lang_end = data.find('\0', nul + 3);
        const size_t tkey_end =
            lang_end == std::string_view::npos ? lang_end : data.find('\0', lang_end + 1);
        if (tkey_end != std::string_view::npos) {
          out.emplace_back(key, std::string(data.substr(tkey_end + 1)));
        }
      }
    }
    at += 12 + static_cast<size_t>(length);
  }
  return out;
}

PngText tessera_png_text(const std::string& json) {
  PngText text = {{"Software", std::string("Tessera ") + TESSERA_VERSION}};
  if (!json.empty()) text.emplace_back("tessera", json);
  return text;
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
  // stb_image grows its IDAT buffer to the length a chunk claims before it reads the chunk, so a
  // few bytes claiming 2 GB made it allocate 2 GB (found by fbx_import_fuzz): a chunk whose length
  // runs past the end of the bytes is refused here.
  for (size_t at = 8; size - at >= 8;) {
    const uint32_t length = (uint32_t{bytes[at]} << 24) | (uint32_t{bytes[at + 1]} << 16) |
                            (uint32_t{bytes[at + 2]} << 8) | uint32_t{bytes[at + 3]};
    if (length > size - at - 8) {
      return invalid_argument(what + ": truncated PNG (a chunk at byte " + std::to_string(at) +
                              " claims " + std::to_string(length) + " bytes, beyond the end)");
    }
    if (std::memcmp(bytes + at + 4, "IEND", 4) == 0) break;
    at += 12 + static_cast<size_t>(length);
    if (at > size) break;
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
