// cuda::embedding_gather against ref::embedding_gather (bit-exact: a gather only copies and widens
// bf16 exactly), f32 and bf16 tables, row widths below and above a block; an out-of-range id gives
// a NaN row (documented caller-bug behaviour) instead of an out-of-bounds read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

#if TESSERA_HAVE_CUDA
namespace tessera::kernels {
namespace {

class CudaEmbedding : public test::GpuTest {
 protected:
  void check(DType dtype, int64_t vocab, int64_t dim, int64_t n, uint64_t seed) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " vocab=" + std::to_string(vocab) +
                 " dim=" + std::to_string(dim) + " n=" + std::to_string(n));
    const size_t table_size = static_cast<size_t>(vocab * dim);
    const std::vector<float> table_f32 =
        dtype == DType::kF32 ? test::random_floats(table_size, seed) : std::vector<float>();
    const std::vector<uint16_t> table_bf16 =
        dtype == DType::kBF16 ? test::random_bf16(table_size, seed) : std::vector<uint16_t>();
    const void* host_table = dtype == DType::kF32 ? static_cast<const void*>(table_f32.data())
                                                  : static_cast<const void*>(table_bf16.data());
    const std::vector<int32_t> ids =
        test::random_ids(static_cast<size_t>(n), seed + 1, static_cast<int32_t>(vocab));
    const size_t out_size = static_cast<size_t>(n * dim);
    std::vector<float> expected(out_size);
    ref::embedding_gather(Weight{host_table, dtype, vocab, dim}, ids.data(), n, expected.data());

    cuda::DeviceBuffer d_table = dtype == DType::kF32 ? upload(table_f32) : upload(table_bf16);
    cuda::DeviceBuffer d_ids = upload(ids);
    cuda::DeviceBuffer d_out = alloc<float>(out_size);
    TESSERA_ASSERT_OK(cuda::embedding_gather(Weight{d_table.data(), dtype, vocab, dim},
                                             d_ids.as<int32_t>(), n, d_out.as<float>(), stream_));
    ASSERT_TRUE(sync());
    const std::vector<float> actual = download<float>(d_out, out_size);
    EXPECT_TRUE(test::all_equal(actual.data(), expected.data(), out_size));
  }
};

TEST_F(CudaEmbedding, SmallTables) {
  uint64_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t dim : {1, 33, 768}) {
      for (int64_t n : {1, 7, 300}) check(dtype, 50, dim, n, seed++);
    }
  }
}

TEST_F(CudaEmbedding, OutOfRangeIdGivesNanRow) {
  const int64_t vocab = 4, dim = 5;
  const std::vector<float> table = test::random_floats(static_cast<size_t>(vocab * dim), 100);
  const std::vector<int32_t> ids = {1, 4, -1, 3};
  cuda::DeviceBuffer d_table = upload(table);
  cuda::DeviceBuffer d_ids = upload(ids);
  cuda::DeviceBuffer d_out = alloc<float>(ids.size() * dim);
  TESSERA_ASSERT_OK(cuda::embedding_gather(Weight{d_table.data(), DType::kF32, vocab, dim},
                                           d_ids.as<int32_t>(), static_cast<int64_t>(ids.size()),
                                           d_out.as<float>(), stream_));
  ASSERT_TRUE(sync());
  const std::vector<float> out = download<float>(d_out, ids.size() * dim);
  for (int64_t d = 0; d < dim; ++d) {
    EXPECT_EQ(out[static_cast<size_t>(d)], table[static_cast<size_t>(1 * dim + d)]);
    EXPECT_TRUE(std::isnan(out[static_cast<size_t>(1 * dim + d)]));
    EXPECT_TRUE(std::isnan(out[static_cast<size_t>(2 * dim + d)]));
    EXPECT_EQ(out[static_cast<size_t>(3 * dim + d)], table[static_cast<size_t>(3 * dim + d)]);
  }
}

TEST(CudaEmbeddingArgs, RejectsUnsupportedDtype) {
  float dummy = 0;
  int32_t id = 0;
  const Status st =
      cuda::embedding_gather(Weight{&dummy, DType::kI32, 1, 1}, &id, 1, &dummy, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("embedding_gather"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::kernels
#else
TESSERA_GPU_TESTS_NEED_CUDA_BUILD(CudaEmbedding)
#endif
