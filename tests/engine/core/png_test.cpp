// decode_png against encode_png on random pixels, and the chunk streams stb_image mishandles.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/core/png.h"

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
    const uint32_t len = (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
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
  edited.insert(iend, kEmptyIdat);         // after the data
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

}  // namespace
}  // namespace tessera
