// WeightStore (zero-copy f32, bf16 converted once, shape/dtype errors naming the tensor) and
// scan_non_finite (NaN / inf in every float dtype, reported with tensor name and index).
#include "engine/weights/weight_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class TempFile {
 public:
  TempFile() {
    static std::atomic<int> counter{0};
    path_ =
        (fs::temp_directory_path() / ("tessera_weight_store_test_" + std::to_string(::getpid()) +
                                      "_" + std::to_string(counter++) + ".safetensors"))
            .string();
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (float(i) - float(n) / 2) * scale;
  return v;
}

// w: F32 [3, 4]; b: F32 [4]; h: F16 [2, 2]; g: BF16 [2, 3]; ids: I32 [2].
struct Checkpoint {
  TempFile file;
  std::vector<float> w = iota(12, 0.37f), b = iota(4, 1.1f), h = iota(4, 0.5f), g = iota(6, 0.3f);
  std::vector<int32_t> ids = {1, 2};
  Checkpoint() {
    std::vector<uint16_t> g_bf16(g.size());
    convert_f32_to_bf16(g.data(), g_bf16.data(), g.size());
    g_bits = g_bf16;
    const Status st = write_safetensors(
        file.path(), {TensorToWrite::raw("w", DType::kF32, {3, 4}, w.data()),
                      TensorToWrite::raw("b", DType::kF32, {4}, b.data()),
                      TensorToWrite::from_f32("h", DType::kF16, {2, 2}, h.data()),
                      TensorToWrite::raw("g", DType::kBF16, {2, 3}, g_bits.data()),
                      TensorToWrite::raw("ids", DType::kI32, {2}, ids.data())});
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  WeightStore open(WeightFormat format) const {
    auto st = SafeTensors::open(file.path());
    EXPECT_TRUE(st.ok());
    return WeightStore(std::move(st).value(), format);
  }
  std::vector<uint16_t> g_bits;
};

TEST(WeightStore, F32IsZeroCopy) {
  Checkpoint c;
  WeightStore store = c.open(WeightFormat::kF32);
  auto w = store.matrix("w", 3, 4);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->rows, 3);
  EXPECT_EQ(w->cols, 4);
  auto view = store.file().view("w");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(w->data, view->data);  // the mapped bytes themselves
  EXPECT_EQ(std::memcmp(w->data, c.w.data(), 12 * sizeof(float)), 0);
  auto b = store.f32("b", {4});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::memcmp(*b, c.b.data(), 4 * sizeof(float)), 0);
  EXPECT_EQ(store.converted_bytes(), 0u);
  // -1 accepts any size; the Weight carries the actual one.
  auto any = store.matrix("w", -1, 4);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->rows, 3);
}

TEST(WeightStore, ConvertsHalfTypesToF32Once) {
  Checkpoint c;
  WeightStore store = c.open(WeightFormat::kF32);
  auto h = store.f32("h", {2, 2});
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*h)[i], c.h[size_t(i)]);  // multiples of 0.5: exact in f16
  const size_t bytes = store.converted_bytes();
  EXPECT_EQ(bytes, 4 * sizeof(float));
  auto again = store.f32("h", {2, 2});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *h);
  EXPECT_EQ(store.converted_bytes(), bytes);
}

TEST(WeightStore, Bf16ConvertsMatricesOnceAndKeepsVectorsF32) {
  Checkpoint c;
  WeightStore store = c.open(WeightFormat::kBF16);
  auto w = store.matrix("w", 3, 4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype, DType::kBF16);
  const auto* bits = static_cast<const uint16_t*>(w->data);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(bits[i], f32_to_bf16(c.w[i])) << i;
  EXPECT_EQ(store.converted_bytes(), 12 * sizeof(uint16_t));
  auto w2 = store.matrix("w", 3, 4);
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(w2->data, w->data);
  EXPECT_EQ(store.converted_bytes(), 12 * sizeof(uint16_t));
  // A BF16 tensor is used in place.
  auto g = store.matrix("g", 2, 3);
  ASSERT_TRUE(g.ok());
  auto g_view = store.file().view("g");
  ASSERT_TRUE(g_view.ok());
  EXPECT_EQ(g->data, g_view->data);
  // matrix_f32 and vectors stay f32 (zero-copy here).
  auto w_f32 = store.matrix_f32("w", 3, 4);
  ASSERT_TRUE(w_f32.ok());
  EXPECT_EQ(w_f32->dtype, DType::kF32);
  auto b = store.f32("b", {4});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(store.converted_bytes(), 12 * sizeof(uint16_t));
  // "w" was asked for in both forms, "b" in f32: only "g" could be stored as BF16 unchanged.
  EXPECT_EQ(store.bf16_only_tensors(), std::vector<std::string>{"g"});
}

TEST(WeightStore, ErrorsNameTensorFileAndShapes) {
  Checkpoint c;
  WeightStore store = c.open(WeightFormat::kF32);
  auto missing = store.matrix("lm_head.weight", 3, 4);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'lm_head.weight'"), std::string::npos);
  EXPECT_NE(missing.status().message().find(c.file.path()), std::string::npos);

  auto shape = store.matrix("w", 4, 3);
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("'w' has shape [3, 4], expected [4, 3]"),
            std::string::npos)
      << shape.status().message();
  EXPECT_FALSE(store.f32("b", {2, 2}).ok());  // rank differs

  auto dtype = store.f32("ids", {2});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("I32"), std::string::npos) << dtype.status().message();
}

Status scan_one(DType stored, const std::vector<float>& values) {
  TempFile file;
  const std::vector<float> clean = {1.0f, 2.0f};
  const Status written = write_safetensors(
      file.path(), {TensorToWrite::from_f32("clean", DType::kF32, {2}, clean.data()),
                    TensorToWrite::from_f32("t", stored, {int64_t(values.size())}, values.data())});
  if (!written.ok()) return written;
  auto st = SafeTensors::open(file.path());
  if (!st.ok()) return st.status();
  return scan_non_finite(*st);
}

TEST(ScanNonFinite, FindsNanAndInfInEveryFloatType) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(scan_one(dtype, {0.0f, -1.0f, 65000.0f, 1e-8f}).ok());
    const Status with_nan = scan_one(dtype, {0.0f, 1.0f, nan, 2.0f});
    ASSERT_FALSE(with_nan.ok());
    EXPECT_EQ(with_nan.code(), ErrorCode::kCorruptData);
    EXPECT_NE(with_nan.message().find("tensor 't' element 2 is NaN"), std::string::npos)
        << with_nan.message();
    const Status with_inf = scan_one(dtype, {0.0f, -inf, inf});
    ASSERT_FALSE(with_inf.ok());
    EXPECT_NE(with_inf.message().find("element 1 is -inf"), std::string::npos)
        << with_inf.message();
  }
}

TEST(ScanNonFinite, ReportsTheFirstHitInALargeTensor) {
  // 3M elements: several parallel chunks; hits in two chunks, the earlier one is reported.
  std::vector<float> values(3u << 20, 0.25f);
  values[2500000] = std::numeric_limits<float>::infinity();
  values[1200001] = std::numeric_limits<float>::quiet_NaN();
  const Status st = scan_one(DType::kF32, values);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("element 1200001 is NaN"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera
