// `tessera-bench diffusion [--size N] [--quick] [--no-ablation] [--lcm] [--controlnet] [--device
// cpu|cuda]
// [--write-results] [--results FILE] [--json FILE]`: the Stable Diffusion 1.5 UNet and VAE decoder
// with random weights (no download), under an ablation of the fused kernels of
// kernels/diffusion_ops.h (Chen et al. 2023), on the CPU or (--device cuda) the CUDA backend
// (kernels/cuda/diffusion_cuda_ops.h; every run is followed by a synchronize, so the times are
// the GPU's; the section is then "## Diffusion (GPU)").
//
// The weights: every tensor of engine/diffusion/sd_config.h's SD 1.5 tensor list, written into an
// in-memory safetensors image in BF16 (1.8 GB instead of 3.6 GB in F32) and loaded through a
// WeightStore in WeightFormat::kBF16, exactly as a real checkpoint loads (linear layers run on
// bf16 weights, convolutions and norms in f32). Values follow PyTorch's default init
// (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights, norm scales 1, biases 0) so the activations stay
// in the ranges a real model sees; the timings do not depend on the values otherwise.
//
// Timed: one guided UNet step (batch 2: conditional + unconditional, 77 context tokens) and one VAE
// decode (batch 1), each under every KernelOptions row of the ablation: all on (the per-layer
// chooser), all on in bf16 compute (KernelOptions::precision; on AVX-512 BF16 CPUs only, reported
// as its speed-up over the f32 all-on row of the same run), GroupNorm+SiLU unfused, GEGLU unfused,
// naive attention, im2col+GEMM only (Winograd off), upsample unfused, everything off. Each row is
// one warm-up (packs the convolution weights for a new algorithm) then --repeat timed runs; the
// median is reported with min and max, the achieved GFLOP/s from an analytic count (convolutions,
// linear layers and attention's two products; norms and activations are not counted), and the
// saving of the row's kernel vs all-on.
// --quick: size 256 unless --size is given, the VAE decode timed with everything on only (f32 and
// bf16). --no-ablation: only the all-on rows (f32, bf16) of both models (the full-size numbers in
// a few minutes: the 512x512 f32 ablation alone takes ~10 minutes on 2 cores).
// Hidden `--config tiny`: the parity fixtures' tiny architecture (tests/fixtures/diffusion), for
// the CLI test. Errors (bad --size, allocation, file I/O) exit 1 with a message; timings never do.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/common.h"
#include "bench/random_checkpoint.h"
#include "bench/subcommands.h"
#include "core/assets.h"
#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/controlnet.h"
#include "engine/diffusion/tiny_decoder.h"
#include "engine/diffusion/layers.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/unet.h"
#include "engine/diffusion/vae_decoder.h"
#include "kernels/diffusion_ops.h"

