// The CLIP text encoder on the CUDA backend against the PyTorch parity fixture
// (tests/fixtures/parity: per-layer hidden states with the key padding mask, last hidden state with
// and without it), at the CPU tests' f32 tolerance (1e-4 of each tensor's scale), and against the
// CPU backend on the same input. Skips without a usable CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/text/clip_text_encoder.h"
#include "kernels/backend.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::text {
namespace {

const std::string kParityDir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/parity";

TEST(ClipTextEncoderCuda, MatchesReferenceWithAndWithoutMask) {
  TESSERA_SKIP_WITHOUT_CUDA_BACKEND();
  kernels::Backend& cuda = *test::shared_cuda_backend();
  auto expected = SafeTensors::open(kParityDir + "/expected.safetensors");
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  auto ids_view = expected->view_as("clip.input_ids", DType::kI32, {2, 77});
  auto mask_view = expected->view_as("clip.attention_mask", DType::kI32, {2, 77});
  ASSERT_TRUE(ids_view.ok() && mask_view.ok());
  const int32_t* ids = ids_view->as<const int32_t>();
  std::vector<int32_t> lengths;
  for (int b = 0; b < 2; ++b) {
    const int32_t* row = mask_view->as<const int32_t>() + b * 77;
    lengths.push_back(static_cast<int32_t>(std::count(row, row + 77, 1)));
  }

  auto encoder = ClipTextEncoder::load(kParityDir + "/text_encoder", cuda);
  ASSERT_TRUE(encoder.ok()) << encoder.status().to_string();
  std::vector<std::vector<float>> hidden;
  auto out = encoder->encode(ids, lengths.data(), 2, 77, &hidden);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(hidden.size(), 3u);
  for (size_t n = 0; n < hidden.size(); ++n) {
    EXPECT_TRUE(test::close_rel(
        hidden[n], expected->to_f32("clip.hidden_states." + std::to_string(n)).value()))
        << "hidden state " << n;
  }
  std::vector<float> last;
  TESSERA_ASSERT_OK(encoder->encode_to_host(ids, lengths.data(), 2, 77, &last));
  EXPECT_TRUE(test::close_rel(last, expected->to_f32("clip.last_hidden_state").value()));
  TESSERA_ASSERT_OK(encoder->encode_to_host(ids, nullptr, 2, 77, &last));
  EXPECT_TRUE(test::close_rel(last, expected->to_f32("clip.last_hidden_state_nomask").value()));

  // The pipeline encodes one row at a time (batch 1): same values as the batch-2 pass on the CPU.
  auto cpu_backend = kernels::make_cpu_backend();
  auto cpu_encoder = ClipTextEncoder::load(kParityDir + "/text_encoder", *cpu_backend);
  ASSERT_TRUE(cpu_encoder.ok()) << cpu_encoder.status().to_string();
  for (int b = 0; b < 2; ++b) {
    std::vector<float> gpu_row, cpu_row;
    TESSERA_ASSERT_OK(encoder->encode_to_host(ids + b * 77, &lengths[b], 1, 77, &gpu_row));
    TESSERA_ASSERT_OK(cpu_encoder->encode_to_host(ids + b * 77, &lengths[b], 1, 77, &cpu_row));
    EXPECT_TRUE(test::close_rel(gpu_row, cpu_row)) << "row " << b;
  }
}

}  // namespace
}  // namespace tessera::text
