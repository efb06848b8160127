#include "engine/diffusion/tiny_decoder.h"

#include <string>
#include <utility>

namespace tessera::diffusion {

namespace {

// The TAESD release's nn.Sequential indices (Clamp at 0): first conv, the stages' first blocks,
// the convs after the upsamples, the last conv.
constexpr int kConvIn = 1;
constexpr int kStageStart[4] = {3, 8, 13, 18};
constexpr int kStageBlocks[4] = {3, 3, 3, 1};
constexpr int kUpConv[3] = {7, 12, 17};
constexpr int kConvOut = 19;
constexpr int kBlockConvs[3] = {0, 2, 4};  // the convs inside a block's nn.Sequential

std::string module(const TinyDecoderConfig& c, int release_index) {
  return c.prefix + std::to_string(release_index + c.offset);
}

}  // namespace

Expected<TinyDecoderConfig> infer_tiny_decoder_config(const SafeTensors& file) {
  TinyDecoderConfig c;
  const TensorInfo* first = nullptr;
  for (const auto& [prefix, offset] :
       {std::pair<std::string, int>{"", 0}, {"decoder.", 0}, {"decoder.layers.", -1}}) {
    const std::string name = prefix + std::to_string(kConvIn + offset) + ".weight";
    if (const TensorInfo* t = file.find(name)) {
      c.prefix = prefix;
      c.offset = offset;
      first = t;
      break;
    }
  }
  if (first == nullptr) {
    return invalid_argument(file.path() +
                            ": not a tiny decoder (TAESD): no \"1.weight\" (taesd_decoder "
                            "release) or \"decoder.layers.0.weight\" (diffusers AutoencoderTiny)");
  }
  if (first->shape.size() != 4 || first->shape[2] != 3 || first->shape[3] != 3 ||
      first->shape[0] < 1 || first->shape[1] < 1) {
    return invalid_argument(file.path() + ": tiny decoder tensor " + module(c, kConvIn) +
                            ".weight is " + first->shape_string() +
                            ", not a 3x3 convolution [width, latent channels, 3, 3]");
  }
  c.width = first->shape[0];
  c.latent_channels = first->shape[1];
  const std::string out = module(c, kConvOut) + ".weight";
  if (const TensorInfo* t = file.find(out); t != nullptr && t->shape.size() == 4) {
    c.out_channels = t->shape[0];
  }
  if (c.out_channels != 3) {
    return invalid_argument(file.path() + ": tiny decoder tensor " + out + " makes " +
                            std::to_string(c.out_channels) + " channels, not RGB");
  }
  return c;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> tiny_decoder_tensor_shapes(
    const TinyDecoderConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  const int64_t w = c.width;
  auto conv = [&](const std::string& name, int64_t in, int64_t o, bool bias) {
    out.push_back({name + ".weight", {o, in, 3, 3}});
    if (bias) out.push_back({name + ".bias", {o}});
  };
  conv(module(c, kConvIn), c.latent_channels, w, true);
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < kStageBlocks[s]; ++b) {
      for (int k : kBlockConvs) {
        conv(module(c, kStageStart[s] + b) + ".conv." + std::to_string(k), w, w, true);
      }
    }
    if (s < 3) conv(module(c, kUpConv[s]), w, w, false);
  }
  conv(module(c, kConvOut), w, c.out_channels, true);
  return out;
}

