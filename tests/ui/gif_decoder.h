// A small independent GIF decoder for the tests: enough of GIF87a/89a to read back what
// render::encode_gif writes (global or local colour tables, graphics control delays, LZW with
// clear codes and the 12-bit limit), written from the spec rather than from the encoder, so an
// encoder bug does not cancel out. Not for untrusted files outside tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::testing {

struct DecodedGif {
  int width = 0, height = 0;
  bool loops = false;                     // NETSCAPE2.0 extension present
  std::vector<int> delays;                // centiseconds, one per frame
  std::vector<std::vector<uint8_t>> rgb;  // per frame: 3 * width * height, top row first
  std::string error;                      // non-empty when decoding failed
};

inline DecodedGif decode_gif(const std::vector<uint8_t>& data) {
  DecodedGif gif;
  size_t pos = 0;
  auto fail = [&](const std::string& why) {
    gif.error = why + " at byte " + std::to_string(pos);
    return gif;
  };
  auto need = [&](size_t n) { return pos + n <= data.size(); };
  auto u16 = [&](size_t at) { return static_cast<int>(data[at] | (data[at + 1] << 8)); };
  if (!need(13) || std::string(data.begin(), data.begin() + 6) != "GIF89a") return fail("header");
  gif.width = u16(6);
  gif.height = u16(8);
  const uint8_t flags = data[10];
  pos = 13;
  std::vector<uint8_t> global_table;
  if (flags & 0x80) {
    const size_t entries = size_t{1} << ((flags & 7) + 1);
    if (!need(3 * entries)) return fail("global colour table");
    global_table.assign(data.begin() + static_cast<long>(pos),
                        data.begin() + static_cast<long>(pos + 3 * entries));
    pos += 3 * entries;
  }
  int pending_delay = 0;
  while (true) {
    if (!need(1)) return fail("missing trailer");
    const uint8_t block = data[pos++];
    if (block == 0x3B) break;
    if (block == 0x21) {
      if (!need(1)) return fail("extension label");
      const uint8_t label = data[pos++];
      bool first = true;
      while (true) {
        if (!need(1)) return fail("extension sub-block");
        const uint8_t size = data[pos++];
        if (size == 0) break;
        if (!need(size)) return fail("extension data");
        if (label == 0xF9 && first && size >= 4) pending_delay = u16(pos + 1);
        if (label == 0xFF && first && size == 11 &&
            std::string(data.begin() + static_cast<long>(pos),
                        data.begin() + static_cast<long>(pos + 11)) == "NETSCAPE2.0") {
          gif.loops = true;
        }
        first = false;
        pos += size;
      }
      continue;
    }
    if (block != 0x2C) return fail("unknown block");
    if (!need(9)) return fail("image descriptor");
    const int left = u16(pos), top = u16(pos + 2), w = u16(pos + 4), h = u16(pos + 6);
    const uint8_t image_flags = data[pos + 8];
    pos += 9;
    if (left != 0 || top != 0 || w != gif.width || h != gif.height || (image_flags & 0x40)) {
      return fail("only full-frame, non-interlaced images are supported here");
    }
    std::vector<uint8_t> table = global_table;
    if (image_flags & 0x80) {
      const size_t entries = size_t{1} << ((image_flags & 7) + 1);
      if (!need(3 * entries)) return fail("local colour table");
      table.assign(data.begin() + static_cast<long>(pos),
                   data.begin() + static_cast<long>(pos + 3 * entries));
      pos += 3 * entries;
    }
    if (!need(1)) return fail("LZW minimum code size");
    const int min_code_size = data[pos++];
    if (min_code_size < 2 || min_code_size > 8) return fail("LZW minimum code size");
    std::vector<uint8_t> stream;
    while (true) {
      if (!need(1)) return fail("image sub-block");
      const uint8_t size = data[pos++];
      if (size == 0) break;
      if (!need(size)) return fail("image data");
      stream.insert(stream.end(), data.begin() + static_cast<long>(pos),
                    data.begin() + static_cast<long>(pos + size));
      pos += size;
    }
    // LZW decode, per the GIF89a spec appendix F.
    const int clear = 1 << min_code_size, end = clear + 1;
    std::vector<int> prefix(4096, -1);
    std::vector<uint8_t> suffix(4096, 0), first_byte(4096, 0);
    for (int i = 0; i < clear; ++i) {
      suffix[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
      first_byte[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    }
    int code_size = min_code_size + 1, next = end + 1, previous = -1;
    size_t bit = 0;
    std::vector<uint8_t> indices;
    std::vector<uint8_t> scratch;
    auto emit = [&](int code) {
      scratch.clear();
      for (int c = code; c >= 0; c = prefix[static_cast<size_t>(c)]) {
        scratch.push_back(suffix[static_cast<size_t>(c)]);
      }
      indices.insert(indices.end(), scratch.rbegin(), scratch.rend());
    };
    bool ended = false;
    while (bit + static_cast<size_t>(code_size) <= stream.size() * 8) {
      int code = 0;
      for (int b = 0; b < code_size; ++b, ++bit) {
        code |= ((stream[bit / 8] >> (bit % 8)) & 1) << b;
      }
      if (code == clear) {
        code_size = min_code_size + 1;
        next = end + 1;
        previous = -1;
        continue;
      }
      if (code == end) {
        ended = true;
        break;
      }
      if (previous < 0) {
        if (code >= clear) return fail("first code after clear is not a literal");
        emit(code);
        previous = code;
        continue;
      }
      if (code > next || (code == next && next >= 4096)) {
        return fail("code out of range");
      }
      uint8_t k;
      if (code < next) {
        k = first_byte[static_cast<size_t>(code)];
      } else {  // the KwKwK case: code == next
        k = first_byte[static_cast<size_t>(previous)];
      }
      if (next < 4096) {
        prefix[static_cast<size_t>(next)] = previous;
        suffix[static_cast<size_t>(next)] = k;
        first_byte[static_cast<size_t>(next)] = first_byte[static_cast<size_t>(previous)];
        ++next;
        if (next >= (1 << code_size) && code_size < 12) ++code_size;
      }
      emit(code);
      previous = code;
    }
    if (!ended) return fail("LZW stream without end code");
    if (indices.size() != static_cast<size_t>(w) * static_cast<size_t>(h)) {
      return fail("frame has " + std::to_string(indices.size()) + " pixels, expected " +
                  std::to_string(w * h));
    }
    std::vector<uint8_t> rgb(indices.size() * 3);
    for (size_t i = 0; i < indices.size(); ++i) {
      const size_t entry = indices[i];
      if (3 * entry + 2 >= table.size()) return fail("index outside the colour table");
      rgb[3 * i] = table[3 * entry];
      rgb[3 * i + 1] = table[3 * entry + 1];
      rgb[3 * i + 2] = table[3 * entry + 2];
    }
    gif.rgb.push_back(std::move(rgb));
    gif.delays.push_back(pending_delay);
    pending_delay = 0;
  }
  return gif;
}

}  // namespace tessera::testing