namespace tessera::bench {
namespace {

using diffusion::KernelOptions;
using diffusion::UNetConfig;
using diffusion::VaeDecoderConfig;

constexpr const char* kHeadingCpu = "## Diffusion (CPU)\n";
constexpr const char* kHeadingGpu = "## Diffusion (GPU)\n";
constexpr int64_t kContextLen = 77;  // CLIP's token count
constexpr int64_t kGuidanceBatch = 2;

struct DiffusionBenchOptions {
  int64_t size = 0;  // image pixels; 0: 512, or 256 with --quick
  bool quick = false;
  int repeat = 0;  // 0: 3, or 2 with --quick
  bool write_results = false;
  std::string results_path;
  std::string json_path;
  std::string config = "sd15";  // hidden: "tiny"
  bool controlnet = false;      // also time the step with an SD 1.5-shaped ControlNet
  bool lcm = false;             // also time the unguided (batch 1) step: LCM's 4-step image
  bool no_ablation = false;
  std::string device = "cpu";
};

// The parity fixtures' architecture (tests/fixtures/diffusion/README.md).
UNetConfig tiny_unet_config() {
  UNetConfig c;
  c.model_channels = 32;
  c.level_channels = {32, 64};
  c.level_attention = {true, false};
  c.num_res_blocks = 1;
  c.num_heads = 2;
  c.context_dim = 32;
  return c;
}

VaeDecoderConfig tiny_vae_config() {
  VaeDecoderConfig c;
  c.level_channels = {64, 32};
  c.blocks_per_level = 1;
  return c;
}

// ---- analytic FLOP counts (2 per multiply-add) --------------------------------------------------

double conv_flops(int64_t out_pixels, int64_t in_c, int64_t out_c, int64_t kernel) {
  return 2.0 * static_cast<double>(out_pixels) *
         static_cast<double>(in_c * out_c * kernel * kernel);
}
double linear_flops(int64_t rows, int64_t in, int64_t out) {
  return 2.0 * static_cast<double>(rows) * static_cast<double>(in * out);
}
// Q K^T and P V over all heads: 2 products of q_len x kv_len x channels.
double attention_flops(int64_t batch, int64_t q_len, int64_t kv_len, int64_t channels) {
  return 4.0 * static_cast<double>(batch * q_len) * static_cast<double>(kv_len * channels);
}

// ResBlock at `pixels` (all images): two 3x3 convolutions, the 1x1 shortcut when the channels
// change, and the timestep projection (emb_dim > 0, one row per image).
double resblock_flops(int64_t batch, int64_t pixels, int64_t in_c, int64_t out_c, int64_t emb_dim) {
  double f = conv_flops(pixels, in_c, out_c, 3) + conv_flops(pixels, out_c, out_c, 3);
  if (in_c != out_c) f += linear_flops(pixels, in_c, out_c);
  if (emb_dim > 0) f += linear_flops(batch, emb_dim, out_c);
  return f;
}

// SpatialTransformer with one block over hw tokens per image (layers.h).
double transformer_flops(int64_t batch, int64_t hw, int64_t c, int64_t context_dim) {
  const int64_t rows = batch * hw;
  double f = 2 * linear_flops(rows, c, c);                                // proj_in, proj_out
  f += 4 * linear_flops(rows, c, c) + attention_flops(batch, hw, hw, c);  // self-attention
  f += 2 * linear_flops(rows, c, c) + 2 * linear_flops(batch * kContextLen, context_dim, c) +
       attention_flops(batch, hw, kContextLen, c);                   // cross-attention
  f += linear_flops(rows, c, 8 * c) + linear_flops(rows, 4 * c, c);  // GEGLU feed-forward
  return f;
}

// One UNet forward over `batch` latents of h x w (the structure of UNet::load).
double unet_flops(const UNetConfig& c, int64_t batch, int64_t h, int64_t w) {
  const int64_t emb = c.time_embed_dim();
  auto px = [&](int64_t level) { return batch * (h >> level) * (w >> level); };
  double f = linear_flops(batch, c.model_channels, emb) + linear_flops(batch, emb, emb);
  f += conv_flops(px(0), c.in_channels, c.model_channels, 3);
  std::vector<int64_t> skips = {c.model_channels};
  int64_t ch = c.model_channels;
  const int64_t levels = c.levels();
  for (int64_t l = 0; l < levels; ++l) {
    for (int64_t r = 0; r < c.num_res_blocks; ++r) {
      f += resblock_flops(batch, px(l), ch, c.level_channels[l], emb);
      ch = c.level_channels[l];
      if (c.level_attention[l]) f += transformer_flops(batch, px(l) / batch, ch, c.context_dim);
      skips.push_back(ch);
    }
    if (l + 1 < levels) {
      f += conv_flops(px(l + 1), ch, ch, 3);  // stride-2 downsample
      skips.push_back(ch);
    }
  }
  const int64_t low = levels - 1;
  f += 2 * resblock_flops(batch, px(low), ch, ch, emb) +
       transformer_flops(batch, px(low) / batch, ch, c.context_dim);
  for (int64_t l = levels - 1; l >= 0; --l) {
    for (int64_t r = 0; r <= c.num_res_blocks; ++r) {
      const int64_t skip = skips.back();
      skips.pop_back();
      f += resblock_flops(batch, px(l), ch + skip, c.level_channels[l], emb);
      ch = c.level_channels[l];
      if (c.level_attention[l]) f += transformer_flops(batch, px(l) / batch, ch, c.context_dim);
      if (l > 0 && r == c.num_res_blocks) f += conv_flops(px(l - 1), ch, ch, 3);  // upsample conv
    }
  }
  f += conv_flops(px(0), ch, c.out_channels, 3);
  return f;
}

// One VAE decode of `batch` latents of h x w (the structure of VaeDecoder::load).
double vae_flops(const VaeDecoderConfig& c, int64_t batch, int64_t h, int64_t w) {
  const int64_t levels = c.levels();
  // Pixels of up level l (level levels-1 runs at the latent size).
  auto px = [&](int64_t level) {
    const int64_t s = levels - 1 - level;
    return batch * (h << s) * (w << s);
  };
  int64_t ch = c.level_channels.back();
  double f = linear_flops(px(levels - 1), c.z_channels, c.z_channels);
  f += conv_flops(px(levels - 1), c.z_channels, ch, 3);
  const int64_t lo = px(levels - 1);
  f += 2 * resblock_flops(batch, lo, ch, ch, 0) + 4 * linear_flops(lo, ch, ch) +
       attention_flops(batch, lo / batch, lo / batch, ch);
  for (int64_t l = levels - 1; l >= 0; --l) {
    for (int64_t j = 0; j < c.blocks_per_level; ++j) {
      f += resblock_flops(batch, px(l), ch, c.level_channels[l], 0);
      ch = c.level_channels[l];
    }
    if (l > 0) f += conv_flops(px(l - 1), ch, ch, 3);
  }
  f += conv_flops(px(0), ch, c.out_channels, 3);
  return f;
}

// ---- random weights ----------------------------------------------------------------------------

// ---- the ablation ------------------------------------------------------------------------------

struct Variant {
  std::string name;
  KernelOptions options;
  bool unet = true, vae = true;  // whether the switch changes anything in the model
  bool bf16 = false;             // the bf16 compute row (compared with all-on f32 as a ratio)
};

constexpr const char* kAllOn = "all fusions on (default chooser)";

std::vector<Variant> ablation(const kernels::Backend& backend) {
  using kernels::AttentionAlgo;
  using kernels::Fusion;
  std::vector<Variant> v;
  v.push_back({kAllOn, KernelOptions{}});
  KernelOptions o;
  const kernels::DiffusionOps& d = *backend.diffusion();  // a diffusion model's backend has it
  if (!d.bf16_compute() && d.tf32_products_available()) {
    // A GPU's Precision::kBf16 (diffusion::use_device_bf16 / use_tf32).
    KernelOptions reduced;
    reduced.precision = kernels::Precision::kBf16;
    v.push_back({d.bf16_products_available() ? "all on, bf16 tensor-core products (TF32 attention)"
                                             : "all on, TF32 tensor-core products",
                 reduced, true, true, true});
  }
  if (d.bf16_compute()) {
    o.precision = kernels::Precision::kBf16;
    v.push_back({"all on, bf16 compute (AVX-512 BF16)", o, true, true, true});
  }
  o = {};
  o.group_norm_silu = Fusion::kOff;
  v.push_back({"GroupNorm+SiLU unfused", o});
  o = {};
  o.geglu = Fusion::kOff;
  v.push_back({"GEGLU unfused", o, true, false});  // the VAE has no feed-forward
  o = {};
  o.attention = AttentionAlgo::kNaive;
  v.push_back({"attention naive", o});
  o = {};
  o.conv = diffusion::ConvPolicy::kGemm;
  v.push_back({"conv im2col+GEMM only (Winograd off)", o});
  o = {};
  o.upsample = Fusion::kOff;
  v.push_back({"upsample unfused", o});
  o = {Fusion::kOff, Fusion::kOff, Fusion::kOff, AttentionAlgo::kNaive,
       diffusion::ConvPolicy::kGemm};
  v.push_back({"everything off", o});
  return v;
}

struct Result {
  std::string model;  // "unet" / "vae"
  std::string variant;
  Timing time;  // seconds
  double flops = 0;
  double saving_s = 0;  // this row's time - all-on time
  bool bf16 = false;
};

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, seconds < 0.1 ? "%.1f" : "%.0f", seconds * 1e3);
  return buf;
}

