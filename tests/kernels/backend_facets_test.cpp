// The facet conformance suites (backend_facet_suites.h) on the CPU backend: tensor, decode and
// diffusion ops (it has no extraction facet: the host polygonizes, engine/mesh).
#include <memory>
#include <string>

#include "kernels/backend.h"
#include "tests/kernels/backend_facet_suites.h"

namespace tessera::test {
namespace {

kernels::Backend* cpu_backend(std::string* /*why*/) {
  static const std::unique_ptr<kernels::Backend> backend = kernels::make_cpu_backend();
  return backend.get();
}

const BackendUnderTest kCpu[] = {{"Cpu", cpu_backend}};

INSTANTIATE_TEST_SUITE_P(Cpu, TensorOpsConformance, ::testing::ValuesIn(kCpu), backend_test_name);
INSTANTIATE_TEST_SUITE_P(Cpu, DecodeOpsConformance, ::testing::ValuesIn(kCpu), backend_test_name);
INSTANTIATE_TEST_SUITE_P(Cpu, DiffusionOpsConformance, ::testing::ValuesIn(kCpu),
                         backend_test_name);

TEST(BackendFacets, TheCpuBackendHasEveryFacetButExtraction) {
  kernels::Backend& cpu = *cpu_backend(nullptr);
  EXPECT_NE(cpu.decode(), nullptr);
  EXPECT_NE(cpu.diffusion(), nullptr);
  EXPECT_EQ(cpu.extraction(), nullptr);
}

}  // namespace
}  // namespace tessera::test
