// The CPU instruction-set cap of the front ends (tessera --isa, TESSERA_ISA).
#include "engine/runtime/capabilities.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu/isa.h"

namespace tessera::runtime {
namespace {

using kernels::cpu::Isa;

Isa best_supported() {
  if (kernels::cpu::isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  return kernels::cpu::isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kScalar;
}

// Leaves the kernels uncapped and TESSERA_ISA unset, whatever a test did.
class CpuIsaTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("TESSERA_ISA"); }
  void TearDown() override {
    unsetenv("TESSERA_ISA");
    kernels::cpu::limit_isa(Isa::kAvx512);
  }
};

TEST_F(CpuIsaTest, EachNameCapsTheKernelsAtItsLevel) {
  ASSERT_TRUE(set_cpu_isa("scalar").ok());
  EXPECT_STREQ(cpu_isa(), "scalar");
  EXPECT_EQ(kernels::cpu::active_isa(), Isa::kScalar);
  if (kernels::cpu::isa_supported(Isa::kAvx2)) {
    ASSERT_TRUE(set_cpu_isa("avx2").ok());
    EXPECT_STREQ(cpu_isa(), "avx2");
  }
  // A cap above what the CPU has changes nothing: the best supported level.
  ASSERT_TRUE(set_cpu_isa("avx512").ok());
  EXPECT_EQ(kernels::cpu::active_isa(), best_supported());
}

TEST_F(CpuIsaTest, EmptyTextReadsTheEnvironment) {
  ASSERT_TRUE(set_cpu_isa("").ok());  // unset: no cap
  setenv("TESSERA_ISA", "scalar", 1);
  ASSERT_TRUE(set_cpu_isa("").ok());
  EXPECT_STREQ(cpu_isa(), "scalar");
  // The option wins over the environment.
  ASSERT_TRUE(set_cpu_isa("avx512").ok());
  EXPECT_EQ(kernels::cpu::active_isa(), best_supported());
}

TEST_F(CpuIsaTest, UnknownNamesAreRefusedNamingTheSourceAndTheChoices) {
  ASSERT_TRUE(set_cpu_isa("scalar").ok());
  const Status bad = set_cpu_isa("avx3");
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--isa: 'avx3'"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("avx512, avx2, scalar"), std::string::npos) << bad.message();
  EXPECT_STREQ(cpu_isa(), "scalar");  // nothing changed

  setenv("TESSERA_ISA", "AVX2 ", 1);
  const Status env = set_cpu_isa("");
  EXPECT_EQ(env.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(env.message().find("TESSERA_ISA: 'AVX2 '"), std::string::npos) << env.message();
  EXPECT_STREQ(cpu_isa(), "scalar");
}

}  // namespace
}  // namespace tessera::runtime