std::string table(const std::vector<Result>& results) {
  std::ostringstream t;
  t << "| model | kernels | time (ms, median) | min - max | GFLOP/s | vs all on |\n"
       "|---|---|---|---|---|---|\n";
  for (const Result& r : results) {
    char rate[32], saving[64];
    if (r.flops > 0) {
      std::snprintf(rate, sizeof rate, "%.1f", r.flops / r.time.median / 1e9);
    } else {
      std::snprintf(rate, sizeof rate, "-");  // no analytic count for the row
    }
    if (r.variant == kAllOn) {
      std::snprintf(saving, sizeof saving, "-");
    } else if (r.bf16) {
      // The precision's gain: how many times faster than the all-on f32 row.
      std::snprintf(saving, sizeof saving, "%.2fx faster than f32",
                    (r.time.median - r.saving_s) / r.time.median);
    } else {
      // What the row's fused kernel saves: the off time minus the all-on time, and its share of
      // the off time.
      std::snprintf(saving, sizeof saving, "%s%s ms (%+.1f%%)", r.saving_s < 0 ? "-" : "+",
                    ms(std::fabs(r.saving_s)).c_str(), 100.0 * r.saving_s / r.time.median);
    }
    t << "| " << r.model << " | " << r.variant << " | " << ms(r.time.median) << " | "
      << ms(r.time.min) << " - " << ms(r.time.max) << " | " << rate << " | " << saving << " |\n";
  }
  return t.str();
}

