// decode_png against encode_png on random pixels, and the chunk streams stb_image mishandles.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/png.h"

namespace tessera {
namespace {

std::vector<uint8_t> random_pixels(int w, int h, int channels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (auto& v : px) v = static_cast<uint8_t>(rng());
  return px;
}

// Offset of the first chunk of `type` in a PNG stream (after the 8-byte signature).
size_t find_chunk(const std::string& png, const char* type) {
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t len = (uint32_t(uint8_t(png[at])) << 24) |
                         (uint32_t(uint8_t(png[at + 1])) << 16) |
                         (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
    if (png.compare(at + 4, 4, type) == 0) return at;
    at += 12 + len;
  }
  return std::string::npos;
}

const std::string kEmptyIdat("\0\0\0\0IDAT\xAE\x42\x60\x82", 12);

TEST(PngTest, RoundTripsRandomPixelsForEveryChannelCount) {
  for (int channels = 1; channels <= 4; ++channels) {
    const auto px = random_pixels(13, 7, channels, 40u + channels);
    auto png = encode_png(px.data(), 13, 7, channels);
    ASSERT_TRUE(png.ok()) << png.status().message();
    auto back = decode_png(png->data(), png->size(), channels, "random.png");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->width, 13);
    EXPECT_EQ(back->height, 7);
    EXPECT_EQ(back->pixels, px) << channels << " channels";
  }
}

// stb_image copied an empty first IDAT chunk into its not-yet-allocated buffer (memcpy to null,
// caught by UBSan in glb_import_fuzz). Empty IDAT chunks hold no data: the image decodes as if
// they were not there, wherever they sit.
TEST(PngTest, EmptyIdatChunksAreIgnored) {
  const auto px = random_pixels(9, 5, 3, 7);
  auto png = encode_png(px.data(), 9, 5, 3);
  ASSERT_TRUE(png.ok());
  const size_t idat = find_chunk(*png, "IDAT");
  ASSERT_NE(idat, std::string::npos);
  const size_t iend = find_chunk(*png, "IEND");
  ASSERT_NE(iend, std::string::npos);
  std::string edited = *png;
  edited.insert(iend, kEmptyIdat);               // after the data
  edited.insert(idat, kEmptyIdat + kEmptyIdat);  // two before it
  auto back = decode_png(edited.data(), edited.size(), 3, "empty-idat.png");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->pixels, px);

  // An empty IDAT cut short inside its CRC (found by glb_import_fuzz): a clean error, no UB.
  std::string cut = png->substr(0, idat) + kEmptyIdat.substr(0, 11);
  auto cut_result = decode_png(cut.data(), cut.size(), 3, "cut-idat.png");
  ASSERT_FALSE(cut_result.ok());
  EXPECT_NE(cut_result.status().message().find("cut-idat.png"), std::string::npos);

  // Only empty IDAT chunks: no image data at all, a clean error.
  std::string no_data = png->substr(0, idat) + kEmptyIdat + png->substr(iend);
  auto none = decode_png(no_data.data(), no_data.size(), 3, "no-data.png");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no-data.png"), std::string::npos);
}

TEST(PngTest, EveryTruncationFailsCleanly) {
  const auto px = random_pixels(6, 6, 4, 3);
  auto png = encode_png(px.data(), 6, 6, 4);
  ASSERT_TRUE(png.ok());
  for (size_t n = 0; n < png->size(); ++n) {
    auto r = decode_png(png->data(), n, 4, "cut.png");
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("cut.png"), std::string::npos) << n;
    }
  }
}

// PNG text (issue 24: the settings in every PNG Tessera writes): iTXt chunks after IHDR with
// valid CRCs (checked here by an independent bitwise CRC-32), UTF-8 values read back, the pixels
// untouched, and keywords the PNG rules forbid refused.
TEST(PngTextTest, ITxtChunksRoundTripWithValidCrcs) {
  const auto px = random_pixels(7, 5, 3, 11);
  auto png = encode_png(px.data(), 7, 5, 3);
  ASSERT_TRUE(png.ok());
  const std::string json = R"({"prompt":"a caf\u00e9 chair","seed":7})";
  auto with = add_png_text(*png, {{"Software", "Tessera test"},
                                  {"tessera", json},
                                  {"Comment", "p\xc3\xa9tanque \xe2\x9c\x93"}});
  ASSERT_TRUE(with.ok()) << with.status().message();
  auto text = read_png_text(*with, "t.png");
  ASSERT_TRUE(text.ok());
  ASSERT_EQ(text->size(), 3u);
  EXPECT_EQ((*text)[0], (std::pair<std::string, std::string>("Software", "Tessera test")));
  EXPECT_EQ((*text)[1].second, json);
  EXPECT_EQ((*text)[2].second, "p\xc3\xa9tanque \xe2\x9c\x93");
  auto decoded = decode_png(with->data(), with->size(), 3, "t.png");
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->pixels, px);
  // Every chunk's CRC (over type + data) is right.
  auto crc = [](const char* d, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<uint8_t>(d[i]);
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  };
  size_t at = 8, chunks = 0;
  while (at + 12 <= with->size()) {
    auto be = [&](size_t i) {
      return (uint32_t(uint8_t((*with)[i])) << 24) | (uint32_t(uint8_t((*with)[i + 1])) << 16) |
             (uint32_t(uint8_t((*with)[i + 2])) << 8) | uint32_t(uint8_t((*with)[i + 3]));
    };
    const uint32_t len = be(at);
    ASSERT_LE(at + 12 + len, with->size());
    EXPECT_EQ(be(at + 8 + len), crc(with->data() + at + 4, 4 + len)) << "chunk " << chunks;
    at += 12 + len;
    ++chunks;
  }
  EXPECT_EQ(at, with->size());
  EXPECT_EQ(find_chunk(*with, "iTXt"), 33u);  // right after IHDR

  for (const char* bad : {"", " lead", "trail ", "two  spaces", "tab\there"}) {
    EXPECT_FALSE(add_png_text(*png, {{bad, "x"}}).ok()) << bad;
  }
  EXPECT_FALSE(add_png_text(*png, {{std::string(80, 'k'), "x"}}).ok());
  EXPECT_FALSE(add_png_text("not a png at all, not at all, no", {{"k", "v"}}).ok());
  EXPECT_FALSE(read_png_text("nope", "x.png").ok());
  const PngText t = tessera_png_text("");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].first, "Software");
}

}  // namespace
}  // namespace tessera
