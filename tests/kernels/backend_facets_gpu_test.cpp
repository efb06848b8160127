// The facet conformance suites (backend_facet_suites.h) on the CUDA backend: every facet. Skipped,
// with make_cuda_backend()'s reason, without a usable device or in a build without CUDA.
#include <string>

#include "kernels/backend.h"
#include "tests/kernels/backend_facet_suites.h"
#include "tests/kernels/gpu_test_util.h"

namespace tessera::test {
namespace {

kernels::Backend* cuda_backend(std::string* why) {
  return shared_cuda_backend(why);
}

const BackendUnderTest kCuda[] = {{"Cuda", cuda_backend}};

INSTANTIATE_TEST_SUITE_P(Cuda, TensorOpsConformance, ::testing::ValuesIn(kCuda), backend_test_name);
INSTANTIATE_TEST_SUITE_P(Cuda, DecodeOpsConformance, ::testing::ValuesIn(kCuda), backend_test_name);
INSTANTIATE_TEST_SUITE_P(Cuda, DiffusionOpsConformance, ::testing::ValuesIn(kCuda),
                         backend_test_name);
INSTANTIATE_TEST_SUITE_P(Cuda, ExtractionOpsConformance, ::testing::ValuesIn(kCuda),
                         backend_test_name);

TEST(BackendFacetsCuda, TheCudaBackendHasEveryFacet) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *shared_cuda_backend();
  EXPECT_NE(cuda.decode(), nullptr);
  EXPECT_NE(cuda.diffusion(), nullptr);
  EXPECT_NE(cuda.extraction(), nullptr);
}

}  // namespace
}  // namespace tessera::test
