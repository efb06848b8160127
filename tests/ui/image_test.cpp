// Image writers (GIF encoder round-tripped through an independent decoder, PNG structure, contact
// sheets). No GL needed. (The mesh readers behind `tessera render` and tessera-view are tested
// headless in tests/engine/mesh/import_*_test.cpp.)
#include "ui/render/image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/ui/gif_decoder.h"

namespace tessera::render {
namespace {

Image solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgba.resize(static_cast<size_t>(w * h * 4));
  for (size_t i = 0; i < img.rgba.size(); i += 4) {
    img.rgba[i] = r;
    img.rgba[i + 1] = g;
    img.rgba[i + 2] = b;
    img.rgba[i + 3] = 255;
  }
  return img;
}

uint8_t level(int l, int levels) {
  return static_cast<uint8_t>((l * 255 + (levels - 1) / 2) / (levels - 1));
}

TEST(GifTest, PaletteColoursRoundTripExactlyThroughManyDictionaryResets) {
  // Random palette colours: LZW compresses poorly, so the 4096-code table fills and is reset many
  // times per frame, and code widths pass through 9..12 bits.
  std::mt19937 rng(7);
  std::vector<Image> frames;
  for (int f = 0; f < 3; ++f) {
    Image img = solid(97, 61, 0, 0, 0);
    for (size_t i = 0; i < img.rgba.size(); i += 4) {
      img.rgba[i] = level(static_cast<int>(rng() % 6), 6);
      img.rgba[i + 1] = level(static_cast<int>(rng() % 7), 7);
      img.rgba[i + 2] = level(static_cast<int>(rng() % 6), 6);
    }
    frames.push_back(img);
  }
  auto bytes = encode_gif(frames, 7);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  const auto gif = testing::decode_gif(*bytes);
  ASSERT_TRUE(gif.error.empty()) << gif.error;
  EXPECT_EQ(gif.width, 97);
  EXPECT_EQ(gif.height, 61);
  EXPECT_TRUE(gif.loops);
  ASSERT_EQ(gif.rgb.size(), 3u);
  for (size_t f = 0; f < 3; ++f) {
    EXPECT_EQ(gif.delays[f], 7);
    for (size_t p = 0; p < static_cast<size_t>(97 * 61); ++p) {
      ASSERT_EQ(gif.rgb[f][3 * p], frames[f].rgba[4 * p]) << "frame " << f << " pixel " << p;
      ASSERT_EQ(gif.rgb[f][3 * p + 1], frames[f].rgba[4 * p + 1])
          << "frame " << f << " pixel " << p;
      ASSERT_EQ(gif.rgb[f][3 * p + 2], frames[f].rgba[4 * p + 2])
          << "frame " << f << " pixel " << p;
    }
  }
}

TEST(GifTest, SmoothColoursDitherWithinOneLevelAndCompress) {
  // A gradient: every decoded channel lies within one palette step of the input, and the
  // average over a 4x4 dither cell stays close to it.
  Image img = solid(128, 64, 0, 0, 0);
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 128; ++x) {
      uint8_t* p = &img.rgba[static_cast<size_t>((y * 128 + x) * 4)];
      p[0] = static_cast<uint8_t>(x * 2);
      p[1] = static_cast<uint8_t>(y * 4);
      p[2] = 200;
    }
  }
  auto bytes = encode_gif({img}, 10);
  ASSERT_TRUE(bytes.ok());
  EXPECT_LT(bytes->size(), 128u * 64u);  // well under one byte per pixel
  const auto gif = testing::decode_gif(*bytes);
  ASSERT_TRUE(gif.error.empty()) << gif.error;
  ASSERT_EQ(gif.rgb.size(), 1u);
  double error_sum = 0;
  for (size_t p = 0; p < 128u * 64u; ++p) {
    for (int c = 0; c < 3; ++c) {
      const int diff = std::abs(gif.rgb[0][3 * p + static_cast<size_t>(c)] -
                                img.rgba[4 * p + static_cast<size_t>(c)]);
      ASSERT_LE(diff, 51) << "pixel " << p << " channel " << c;
      error_sum +=
          gif.rgb[0][3 * p + static_cast<size_t>(c)] - img.rgba[4 * p + static_cast<size_t>(c)];
    }
  }
  // Ordered dithering is unbiased on average.
  EXPECT_LT(std::abs(error_sum / (128.0 * 64.0 * 3.0)), 4.0);
}

TEST(GifTest, RejectsBadInput) {
  EXPECT_EQ(encode_gif({}, 5).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(encode_gif({solid(4, 4, 0, 0, 0), solid(4, 5, 0, 0, 0)}, 5).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(encode_gif({solid(4, 4, 0, 0, 0)}, 0).status().code(), ErrorCode::kInvalidArgument);
  Image broken = solid(4, 4, 0, 0, 0);
  broken.rgba.pop_back();
  EXPECT_EQ(encode_gif({broken}, 5).status().code(), ErrorCode::kInvalidArgument);
  const Status st = write_gif("/nonexistent-dir/x.gif", {solid(2, 2, 1, 2, 3)}, 5);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent-dir/x.gif"), std::string::npos) << st.message();
}

TEST(PngTest, WritesAValidPngHeader) {
  auto bytes = encode_png(solid(33, 17, 10, 20, 30));
  ASSERT_TRUE(bytes.ok());
  ASSERT_GT(bytes->size(), 33u);
  EXPECT_EQ(std::memcmp(bytes->data(), "\x89PNG\r\n\x1a\n", 8), 0);
  EXPECT_EQ(std::memcmp(bytes->data() + 12, "IHDR", 4), 0);
  auto be32 = [&](size_t at) {
    const uint8_t* b = bytes->data() + at;
    return (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
  };
  EXPECT_EQ(be32(16), 33);
  EXPECT_EQ(be32(20), 17);
  EXPECT_EQ((*bytes)[24], 8);  // bit depth
  EXPECT_EQ((*bytes)[25], 6);  // colour type RGBA
  EXPECT_EQ(encode_png(Image{}).status().code(), ErrorCode::kInvalidArgument);
}

TEST(ContactSheetTest, TilesFramesRowByRow) {
  std::vector<Image> frames = {solid(3, 2, 10, 0, 0), solid(3, 2, 20, 0, 0), solid(3, 2, 30, 0, 0)};
  auto sheet = contact_sheet(frames, 2);
  ASSERT_TRUE(sheet.ok());
  EXPECT_EQ(sheet->width, 6);
  EXPECT_EQ(sheet->height, 4);
  EXPECT_EQ(sheet->pixel(0, 0)[0], 10);
  EXPECT_EQ(sheet->pixel(5, 1)[0], 20);
  EXPECT_EQ(sheet->pixel(2, 3)[0], 30);
  EXPECT_EQ(sheet->pixel(4, 3)[0], 0);  // the unused cell is black
  EXPECT_EQ(contact_sheet(frames, 0).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::render
