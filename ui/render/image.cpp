#include "ui/render/image.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>

#include "core/mapped_file.h"
#include "core/png.h"

namespace tessera::render {

namespace {

Status check_frames(const std::vector<Image>& frames, const char* what) {
  if (frames.empty()) return invalid_argument(std::string(what) + ": no frames");
  for (size_t i = 0; i < frames.size(); ++i) {
    if (!frames[i].valid()) {
      return invalid_argument(std::string(what) + ": frame " + std::to_string(i) +
                              " is not a valid RGBA8 image (" + std::to_string(frames[i].width) +
                              "x" + std::to_string(frames[i].height) + ", " +
                              std::to_string(frames[i].rgba.size()) + " bytes)");
    }
    if (frames[i].width != frames[0].width || frames[i].height != frames[0].height) {
      return invalid_argument(std::string(what) + ": frame " + std::to_string(i) + " is " +
                              std::to_string(frames[i].width) + "x" +
                              std::to_string(frames[i].height) + ", frame 0 is " +
                              std::to_string(frames[0].width) + "x" +
                              std::to_string(frames[0].height));
    }
  }
  return Status();
}

// ---- GIF ---------------------------------------------------------------------------------------
// Palette: 6 red x 7 green x 6 blue levels (green gets the extra level: the eye resolves it best),
// 252 colours; entries 252..255 are black padding to the 256-entry table.
constexpr int kRedLevels = 6, kGreenLevels = 7, kBlueLevels = 6;

uint8_t level_value(int level, int levels) {
  return static_cast<uint8_t>((level * 255 + (levels - 1) / 2) / (levels - 1));
}

// 4x4 Bayer matrix: thresholds (value + 0.5) / 16 spread quantisation error spatially, so smooth
// shading bands into a fine pattern instead of visible steps.
constexpr std::array<int, 16> kBayer4 = {0, 8, 2, 10, 12, 4, 14, 6, 3, 11, 1, 9, 15, 7, 13, 5};

int quantise(int value, int levels, float threshold) {
  const float scaled = static_cast<float>(value) * static_cast<float>(levels - 1) / 255.0f;
  return std::clamp(static_cast<int>(scaled + threshold), 0, levels - 1);
}

// Variable-width little-endian bit writer into GIF data sub-blocks (<= 255 bytes each).
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>& out) : out_(out) {}
  void put(uint32_t code, int bits) {
    buffer_ |= code << filled_;
    filled_ += bits;
    while (filled_ >= 8) {
      block_.push_back(static_cast<uint8_t>(buffer_ & 0xff));
      buffer_ >>= 8;
      filled_ -= 8;
      if (block_.size() == 255) flush_block();
    }
  }
  void finish() {
    if (filled_ > 0) block_.push_back(static_cast<uint8_t>(buffer_ & 0xff));
    buffer_ = 0;
    filled_ = 0;
    if (!block_.empty()) flush_block();
    out_.push_back(0);  // block terminator
  }

 private:
  void flush_block() {
    out_.push_back(static_cast<uint8_t>(block_.size()));
    const size_t at = out_.size();
    out_.resize(at + block_.size());
    std::memcpy(out_.data() + at, block_.data(), block_.size());
    block_.clear();
  }
  std::vector<uint8_t>& out_;
  std::vector<uint8_t> block_;
  uint32_t buffer_ = 0;
  int filled_ = 0;
};