Expected<std::unique_ptr<TinyDecoder>> TinyDecoder::load(WeightStore& store,
                                                         const TinyDecoderConfig& config,
                                                         kernels::Backend* backend) {
  std::unique_ptr<TinyDecoder> m(new TinyDecoder());
  TESSERA_ASSIGN_OR_RETURN(backend, model_backend(backend, &m->own_backend_, "tiny decoder"));
  m->backend_ = backend;
  m->ws_ = Workspace(backend);
  m->main_ = Workspace(backend);
  m->config_ = config;
  const TinyDecoderConfig& c = config;
  if (c.latent_channels < 1 || c.width < 1 || c.out_channels < 1) {
    return invalid_argument("tiny decoder config: " + std::to_string(c.latent_channels) +
                            " latent channels, width " + std::to_string(c.width));
  }
  LoadContext ctx{store, *backend, m->storage_};
  const int64_t w = c.width;
  TESSERA_ASSIGN_OR_RETURN(m->conv_in_,
                           Conv2d::load(ctx, module(c, kConvIn), c.latent_channels, w, 3));
  m->stages_.resize(4);
  m->up_.resize(3);
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < kStageBlocks[s]; ++b) {
      Block block;
      for (int k = 0; k < 3; ++k) {
        const std::string name =
            module(c, kStageStart[s] + b) + ".conv." + std::to_string(kBlockConvs[k]);
        TESSERA_ASSIGN_OR_RETURN(block.conv[k], Conv2d::load(ctx, name, w, w, 3));
      }
      m->stages_[static_cast<size_t>(s)].push_back(std::move(block));
    }
    if (s < 3) {
      TESSERA_ASSIGN_OR_RETURN(m->up_[static_cast<size_t>(s)],
                               Conv2d::load(ctx, module(c, kUpConv[s]), w, w, 3, 1,
                                            /*upsample2x=*/true, false, /*has_bias=*/false));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(m->conv_out_,
                           Conv2d::load(ctx, module(c, kConvOut), w, c.out_channels, 3));
  return m;
}

Status TinyDecoder::decode(const float* z, int64_t batch, int64_t height, int64_t width,
                           float* image) {
  if (z == nullptr || image == nullptr)
    return invalid_argument("TinyDecoder::decode: null input or output");
  if (batch < 1 || height < 1 || width < 1) {
    return invalid_argument("TinyDecoder::decode: batch " + std::to_string(batch) +
                            ", latent size " + std::to_string(height) + "x" +
                            std::to_string(width) + " must be >= 1");
  }
  kernels::Backend& be = *backend_;
  kernels::DiffusionOps& ops = diffusion_ops(be);
  const KernelOptions& opt = options_;
  const Tf32Scope tf32(be, opt);
  using Kind = kernels::Pointwise::Kind;
  const kernels::Pointwise relu{Kind::kRelu, 1.0f, 0.0f};
  const int64_t c = config_.width;
  int64_t h = height, w = width;
  // The largest activation: width channels at the output size.
  const int64_t most = batch * (h * 8) * (w * 8) * c;
  TESSERA_ASSIGN_OR_RETURN(float* a, main_.get(0, most));
  TESSERA_ASSIGN_OR_RETURN(float* t1, main_.get(1, most));
  TESSERA_ASSIGN_OR_RETURN(float* t2, main_.get(2, most));
  const int64_t zn = batch * h * w * config_.latent_channels;
  TESSERA_RETURN_IF_ERROR(
      ops.pointwise(z, t1, zn, kernels::Pointwise{Kind::kScaledTanh, 3.0f, 0.0f}));
  TESSERA_RETURN_IF_ERROR(conv_in_->run(t1, batch, h, w, a, opt, ws_));
  TESSERA_RETURN_IF_ERROR(ops.pointwise(a, a, batch * h * w * c, relu));
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (Block& b : stages_[s]) {
      const int64_t n = batch * h * w * c;
      TESSERA_RETURN_IF_ERROR(b.conv[0]->run(a, batch, h, w, t1, opt, ws_));
      TESSERA_RETURN_IF_ERROR(ops.pointwise(t1, t1, n, relu));
      TESSERA_RETURN_IF_ERROR(b.conv[1]->run(t1, batch, h, w, t2, opt, ws_));
      TESSERA_RETURN_IF_ERROR(ops.pointwise(t2, t2, n, relu));
      TESSERA_RETURN_IF_ERROR(b.conv[2]->run(t2, batch, h, w, t1, opt, ws_));
      TESSERA_RETURN_IF_ERROR(be.add(t1, a, a, n));
      TESSERA_RETURN_IF_ERROR(ops.pointwise(a, a, n, relu));
    }
    if (s < up_.size()) {
      TESSERA_RETURN_IF_ERROR(up_[s]->run(a, batch, h, w, t1, opt, ws_));
      std::swap(a, t1);
      h *= 2;
      w *= 2;
    }
  }
  TESSERA_RETURN_IF_ERROR(conv_out_->run(a, batch, h, w, image, opt, ws_));
  const int64_t pixels = batch * h * w * config_.out_channels;
  return ops.pointwise(image, image, pixels, kernels::Pointwise{Kind::kAffine, 2.0f, -1.0f});
}

}  // namespace tessera::diffusion
