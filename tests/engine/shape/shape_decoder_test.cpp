// Shape decoder parity with the PyTorch reference (tests/fixtures/parity/README.md).
#include "engine/shape/shape_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/cpu_features.h"

namespace tessera::shape {
namespace {

const std::string kDir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity/";

void expect_close(const float* got, const std::vector<float>& want, const std::string& what) {
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
    max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(max_err, 1e-4 * std::max(max_ref, 1e-3))
      << what << ": max error " << max_err << " (max |ref| " << max_ref << ")";
}

class ShapeDecoderParity : public ::testing::Test {
 protected:
  void SetUp() override {
    auto st = SafeTensors::open(kDir + "shape_tokenizer.safetensors");
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    store_ = std::make_unique<WeightStore>(std::move(*st), WeightFormat::kF32);
    auto ex = SafeTensors::open(kDir + "expected.safetensors");
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    expected_ = std::make_unique<SafeTensors>(std::move(*ex));
    backend_ = kernels::make_cpu_backend();
    auto d = ShapeDecoder::load(*store_, *backend_, 100);  // a chunk that does not divide 256
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    decoder_ = std::move(*d);
  }
  std::vector<float> want(const std::string& name) { return expected_->to_f32(name).value(); }

  std::unique_ptr<WeightStore> store_;
  std::unique_ptr<SafeTensors> expected_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<ShapeDecoder> decoder_;
};

TEST_F(ShapeDecoderParity, ConfigCodebookLatentsAndOccupancy) {
  const ShapeDecoderConfig& c = decoder_->config();
  EXPECT_EQ(c.width, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.num_latents, 16);
  EXPECT_EQ(c.num_codes, 64);
  EXPECT_EQ(c.embed_dim, 8);
  EXPECT_EQ(c.layers, 2);
  expect_close(decoder_->normalized_codebook().data(), want("shape.codebook_normalized"),
               "codebook");

  auto ids_view = expected_->view("shape.ids");
  ASSERT_TRUE(ids_view.ok());
  std::vector<int32_t> ids(16);
  std::memcpy(ids.data(), ids_view->data, 16 * 4);
  std::vector<float> latents(16 * 64);
  std::vector<std::vector<float>> layers;
  ASSERT_TRUE(decoder_->decode_tokens(ids.data(), 16, latents.data(), &layers).ok());
  ASSERT_EQ(layers.size(), 3u);
  expect_close(layers[0].data(), want("shape.decoder.input"), "decoder.input");
  expect_close(layers[1].data(), want("shape.decoder.blocks.0"), "blocks.0");
  expect_close(layers[2].data(), want("shape.decoder.blocks.1"), "blocks.1");
  expect_close(latents.data(), want("shape.latents"), "latents");

  const std::vector<float> points = want("shape.points");
  std::vector<float> emb(32 * 771);
  fourier_embed(points.data(), 32, decoder_->fourier_weight(), 128, emb.data());
  expect_close(emb.data(), want("shape.fourier_embedding"), "fourier");

  fourier_embed_reference(points.data(), 32, decoder_->fourier_weight(), 128, emb.data());
  expect_close(emb.data(), want("shape.fourier_embedding"), "fourier reference");

  // The fast path with SIMD on and off (the off switch), and a chunk that does not divide 256.
  const bool simd = simd_enabled();
  for (bool on : {true, false}) {
    set_simd_enabled(on);
    std::vector<float> logits(256);
    ASSERT_TRUE(decoder_->occupancy(latents.data(), 16, points.data(), 256, logits.data()).ok());
    expect_close(logits.data(), want("shape.occupancy_logits"),
                 on ? "occupancy simd" : "occupancy scalar");
  }
  set_simd_enabled(simd);
}

// The fast embedding (SIMD and scalar) against the libm reference on random points, frequency
// counts that are not multiples of the vector width, and weights large enough to reach the
// |x| > 8192 fallback. Tolerance: a few fp32 ulps of the argument's range reduction, plus the
// reference's own rounding of pm (<= 0.5 ulp of ~110 rad).
TEST(FourierEmbedder, MatchesReferenceOnAwkwardSizes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> coord(-1.05f, 1.05f);
  std::normal_distribution<float> gauss(0.0f, 8.0f);
  const bool simd = simd_enabled();
  for (int64_t F : {1, 7, 13, 128}) {
    std::vector<float> w(static_cast<size_t>(3 * F));
    for (float& x : w) x = gauss(rng);
    w[0] = 9000.0f;  // |p * w| > 8192 for |p| > 0.91: the libm fallback
    const int64_t n = 203;
    std::vector<float> p(static_cast<size_t>(3 * n));
    for (float& x : p) x = coord(rng);
    p[0] = 1.0f;
    const int64_t dim = 3 + 6 * F;
    std::vector<float> ref(static_cast<size_t>(n * dim)), got(ref.size());
    fourier_embed_reference(p.data(), n, w.data(), F, ref.data());
    for (bool on : {true, false}) {
      set_simd_enabled(on);
      FourierEmbedder(w.data(), F).embed(p.data(), n, got.data());
      double max_err = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - ref[i]));
      EXPECT_LE(max_err, 2e-5) << "F " << F << (on ? " simd" : " scalar");
    }
  }
  set_simd_enabled(simd);
}

TEST_F(ShapeDecoderParity, RejectsOutOfRangeIds) {
  std::vector<int32_t> ids(16, 3);
  ids[5] = 64;
  std::vector<float> latents(16 * 64);
  Status st = decoder_->decode_tokens(ids.data(), 16, latents.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("token 5"), std::string::npos) << st.message();
  EXPECT_FALSE(decoder_->decode_tokens(ids.data(), 17, latents.data()).ok());
}

TEST(ShapeDecoderConfig, MissingTensorIsNamed) {
  auto st = SafeTensors::open(kDir + "expected.safetensors");  // not a shape tokenizer
  ASSERT_TRUE(st.ok());
  auto c = infer_shape_decoder_config(*st);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("decoder.positional_encodings"), std::string::npos);
}

}  // namespace
}  // namespace tessera::shape