// GIF's variable-code-width LZW (Welch 1984; GIF89a spec appendix F) for 8-bit indices. The
// dictionary is an open-addressing hash of (prefix code << 8 | byte) -> code; it never holds more
// than 4096 - 258 entries, so 8192 slots keep probes short. When the 12-bit code space is full a
// clear code resets it (a "deferred clear" is legal but a fresh table compresses renders better).
void lzw_encode(const std::vector<uint8_t>& indices, std::vector<uint8_t>& out) {
  constexpr int kMinCodeSize = 8;
  constexpr uint32_t kClear = 1u << kMinCodeSize, kEnd = kClear + 1;
  constexpr int kSlots = 8192;
  std::vector<int32_t> keys(kSlots, -1);
  std::vector<uint16_t> values(kSlots, 0);
  out.push_back(kMinCodeSize);
  BitWriter writer(out);
  int code_size = kMinCodeSize + 1;
  uint32_t next_code = kEnd + 1;
  auto reset = [&] {
    std::fill(keys.begin(), keys.end(), -1);
    code_size = kMinCodeSize + 1;
    next_code = kEnd + 1;
  };
  writer.put(kClear, code_size);
  if (indices.empty()) {
    writer.put(kEnd, code_size);
    writer.finish();
    return;
  }
  uint32_t current = indices[0];
  for (size_t i = 1; i < indices.size(); ++i) {
    const uint8_t byte = indices[i];
    const auto key = static_cast<int32_t>((current << 8) | byte);
    uint32_t slot = (static_cast<uint32_t>(key) * 2654435761u) >> 19;  // top 13 bits
    while (keys[slot] != -1 && keys[slot] != key) slot = (slot + 1) & (kSlots - 1);
    if (keys[slot] == key) {
      current = values[slot];
      continue;
    }
    writer.put(current, code_size);
    if (next_code < 4096) {
      keys[slot] = key;
      values[slot] = static_cast<uint16_t>(next_code++);
      // The decoder adds each entry one code later than we do, so widen when the code just added
      // no longer fits, i.e. when next_code passes 2^code_size.
      if (next_code > (1u << code_size) && code_size < 12) ++code_size;
    } else {
      writer.put(kClear, code_size);
      reset();
    }
    current = byte;
  }
  writer.put(current, code_size);
  writer.put(kEnd, code_size);
  writer.finish();
}

// resize + memcpy rather than vector::insert: GCC 12 reports a false -Wstringop-overflow for range
// inserts into a vector that starts empty.
void put_bytes(std::vector<uint8_t>& out, const void* data, size_t size) {
  const size_t at = out.size();
  out.resize(at + size);
  std::memcpy(out.data() + at, data, size);
}
void put_bytes(std::vector<uint8_t>& out, std::initializer_list<uint8_t> bytes) {
  for (uint8_t b : bytes) out.push_back(b);
}

void put_u16(std::vector<uint8_t>& out, int value) {
  out.push_back(static_cast<uint8_t>(value & 0xff));
  out.push_back(static_cast<uint8_t>((value >> 8) & 0xff));
}

}  // namespace

Expected<Image> contact_sheet(const std::vector<Image>& frames, int columns) {
  TESSERA_RETURN_IF_ERROR(check_frames(frames, "contact sheet"));
  if (columns < 1)
    return invalid_argument("contact sheet: columns " + std::to_string(columns) + " < 1");
  const int count = static_cast<int>(frames.size());
  columns = std::min(columns, count);
  const int rows = (count + columns - 1) / columns;
  const int w = frames[0].width, h = frames[0].height;
  Image sheet;
  sheet.width = w * columns;
  sheet.height = h * rows;
  sheet.rgba.assign(static_cast<size_t>(sheet.width) * static_cast<size_t>(sheet.height) * 4, 0);
  for (size_t i = 0; i < sheet.rgba.size(); i += 4) sheet.rgba[i + 3] = 255;
  for (int f = 0; f < count; ++f) {
    const int ox = (f % columns) * w, oy = (f / columns) * h;
    for (int y = 0; y < h; ++y) {
      std::memcpy(&sheet.rgba[(static_cast<size_t>(oy + y) * sheet.width + ox) * 4],
                  frames[static_cast<size_t>(f)].pixel(0, y), static_cast<size_t>(w) * 4);
    }
  }
  return sheet;
}

Expected<std::vector<uint8_t>> encode_png(const Image& image) {
  if (!image.valid()) {
    return invalid_argument("png: invalid image (" + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + ", " +
                            std::to_string(image.rgba.size()) + " bytes)");
  }
  // The one PNG encoder (core/png.h), RGBA.
  TESSERA_ASSIGN_OR_RETURN(const std::string bytes,
                           tessera::encode_png(image.rgba.data(), image.width, image.height, 4));
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

Status write_png(const std::string& path, const Image& image, const PngText& text) {
  TESSERA_ASSIGN_OR_RETURN(auto bytes, encode_png(image));
  if (text.empty()) return write_file_atomic(path, bytes.data(), bytes.size());
  TESSERA_ASSIGN_OR_RETURN(
      std::string with_text,
      add_png_text(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), text));
  return write_file_atomic(path, with_text.data(), with_text.size());
}