Status run_bench_diffusion(DiffusionBenchOptions o) {
  const bool tiny = o.config == "tiny";
  // The embedded model's real weights (f32, as `tessera image` runs them) instead of random ones.
  const bool shipped = o.config == "tessera-tiny";
  if (!tiny && !shipped && o.config != "sd15") {
    return invalid_argument("bench diffusion: --config must be sd15, tessera-tiny or tiny, not '" +
                            o.config + "'");
  }
  UNetConfig ucfg = tiny ? tiny_unet_config() : diffusion::sd15_unet_config();
  VaeDecoderConfig vcfg = tiny ? tiny_vae_config() : diffusion::sd15_vae_decoder_config();
  std::optional<SafeTensors> shipped_file;
  if (shipped) {
    const std::string dir = default_diffusion_model_dir();
    TESSERA_ASSIGN_OR_RETURN(SafeTensors file, SafeTensors::open(dir + "/model.safetensors"));
    // The UNet's head count is not in the shapes: the model card states it (SD's 8 otherwise).
    TESSERA_ASSIGN_OR_RETURN(int64_t heads, diffusion::model_card_unet_heads(dir));
    if (heads == 0) heads = 8;
    TESSERA_ASSIGN_OR_RETURN(ucfg, diffusion::infer_unet_config(file, heads));
    TESSERA_ASSIGN_OR_RETURN(vcfg, diffusion::infer_vae_decoder_config(file));
    shipped_file.emplace(std::move(file));
  }
  if (o.size == 0) o.size = shipped ? 64 : (o.quick ? 256 : 512);
  const int64_t multiple = vcfg.upscale() * ucfg.size_multiple();
  if (o.size < multiple || o.size % multiple != 0) {
    return invalid_argument("bench diffusion: --size " + std::to_string(o.size) +
                            " must be a positive multiple of " + std::to_string(multiple) +
                            " (the VAE's x" + std::to_string(vcfg.upscale()) +
                            " times the UNet's halvings)");
  }
  const int reps = o.repeat > 0 ? o.repeat : (o.quick ? 2 : 3);
  const int64_t latent = o.size / vcfg.upscale();

  std::unique_ptr<kernels::Backend> backend;
  if (o.device == "cuda") {
    TESSERA_ASSIGN_OR_RETURN(backend, kernels::make_cuda_backend());
  } else {
    backend = kernels::make_cpu_backend();
  }
  const bool gpu = backend->device() != Device::kCpu;
  const char* heading = gpu ? kHeadingGpu : kHeadingCpu;

  const Machine machine = describe_machine();
  std::fputs(machine_markdown(machine).c_str(), stdout);
  if (gpu) std::printf("- backend: %s\n", backend->name().c_str());
  warn_if_busy(machine);

  diffusion::TensorShapes shapes = diffusion::unet_tensor_shapes(ucfg);
  for (auto& entry : diffusion::vae_decoder_tensor_shapes(vcfg)) shapes.insert(std::move(entry));
  const auto build_start = std::chrono::steady_clock::now();
  std::vector<uint8_t> image;
  WeightStore store;
  if (shipped) {
    store = WeightStore(std::move(*shipped_file), WeightFormat::kF32);
  } else {
    TESSERA_ASSIGN_OR_RETURN(image, random_checkpoint(shapes));
    TESSERA_ASSIGN_OR_RETURN(SafeTensors file,
                             SafeTensors::parse(image.data(), image.size(), "random SD weights"));
    store = WeightStore(std::move(file), WeightFormat::kBF16);
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<diffusion::UNet> unet,
      diffusion::UNet::load(store, ucfg, diffusion::kUNetPrefix, backend.get()));
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<diffusion::VaeDecoder> vae,
      diffusion::VaeDecoder::load(store, vcfg, diffusion::kVaePrefix, backend.get()));
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - build_start).count();
  const int64_t params =
      diffusion::unet_parameter_count(ucfg) + diffusion::vae_decoder_parameter_count(vcfg);
  std::printf(
      "%s: UNet %s; VAE decoder %s\n%.1fM parameters (BF16 image %.0f MiB), built in %.1f s; "
      "image %lldx%lld (latent %lldx%lld), %d timed runs per row after a warm-up, %d threads\n",
      shipped ? "tessera-tiny/diffusion (shipped weights, f32)"
              : (tiny ? "tiny fixture config" : "SD 1.5"),
      ucfg.summary().c_str(), vcfg.summary().c_str(), static_cast<double>(params) / 1e6,
      static_cast<double>(image.size()) / (1 << 20), build_s, static_cast<long long>(o.size),
      static_cast<long long>(o.size), static_cast<long long>(latent),
      static_cast<long long>(latent), reps, default_thread_pool().num_threads());
  std::fflush(stdout);

  // Inputs: N(0,1)-like latents and context, as a sampler's first step sees them.
  std::vector<float> x(static_cast<size_t>(kGuidanceBatch * latent * latent * ucfg.in_channels));
  std::vector<float> ctx(static_cast<size_t>(kGuidanceBatch * kContextLen * ucfg.context_dim));
  std::vector<float> eps(static_cast<size_t>(kGuidanceBatch * latent * latent * ucfg.out_channels));
  std::vector<float> z(static_cast<size_t>(latent * latent * vcfg.z_channels));
  std::vector<float> rgb(static_cast<size_t>(o.size * o.size * vcfg.out_channels));
  fill_floats(x.data(), x.size(), 3);
  fill_floats(ctx.data(), ctx.size(), 4);
  fill_floats(z.data(), z.size(), 5);
  for (float& v : z) v *= diffusion::kSdLatentScale;
  // The same inputs in the backend's memory (a copy on a device; outputs stay there).
  diffusion::Workspace on_backend(backend.get());
  auto put = [&](int slot, std::vector<float>& host, bool upload) -> Expected<float*> {
    TESSERA_ASSIGN_OR_RETURN(float* p, on_backend.get(slot, static_cast<int64_t>(host.size())));
    if (upload)
      TESSERA_RETURN_IF_ERROR(backend->upload(p, host.data(), host.size() * sizeof(float)));
    return p;
  };
  TESSERA_ASSIGN_OR_RETURN(float* x_b, put(0, x, true));
  TESSERA_ASSIGN_OR_RETURN(float* ctx_b, put(1, ctx, true));
  TESSERA_ASSIGN_OR_RETURN(float* eps_b, put(2, eps, false));
  TESSERA_ASSIGN_OR_RETURN(float* z_b, put(3, z, true));
  TESSERA_ASSIGN_OR_RETURN(float* rgb_b, put(4, rgb, false));
  const float t[kGuidanceBatch] = {500.0f, 500.0f};
  const double unet_f = unet_flops(ucfg, kGuidanceBatch, latent, latent);
  const double vae_f = vae_flops(vcfg, 1, latent, latent);
  std::printf("analytic work: UNet step with guidance %.1f GFLOP, VAE decode %.1f GFLOP\n\n",
              unet_f / 1e9, vae_f / 1e9);

  std::vector<Result> results;
  Status failure = Status::ok_status();
  const std::vector<Variant> variants = ablation(*backend);
  for (const char* model : {"unet", "vae"}) {
    const bool is_unet = std::strcmp(model, "unet") == 0;
    double all_on = 0;
    for (size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      if (!(is_unet ? v.unet : v.vae)) continue;
      // --quick: the VAE with everything on only (f32 and bf16); --no-ablation: those rows for
      // both models.
      if ((o.no_ablation || (!is_unet && o.quick)) && i > 0 && !v.bf16) continue;
      Timing timing;
      if (is_unet) {
        unet->set_options(v.options);
        timing = time_it(reps, 1, [&] {
          Status st =
              unet->forward(x_b, t, ctx_b, kGuidanceBatch, latent, latent, kContextLen, eps_b);
          if (st.ok()) st = backend->synchronize();
          if (!st.ok() && failure.ok()) failure = st;
        });
      } else {
        vae->set_options(v.options);
        timing = time_it(reps, 1, [&] {
          Status st = vae->decode(z_b, 1, latent, latent, rgb_b);
          if (st.ok()) st = backend->synchronize();
          if (!st.ok() && failure.ok()) failure = st;
        });
      }
      TESSERA_RETURN_IF_ERROR(failure);
      if (i == 0) all_on = timing.median;
      Result r{is_unet ? "UNet step (batch 2, guidance)" : "VAE decode",
               v.name,
               timing,
               is_unet ? unet_f : vae_f,
               timing.median - all_on,
               v.bf16};
      std::printf("%-30s %-38s %9s ms  %7.1f GFLOP/s\n", r.model.c_str(), r.variant.c_str(),
                  ms(timing.median).c_str(), r.flops / timing.median / 1e9);
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  // LCM (guidance 1): one UNet pass per step over batch 1; an image is 4 of them and a decode.
  std::string lcm_line;
  std::unique_ptr<diffusion::TinyDecoder> taesd;  // --lcm: a TAESD-shaped decoder, random weights
  std::vector<uint8_t> tiny_image;
  WeightStore tiny_store;
  if (o.lcm && vcfg.upscale() == 8 && vcfg.z_channels == 4) {
    const diffusion::TinyDecoderConfig tcfg;
    diffusion::TensorShapes tshapes;
    for (auto& [name, shape] : diffusion::tiny_decoder_tensor_shapes(tcfg)) tshapes[name] = shape;
    TESSERA_ASSIGN_OR_RETURN(tiny_image, random_checkpoint(tshapes));
    TESSERA_ASSIGN_OR_RETURN(
        SafeTensors tfile,
        SafeTensors::parse(tiny_image.data(), tiny_image.size(), "random tiny decoder weights"));
    tiny_store = WeightStore(std::move(tfile), WeightFormat::kF32);
    TESSERA_ASSIGN_OR_RETURN(taesd, diffusion::TinyDecoder::load(tiny_store, tcfg, backend.get()));
  }
  if (o.lcm) {
    double lcm_f32 = 0;   // the all-on f32 row's median (the bf16 row's ratio)
    double tiny_f32 = 0;  // the same for the tiny decoder
    for (size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      if (i > 0 && !v.bf16) continue;
      unet->set_options(v.options);
      vae->set_options(v.options);
      const Timing step = time_it(reps, 1, [&] {
        Status st = unet->forward(x_b, t, ctx_b, 1, latent, latent, kContextLen, eps_b);
        if (st.ok()) st = backend->synchronize();
        if (!st.ok() && failure.ok()) failure = st;
      });
      TESSERA_RETURN_IF_ERROR(failure);
      if (i == 0) lcm_f32 = step.median;
      results.push_back(Result{"UNet step (batch 1, LCM)", v.name, step, unet_f / 2,
                               step.median - lcm_f32, v.bf16});
      std::printf("%-30s %-38s %9s ms\n", "UNet step (batch 1, LCM)", v.name.c_str(),
                  ms(step.median).c_str());
      double decode = 0;
      for (const Result& r : results) {
        if (r.model == "VAE decode" && r.variant == v.name) decode = r.time.median;
      }
      char line[320];
      std::snprintf(line, sizeof line,
                    "LCM image, 4 unguided steps + VAE decode (%s): %.2f s = 4 x %s ms + %s ms "
                    "(text encoder and sampler not counted).\n",
                    v.bf16 ? "bf16 compute" : "f32", 4 * step.median + decode,
                    ms(step.median).c_str(), ms(decode).c_str());
      lcm_line += line;
      if (taesd) {
        taesd->set_options(v.options);
        const Timing tdec = time_it(reps, 1, [&] {
          Status st = taesd->decode(z_b, 1, latent, latent, rgb_b);
          if (st.ok()) st = backend->synchronize();
          if (!st.ok() && failure.ok()) failure = st;
        });
        TESSERA_RETURN_IF_ERROR(failure);
        if (i == 0) tiny_f32 = tdec.median;
        results.push_back(
            Result{"tiny decoder (TAESD)", v.name, tdec, 0.0, tdec.median - tiny_f32, v.bf16});
        std::printf("%-30s %-38s %9s ms\n", "tiny decoder (TAESD)", v.name.c_str(),
                    ms(tdec.median).c_str());
        std::snprintf(line, sizeof line,
                      "LCM image, 4 unguided steps + tiny decoder (%s): %.2f s = 4 x %s ms + %s "
                      "ms.\n",
                      v.bf16 ? "bf16 compute" : "f32", 4 * step.median + tdec.median,
                      ms(step.median).c_str(), ms(tdec.median).c_str());
        lcm_line += line;
      }
      std::fflush(stdout);
    }
    lcm_line += "\n";
  }
  // ControlNet: the same step with a ControlNet of this UNet (random weights, a random hint at
  // the image's size, its hint features made once as the pipeline does), at the all-on rows.
  std::string control_line;
  if (o.controlnet) {
    diffusion::ControlNetConfig ccfg;
    ccfg.unet = ucfg;
    ccfg.hint = diffusion::sd15_controlnet_config().hint;
    if (vcfg.upscale() != ccfg.hint.downscale()) {
      // Another VAE scale (the tiny configs): one width doubling per halving, then C0.
      ccfg.hint.channels = {16};
      for (int64_t f = vcfg.upscale(); f > 1; f /= 2) {
        ccfg.hint.channels.push_back(ccfg.hint.channels.back() * 2);
      }
      ccfg.hint.channels.push_back(ucfg.model_channels);
      ccfg.hint.strides = diffusion::hint_strides(ccfg.hint.channels);
    }
    ccfg.hint.channels.back() = ucfg.model_channels;
    TESSERA_ASSIGN_OR_RETURN(std::vector<uint8_t> cn_image,
                             random_checkpoint(diffusion::controlnet_tensor_shapes(ccfg)));
    TESSERA_ASSIGN_OR_RETURN(
        SafeTensors cn_file,
        SafeTensors::parse(cn_image.data(), cn_image.size(), "random ControlNet weights"));
    WeightStore cn_store(std::move(cn_file), WeightFormat::kBF16);
    TESSERA_ASSIGN_OR_RETURN(
        std::unique_ptr<diffusion::ControlNet> cn,
        diffusion::ControlNet::load(cn_store, ccfg, diffusion::kControlPrefix, backend.get()));
    std::vector<float> hint(static_cast<size_t>(o.size * o.size * 3));
    fill_floats(hint.data(), hint.size(), 6);
    for (float& v : hint) v = 0.5f + 0.5f * std::tanh(v);
    TESSERA_ASSIGN_OR_RETURN(float* hint_b, put(5, hint, true));
    const std::vector<float> scales(static_cast<size_t>(cn->residual_count()), 1.0f);
    const std::vector<float> rows(kGuidanceBatch, 1.0f);
    double control_f32 = 0;  // the all-on f32 row's median (the bf16 row's ratio)
    for (size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      if (i > 0 && !v.bf16) continue;
      unet->set_options(v.options);
      cn->set_options(v.options);
      TESSERA_RETURN_IF_ERROR(cn->set_hint(hint_b, o.size, o.size));
      // The step alone and the step with the ControlNet alternate, so the share is measured
      // under one load (the rows above ran minutes earlier).
      const auto [plain_t, timing] = time_interleaved(
          reps,
          [&] {
            Status st =
                unet->forward(x_b, t, ctx_b, kGuidanceBatch, latent, latent, kContextLen, eps_b);
            if (st.ok()) st = backend->synchronize();
            if (!st.ok() && failure.ok()) failure = st;
          },
          [&] {
            auto res = cn->forward(x_b, t, ctx_b, kGuidanceBatch, latent, latent, kContextLen,
                                   scales, rows);
            Status st = res.status();
            if (st.ok()) {
              st = unet->forward(x_b, t, ctx_b, kGuidanceBatch, latent, latent, kContextLen, eps_b,
                                 *res);
            }
            if (st.ok()) st = backend->synchronize();
            if (!st.ok() && failure.ok()) failure = st;
          });
      TESSERA_RETURN_IF_ERROR(failure);
      const double plain = plain_t.median;
      if (i == 0) control_f32 = timing.median;
      // No analytic count of the ControlNet's work: the row shows no rate.
      Result r{"UNet step + ControlNet", v.name, timing, 0.0, timing.median - control_f32, v.bf16};
      std::printf("%-30s %-38s %9s ms  (+%.0f %% over the step alone)\n", r.model.c_str(),
                  r.variant.c_str(), ms(timing.median).c_str(),
                  plain > 0 ? 100.0 * (timing.median / plain - 1.0) : 0.0);
      char line[256];
      std::snprintf(line, sizeof line,
                    "ControlNet (%s, %.1fM parameters, hint features made once): %s ms per "
                    "guided step against %s ms without, +%.0f %%.\n",
                    v.bf16 ? "bf16 compute" : "f32",
                    static_cast<double>(diffusion::controlnet_parameter_count(ccfg)) / 1e6,
                    ms(timing.median).c_str(), ms(plain).c_str(),
                    plain > 0 ? 100.0 * (timing.median / plain - 1.0) : 0.0);
      control_line += line;
      std::fflush(stdout);
      results.push_back(r);
    }
    control_line += "\n";
  }
  unet->set_options(KernelOptions{});
  vae->set_options(KernelOptions{});
  // What a whole generation costs at this size: 20 guided steps and one decode, all on, at the
  // precision `tessera image` would run (ComputePrecision::kAuto resolved for this model on this
  // backend: the bf16 / TF32 row when it resolves to bf16 and the row was measured, else f32).
  const bool auto_bf16 =
      diffusion::resolve_precision(diffusion::ComputePrecision::kAuto, ucfg.model_channels,
                                   *backend) == kernels::Precision::kBf16;
  std::string estimate_variant = variants.front().name;
  if (auto_bf16) {
    for (const Variant& v : variants) {
      if (v.bf16) {
        estimate_variant = v.name;
        break;
      }
    }
  }
  const bool estimate_bf16 = estimate_variant != variants.front().name;
  double unet_on = 0, vae_on = 0;
  for (const Result& r : results) {
    if (r.variant != estimate_variant) continue;
    // Only the plain rows: the LCM, ControlNet and tiny decoder rows share the variant's name.
    if (r.model == "VAE decode") vae_on = r.time.median;
    if (r.model == "UNet step (batch 2, guidance)") unet_on = r.time.median;
  }
  char generation[320] = "";
  if (unet_on > 0 && vae_on > 0) {
    std::snprintf(
        generation, sizeof generation,
        "20 guided steps + VAE decode (all on, %s: the precision `tessera image` runs "
        "here by default): %.3f s (%s ms per step, %s ms decode; text encoder and sampler "
        "not counted).\n\n",
        estimate_bf16 ? "bf16 compute" : "f32", 20 * unet_on + vae_on, ms(unet_on).c_str(),
        ms(vae_on).c_str());
  }

  std::ostringstream section;
  section << heading << "\n" << machine_markdown(machine);
  if (gpu) section << "- backend: " << backend->name() << "\n";
  char head[2048];
  std::snprintf(
      head, sizeof head,
      "%s, %lldx%lld image (latent "
      "%lldx%lld), %d threads. One UNet step = one forward over batch 2 (conditional + "
      "unconditional, %lld context tokens); VAE decode = batch 1. Median of %d runs after a "
      "warm-up. GFLOP/s from an analytic count of convolutions, linear layers and attention "
      "(UNet step %.1f GFLOP, VAE decode %.1f GFLOP). \"vs all on\": the row's time minus the "
      "all-on time (what that fused kernel saves), and that as a share of the row's time; for the "
      "reduced-precision row (KernelOptions::precision: bf16 compute with AVX-512 BF16 on the "
      "CPU, bf16 tensor-core products for the weights and TF32 for attention on a GPU) its "
      "speed-up over the all-on f32 row.%s\n\n",
      shipped
          ? "The embedded tessera-tiny/diffusion model (`--config tessera-tiny`, its f32 weights)"
          : (tiny ? "Tiny fixture config (`--config tiny`) with random weights (BF16 linear "
                    "weights, f32 convolutions)"
                  : "SD 1.5 config with random weights (BF16 linear weights, f32 "
                    "convolutions)"),
      static_cast<long long>(o.size), static_cast<long long>(o.size),
      static_cast<long long>(latent), static_cast<long long>(latent),
      default_thread_pool().num_threads(), static_cast<long long>(kContextLen), reps, unet_f / 1e9,
      vae_f / 1e9,
      o.no_ablation ? " `--no-ablation`: all-on rows only."
                    : (o.quick ? " `--quick`: the VAE decode with everything on only." : ""));
  section << head << table(results) << "\n" << generation << lcm_line << control_line;
  std::printf("\n%s\n%s%s%s", table(results).c_str(), generation, lcm_line.c_str(),
              control_line.c_str());

  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["machine"] = {
        {"cpu", machine.cpu},   {"threads", machine.threads},        {"features", machine.features},
        {"date", machine.date}, {"load_average_1min", machine.load}, {"command", machine.command}};
    j["config"] = o.config;
    j["backend"] = backend->name();
    j["size"] = o.size;
    j["unet_gflop"] = unet_f / 1e9;
    j["vae_gflop"] = vae_f / 1e9;
    nlohmann::json rows = nlohmann::json::array();
    for (const Result& r : results) {
      rows.push_back(
          {{"model", r.model},
           {"kernels", r.variant},
           {"seconds", {{"median", r.time.median}, {"min", r.time.min}, {"max", r.time.max}}},
           {"reps", r.time.reps},
           {"gflops", r.flops / r.time.median / 1e9},
           {"saving_seconds", r.saving_s}});
    }
    j["results"] = rows;
    const std::string text = j.dump(2) + "\n";
    TESSERA_RETURN_IF_ERROR(write_file_atomic(o.json_path, text.data(), text.size())
                                .with_context("bench diffusion: --json"));
  }
  if (o.write_results) {
    Options paths;
    paths.results_path = o.results_path;
    const std::string path = results_path(paths);
    TESSERA_RETURN_IF_ERROR(write_results_section(path, heading, section.str()));
    std::printf("wrote the \"%s\" section of %s\n", gpu ? "Diffusion (GPU)" : "Diffusion (CPU)",
                path.c_str());
  }
  return Status::ok_status();
}

}  // namespace

