#include "tests/support/diffusion_cases.h"

#include <cmath>

#include "tests/support/kernel_test_util.h"

namespace tessera::test {

kernels::Conv2dShape conv_shape(const ConvCase& c) {
  kernels::Conv2dShape s;
  s.batch = c.batch;
  s.in_h = c.in_h;
  s.in_w = c.in_w;
  s.in_c = c.in_c;
  s.out_c = c.out_c;
  s.kernel = c.kernel;
  s.stride = c.stride;
  s.upsample2x = c.upsample;
  s.pad_end_only = c.pad_end_only;
  return s;
}

std::string describe(const kernels::Conv2dShape& s, kernels::ConvAlgo algo) {
  return std::string(algo == kernels::ConvAlgo::kWinograd ? "winograd" : "gemm") + " batch " +
         std::to_string(s.batch) + " " + std::to_string(s.in_h) + "x" + std::to_string(s.in_w) +
         " " + std::to_string(s.in_c) + "->" + std::to_string(s.out_c) + " k" +
         std::to_string(s.kernel) + " s" + std::to_string(s.stride) + (s.upsample2x ? " up2" : "") +
         (s.pad_end_only ? " pad-end" : "");
}

std::string describe(const AttentionCase& c, kernels::AttentionAlgo algo) {
  static const char* kNames[] = {"auto", "flash", "partial-fused", "naive"};
  return std::string(kNames[static_cast<int>(algo)]) + " batch " + std::to_string(c.batch) +
         " heads " + std::to_string(c.heads) + " q " + std::to_string(c.q_len) + " kv " +
         std::to_string(c.kv_len) + " d " + std::to_string(c.head_dim) +
         (c.packed ? " packed" : "");
}

AttentionInputs attention_inputs(const AttentionCase& c, uint64_t& seed) {
  const int64_t hd = c.heads * c.head_dim;
  AttentionInputs in;
  in.shape = kernels::contiguous_attention(c.batch, c.heads, c.q_len, c.kv_len, c.head_dim, false,
                                           1.0f / std::sqrt(float(c.head_dim)));
  in.packed = c.packed;
  kernels::AttentionShape& s = in.shape;
  if (c.packed) {  // q_len == kv_len
    in.q = random_floats(size_t(c.batch * c.kv_len * 3 * hd), seed++, -2.0f, 2.0f);
    in.k_offset = hd;
    in.v_offset = 2 * hd;
    s.q_token_stride = s.k_token_stride = s.v_token_stride = 3 * hd;
    s.q_batch_stride = s.k_batch_stride = s.v_batch_stride = c.kv_len * 3 * hd;
    s.o_token_stride = hd + 3;  // padded output rows
    s.o_batch_stride = c.q_len * s.o_token_stride;
  } else {
    in.q = random_floats(size_t(c.batch * c.q_len * hd), seed++, -2.0f, 2.0f);
    in.k = random_floats(size_t(c.batch * c.kv_len * hd), seed++, -2.0f, 2.0f);
    in.v = random_floats(size_t(c.batch * c.kv_len * hd), seed++);
  }
  return in;
}

std::string describe(const GroupNormCase& c) {
  return "batch " + std::to_string(c.batch) + " " + std::to_string(c.height) + "x" +
         std::to_string(c.width) + " channels " + std::to_string(c.channels) + " groups " +
         std::to_string(c.groups);
}

}  // namespace tessera::test