Expected<std::vector<uint8_t>> encode_gif(const std::vector<Image>& frames,
                                          int delay_centiseconds) {
  TESSERA_RETURN_IF_ERROR(check_frames(frames, "gif"));
  if (delay_centiseconds < 1 || delay_centiseconds > 65535) {
    return invalid_argument("gif: frame delay " + std::to_string(delay_centiseconds) +
                            " cs is outside [1, 65535]");
  }
  const int w = frames[0].width, h = frames[0].height;
  if (w > 65535 || h > 65535) {
    return invalid_argument("gif: " + std::to_string(w) + "x" + std::to_string(h) +
                            " exceeds GIF's 65535-pixel limit");
  }
  std::vector<uint8_t> out;
  out.reserve(1024 + frames.size() * static_cast<size_t>(w) * static_cast<size_t>(h) / 2);
  put_bytes(out, "GIF89a", 6);
  // Logical screen descriptor: global colour table present, 8 bits/primary, 256 entries.
  put_u16(out, w);
  put_u16(out, h);
  out.push_back(0xF7);
  out.push_back(0);  // background colour index
  out.push_back(0);  // pixel aspect ratio: unspecified
  for (int i = 0; i < 256; ++i) {
    if (i < kRedLevels * kGreenLevels * kBlueLevels) {
      const int r = i / (kGreenLevels * kBlueLevels);
      const int g = (i / kBlueLevels) % kGreenLevels;
      const int b = i % kBlueLevels;
      out.push_back(level_value(r, kRedLevels));
      out.push_back(level_value(g, kGreenLevels));
      out.push_back(level_value(b, kBlueLevels));
    } else {
      put_bytes(out, {0, 0, 0});
    }
  }
  // NETSCAPE2.0 application extension: loop forever (count 0).
  const uint8_t loop[] = {0x21, 0xFF, 0x0B, 'N', 'E',  'T',  'S',  'C',  'A', 'P',
                          'E',  '2',  '.',  '0', 0x03, 0x01, 0x00, 0x00, 0x00};
  put_bytes(out, loop, sizeof(loop));

  std::vector<uint8_t> indices(static_cast<size_t>(w) * static_cast<size_t>(h));
  for (const Image& frame : frames) {
    // Graphics control extension: disposal 1 (leave in place; every frame covers the screen).
    put_bytes(out, {0x21, 0xF9, 0x04, 0x04});
    put_u16(out, delay_centiseconds);
    put_bytes(out, {0x00, 0x00});
    // Image descriptor: full screen, no local table, not interlaced.
    out.push_back(0x2C);
    put_u16(out, 0);
    put_u16(out, 0);
    put_u16(out, w);
    put_u16(out, h);
    out.push_back(0);
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const uint8_t* p = frame.pixel(x, y);
        const float t =
            (static_cast<float>(kBayer4[static_cast<size_t>((y & 3) * 4 + (x & 3))]) + 0.5f) /
            16.0f;
        const int r = quantise(p[0], kRedLevels, t);
        const int g = quantise(p[1], kGreenLevels, t);
        const int b = quantise(p[2], kBlueLevels, t);
        indices[static_cast<size_t>(y) * w + x] =
            static_cast<uint8_t>((r * kGreenLevels + g) * kBlueLevels + b);
      }
    }
    lzw_encode(indices, out);
  }
  out.push_back(0x3B);  // trailer
  return out;
}

Status write_gif(const std::string& path, const std::vector<Image>& frames,
                 int delay_centiseconds) {
  TESSERA_ASSIGN_OR_RETURN(auto bytes, encode_gif(frames, delay_centiseconds));
  return write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace tessera::render