void register_diffusion_bench(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<DiffusionBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "diffusion",
      "SD 1.5 UNet step (guidance) and VAE decode, random weights, fused-kernel ablation");
  cmd->add_option("--size", o->size,
                  "Image pixels per side: a multiple of 64 for SD 1.5 (the VAE's x8 times the "
                  "UNet's three halvings; default 512, 256 with --quick)");
  cmd->add_flag("--quick", o->quick,
                "Size 256 and the VAE decode with all fusions on only (f32 and bf16 compute)");
  cmd->add_flag("--no-ablation", o->no_ablation,
                "Only the all-on rows (f32, and bf16 compute where available) of both models");
  cmd->add_option("--repeat", o->repeat,
                  "Timed runs per row after a warm-up (default 3, --quick 2)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--write-results", o->write_results,
                "Replace the \"## Diffusion (CPU)\" section of bench/RESULTS.md");
  cmd->add_option("--results", o->results_path, "Results file for --write-results");
  cmd->add_option("--json", o->json_path, "Also write the results as JSON to FILE");
  cmd->add_flag("--lcm", o->lcm,
                "Also time the unguided step (batch 1): LCM's 4-step image with its decode");
  cmd->add_flag("--controlnet", o->controlnet,
                "Also time the step with an SD 1.5-shaped ControlNet (random weights)");
  cmd->add_option("--device", o->device,
                  "cpu (default) or cuda (the CUDA backend on GPU 0; fails when none is usable)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  // The parity fixtures' tiny architecture, for tests.
  cmd->add_option("--config", o->config,
                  "sd15 (default: random weights) or tessera-tiny (the embedded model's weights, "
                  "64x64 by default)");
  cmd->callback([o, exit_code] {
    const Status st = run_bench_diffusion(*o);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera-bench diffusion: %s\n", st.to_string().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tessera::bench
