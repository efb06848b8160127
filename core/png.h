// PNG encode/decode for the engine (textures, `tessera image`), through stb_image and
// stb_image_write (Debian's libstb-dev headers, compiled privately into png.cpp with static
// linkage, so they do not clash with another copy elsewhere in the program).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tessera {

// Pixels of a decoded PNG: row-major, top row first, `channels` interleaved 8-bit samples each.
struct PngPixels {
  int64_t width = 0, height = 0;
  int channels = 0;             // 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
  std::vector<uint8_t> pixels;  // width * height * channels bytes
};

// Largest side encode_png/decode_png accept (keeps every size computation far from int overflow).
inline constexpr int64_t kMaxPngSide = 16384;

// Encodes `width` x `height` pixels of `channels` (1..4) interleaved 8-bit samples, row-major, top
// row first, as a deflate-compressed PNG. `pixels` must hold width * height * channels bytes
// (non-null). kInvalidArgument for sizes outside [1, kMaxPngSide] or a bad channel count.
Expected<std::string> encode_png(const uint8_t* pixels, int64_t width, int64_t height,
                                 int channels);

// Text a PNG carries (keyword, value): how an image was made. Written as iTXt chunks (UTF-8,
// uncompressed) right after IHDR, so any PNG reader shows them (ImageMagick `identify -verbose`,
// exiftool, Pillow's Image.info).
using PngText = std::vector<std::pair<std::string, std::string>>;

// `png` with one iTXt chunk per entry inserted after its IHDR. Keywords are 1-79 printable
// Latin-1 characters without leading, trailing or double spaces (the PNG rule); values any UTF-8.
// kInvalidArgument for a bad keyword or bytes that are not a PNG with an IHDR first.
Expected<std::string> add_png_text(std::string png, const PngText& text);

// The tEXt and uncompressed iTXt entries of a PNG, in file order (compressed ones are skipped).
// kInvalidArgument naming `what` when the bytes are not a PNG; a chunk list cut short ends the
// walk (what was read is returned).
Expected<PngText> read_png_text(std::string_view png, const std::string& what);

// The text Tessera writes into its PNGs: Software "Tessera <version>" and, when `json` is not
// empty, "tessera" = the settings JSON (engine/mesh/metadata.h's object).
PngText tessera_png_text(const std::string& json);

// Decodes a PNG from memory, converting to `channels` (1..4; alpha dropped or made opaque, 16-bit
// samples reduced to 8). `what` names the source (a path) in messages. kInvalidArgument when the
// bytes are not a PNG stb_image can decode (the message says why), or the image is larger than
// kMaxPngSide on a side.
Expected<PngPixels> decode_png(const void* data, size_t size, int channels,
                               const std::string& what);

}  // namespace tessera
