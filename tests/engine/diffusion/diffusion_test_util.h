// Shared helpers of the diffusion parity tests: the fixtures of tests/fixtures/diffusion/
// (tools/make_diffusion_fixtures.py), NCHW <-> NHWC, tolerance checks, edited checkpoints.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/diffusion/layers.h"
#include "tests/support/kernel_test_util.h"

namespace tessera::diffusion::test_util {

using ::tessera::test::close_rel;  // the fixtures' tolerance (tests/support/kernel_test_util.h)

inline std::string fixture_dir() {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/diffusion/";
}

inline std::vector<float> to_nhwc(const std::vector<float>& nchw, int64_t b, int64_t c, int64_t h,
                                  int64_t w) {
  std::vector<float> out(nchw.size());
  nchw_to_nhwc(nchw.data(), out.data(), b, c, h, w);
  return out;
}

inline std::vector<float> to_nchw(const float* nhwc, const kernels::ImageShape& s) {
  std::vector<float> out(static_cast<size_t>(s.elements()));
  nhwc_to_nchw(nhwc, out.data(), s.batch, s.channels, s.height, s.width);
  return out;
}

// Writes a copy of `src` (every tensor as F32) to a temporary file after `edit` changed the
// name -> (shape, values) map; returns its path. The file is removed by the destructor.
class EditedCheckpoint {
 public:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  using Tensors = std::map<std::string, Tensor>;

  EditedCheckpoint(const std::string& src, const std::string& name,
                   const std::function<void(Tensors&)>& edit) {
    SafeTensors file = SafeTensors::open(src).value();
    Tensors tensors;
    for (const TensorInfo& info : file.tensors()) {
      tensors[info.name] = {info.shape, file.to_f32(info.name).value()};
    }
    edit(tensors);
    std::vector<TensorToWrite> out;
    for (const auto& [n, t] : tensors) {
      out.push_back(TensorToWrite::from_f32(n, DType::kF32, t.shape, t.values.data()));
    }
    path_ = (std::filesystem::temp_directory_path() /
             ("tessera-sd-" + name + "-" + std::to_string(static_cast<long>(::getpid())) +
              ".safetensors"))
                .string();
    EXPECT_TRUE(write_safetensors(path_, out).ok());
  }
  ~EditedCheckpoint() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Kernel choices the parity tests run: the defaults, then each switch flipped alone, then
// everything unfused / exact.
inline std::vector<std::pair<std::string, KernelOptions>> kernel_variants() {
  using kernels::AttentionAlgo;
  using kernels::Fusion;
  std::vector<std::pair<std::string, KernelOptions>> v;
  v.push_back({"default", KernelOptions{}});
  KernelOptions o;
  o.group_norm_silu = Fusion::kOff;
  v.push_back({"group_norm_silu off", o});
  o = {};
  o.geglu = Fusion::kOff;
  v.push_back({"geglu off", o});
  o = {};
  o.upsample = Fusion::kOff;
  v.push_back({"upsample off", o});
  o = {};
  o.conv = ConvPolicy::kGemm;
  v.push_back({"conv gemm", o});
  o = {};
  o.conv = ConvPolicy::kWinograd;
  v.push_back({"conv winograd", o});
  for (auto [name, algo] : {std::pair{"attention flash", AttentionAlgo::kFlash},
                            std::pair{"attention partial-fused", AttentionAlgo::kPartialFused},
                            std::pair{"attention naive", AttentionAlgo::kNaive}}) {
    o = {};
    o.attention = algo;
    v.push_back({name, o});
  }
  o = {Fusion::kOff, Fusion::kOff, Fusion::kOff, AttentionAlgo::kNaive, ConvPolicy::kGemm};
  v.push_back({"all off", o});
  return v;
}

}  // namespace tessera::diffusion::test_util
