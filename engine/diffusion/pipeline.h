// The Stable Diffusion 1.x pipeline on a kernels::Backend: CLIP text encoder -> (image-to-image:
// the VAE encoder's latents of the init image, noised to the first step that runs) -> UNet
// denoising loop with classifier-free guidance (engine/diffusion/scheduler.h samplers; inpainting:
// a masked blend per step or an inpainting UNet's extra input) -> VAE decoder -> RGB8. The PyTorch
// oracle is tools/tessera_ref/sd_pipeline.py (fixture: tests/fixtures/diffusion/pipeline/,
// tools/make_pipeline_fixtures.py).
//
// Model layouts DiffusionModel::load accepts (safetensors only; every size inferred from shapes):
//   (a) CompVis single file FILE.safetensors: UNet `model.diffusion_model.*`, VAE
//       `first_stage_model.*` (post_quant_conv + decoder; encoder + quant_conv when present, for
//       image-to-image and inpainting), CLIP text encoder
//       `cond_stage_model.transformer.text_model.*`. When the file has no text encoder, the
//       Hugging Face-layout one next to it is used: DIR/text_encoder/, else DIR/../text_encoder/
//       (DIR = the file's directory; e.g. a diffusion model beside the tessera-tiny shape model
//       whose text encoder it shares). A directory holding exactly one .safetensors file and no
//       unet/ folder is this layout too, and so is one whose model.json names its checkpoint
//       ("files": {"weights": F}; other files beside it, e.g. a ControlNet, are not the model).
//   (b) diffusers folder DIR: DIR/unet/diffusion_pytorch_model.safetensors,
//       DIR/vae/diffusion_pytorch_model.safetensors, DIR/text_encoder/model.safetensors (+
//       config.json). UNet and VAE keys are renamed to the CompVis ones on load (the VAE's linear
//       attention weights [C, C] become the 1x1 convolutions [C, C, 1, 1]); error messages then
//       name the CompVis key and "<file> (diffusers keys renamed)". Cost: the renamed tensors are
//       copied into memory once (CompVis files are mapped zero-copy).
// Tokenizer (ClipTokenizer): the first of DIR/tokenizer/, DIR/ (vocab.json + merges.txt),
// DIR/text_encoder/, DIR/.., DIR/bpe_simple_vocab_16e6.txt.gz, then options.clip_vocab_fallback
// when the text encoder has CLIP's 49408-token vocabulary.
// Head counts are not visible in shapes: UNet heads from options.unet_heads, else the diffusers
// DIR/unet/config.json (`num_attention_heads`, else `attention_head_dim`, which diffusers' SD 1.x
// configs use as the head count), else 8 (SD 1.x); CLIP heads from options.text_heads, else the
// text encoder's config.json, else width / 64.
//
// Errors name the file/tensor: kNotFound for a missing file or tensor (a missing VAE says "VAE"),
// kUnsupported for other SD versions (SD 2.x: OpenCLIP text encoder or linear proj_in; SDXL),
// kInvalidArgument when the text encoder's width differs from the UNet's cross-attention context
// dim (both files named).
//
// Thread safety: load from one thread; generate() one call at a time per model (buffers are
// reused). The callbacks run on the calling thread.
//
// Where each stage lives (pipeline_internal.h holds what they share, DiffusionModel::Impl):
//   pipeline.cpp            the model's accessors and precision; generate(): the request checked,
//                           then text -> UNet loop -> VAE
//   pipeline_load.cpp       load(): backend, files (model_dir.h), UNet + VAE weights and their fit
//   pipeline_diffusers.cpp  the diffusers layout renamed to CompVis names (layout (b) above)
//   pipeline_text.cpp       text stage: text encoder and tokenizer found and loaded, encode_prompts
//   pipeline_denoise.cpp    UNet stage: the denoising loop, guidance, sampler steps, step callbacks
//   pipeline_vae.cpp        VAE stage: the latent decode, RGB8 conversions and previews
//   pipeline_controlnet.cpp load_control_net(): the ControlNet's file found, renamed, loaded
// The toolbox's additions each have a place: image-to-image (the VAE encoder in pipeline_vae.cpp,
// the loop starting at a later step in pipeline_denoise.cpp), inpainting (the masked latent blend
// per step, pipeline_denoise.cpp), ControlNet (its residuals into the UNet's passes,
// pipeline_denoise.cpp; its weights loaded in pipeline_controlnet.cpp), LoRA (weights merged at
// load, pipeline_load.cpp for the UNet, pipeline_text.cpp for the text encoder). A stage that
// outgrows its file gets a file of its own beside it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/weights/weight_store.h"
#include "engine/diffusion/controlnet.h"
#include "engine/diffusion/layers.h"
#include "engine/diffusion/lora.h"
#include "engine/diffusion/scheduler.h"
#include "engine/diffusion/sd_config.h"
#include "engine/diffusion/tiny_decoder.h"

namespace tessera::diffusion {

enum class ModelLayout { kCompVis, kDiffusers };
const char* model_layout_name(ModelLayout layout);  // "compvis", "diffusers"

// The UNet's and VAE's compute precision (KernelOptions::precision).
enum class ComputePrecision {
  // bf16 for SD-size UNets (model channels >= 320: the 1x1 / im2col convolutions, linear layers
  // and attention in bf16; measured 1.3x on a 512x512 guided step on 2 cores, the f32 Winograd
  // convolutions being the rest, bench/RESULTS.md) when kernels::cpu::bf16_compute_available();
  // f32 for the tiny models (milliseconds either way; their parity fixtures are f32-exact) and
  // other CPUs.
  kAuto,
  kF32,
  kBf16,  // bf16 where bf16_compute_available(), else f32 (compute_precision() says which); on
          // CUDA: TF32 tensor-core products in the im2col convolutions (as PyTorch by default)
};
const char* compute_precision_name(ComputePrecision p);  // "auto", "f32", "bf16"
// kAuto resolved for a model with `model_channels` on this CPU; kBf16 only when available.
kernels::Precision resolve_precision(ComputePrecision p, int64_t model_channels);
// The same on `backend`. Where kBf16 means TF32 products (a GPU), only an explicit kBf16 gives it:
// auto is f32 there (TF32 measured slower than f32 on an H200).
kernels::Precision resolve_precision(ComputePrecision p, int64_t model_channels,
                                     const kernels::Backend& backend);

struct DiffusionLoadOptions {
  WeightFormat weights = WeightFormat::kF32;  // linear layers' format (see WeightStore)
  ComputePrecision precision = ComputePrecision::kAuto;
  int64_t unet_heads = 0;  // 0: from the model (see above)
  int64_t text_heads = 0;  // 0: from the model (see above)
  // Overrides (empty: search as above). text_encoder: a HF text encoder directory or .safetensors
  // file; vocab: what ClipTokenizer::load accepts.
  std::string text_encoder;
  std::string vocab;
  // Tokenizer for real CLIP (49408 tokens) when the model has none (the CLI passes
  // assets/vocab/clip/bpe_simple_vocab_16e6.txt.gz).
  std::string clip_vocab_fallback;
  // Where the text encoder, UNet and VAE run (kernels::make_backend): the CPU (default), CUDA
  // device `cuda_device` (an error saying why when none is usable), or auto (CUDA when usable).
  // On CUDA the weights are copied to the device once at load time; the scheduler, guidance mix
  // and previews stay on the host (one latent upload and one eps download per step).
  kernels::DeviceChoice device = kernels::DeviceChoice::kCpu;
  int cuda_device = 0;
  // LoRA files merged into the UNet's and the text encoder's weights at load (engine/diffusion/
  // lora.h: formats, errors; each file's change times its multiplier; several add up).
  std::vector<LoraSpec> loras;
};

// The UNet head count a Tessera diffusion model card states (`model_dir`/model.json, "unet":
// {"num_heads": N}; tools/train/diffusion/export.py writes it): the count is not visible in the
// tensor shapes. 0 when there is no card or no such field; kCorruptData naming the file when the
// card is not a JSON object or the field is not a positive integer.
Expected<int64_t> model_card_unet_heads(const std::string& model_dir);
// The depth ControlNet a model card names ("controlnet_depth": {"file": F}, F relative to
// `model_dir`); "" when there is no card or no such section. kCorruptData naming the card when the
// section is malformed or its file is missing.
Expected<std::string> model_card_control_net(const std::string& model_dir);

// Where the parts of a model are (as given; "" when not applicable).
struct DiffusionModelFiles {
  ModelLayout layout = ModelLayout::kCompVis;
  std::string unet;          // the CompVis file, or unet/diffusion_pytorch_model.safetensors
  std::string vae;           // the CompVis file, or vae/diffusion_pytorch_model.safetensors
  std::string text_encoder;  // the CompVis file (embedded) or a HF model.safetensors
  std::string vocab;         // what ClipTokenizer::load was given
};

// The usual 4 x 3 linear map from SD 1.x latents to RGB in about [-1, 1] (rows: latent channels),
// for previews: rgb_c = sum_k latent_k * kLatentRgb[k][c].
inline constexpr float kLatentRgb[4][3] = {{0.3512f, 0.2297f, 0.3227f},
                                           {0.3250f, 0.4974f, 0.2350f},
                                           {-0.2829f, 0.1762f, 0.2721f},
                                           {-0.2120f, -0.2616f, -0.7177f}};
// latents NHWC [h, w, 4] (one image) -> rgb [h, w, 3] RGB8 via kLatentRgb, (v + 1) / 2 clamped.
void latents_to_rgb_preview(const float* latents, int64_t height, int64_t width, uint8_t* rgb);
// image NHWC [h, w, 3] in [-1, 1] -> RGB8: round(clamp((v + 1) / 2, 0, 1) * 255).
void image_to_rgb8(const float* image, int64_t pixels, uint8_t* rgb);

// An 8-bit image handed to generate() (init image, mask): `channels` (1 or 3) bytes per pixel,
// row-major, top row first. The caller keeps the pixels alive during generate().
struct ImageView {
  const uint8_t* pixels = nullptr;
  int64_t width = 0, height = 0;
  int channels = 3;
};

struct GenerateRequest {
  std::string prompt;
  std::string negative_prompt;  // "" = unconditional
  int64_t width = 512;          // pixels; a multiple of DiffusionModel::size_multiple()
  int64_t height = 512;
  int steps = 20;               // >= 1
  float guidance_scale = 7.5f;  // finite; 1: one UNet pass per step (no negative branch)
  SamplerKind sampler = SamplerKind::kEuler;
  // Default: Karras for DPM++ 2M, normal for the others.
  std::optional<SigmaSchedule> schedule;
  uint64_t seed = 0;
  // Optional N(0, 1) initial noise, NHWC [height / f, width / f, 4] (f = the VAE's upscale), in
  // place of the seed's stream 0 (parity with other RNGs). Must hold exactly that many floats.
  const std::vector<float>* initial_noise = nullptr;

  // Image-to-image (needs the VAE encoder, has_encoder()): the init image, RGB of exactly width x
  // height, is encoded (the posterior's mean, scaled by the latent scale) and noised to the first
  // step that runs: of the `steps`-step schedule the last floor(steps * strength) run
  // (Sampler::set_strength), from init + sigma * noise. strength in (0, 1]; 1 repaints fully
  // (the image still steers the low frequencies).
  const ImageView* init_image = nullptr;
  float strength = 0.75f;
  // Inpainting (needs init_image): width x height, 1 or 3 channels (3: their mean); >= 128 =
  // repaint (white), below = keep. A latent cell is repainted when any pixel of its f x f block
  // is (stable-diffusion.cpp's rule: a repainted area never shrinks). With a standard UNet the
  // kept cells are set to init + sigma_next * noise after every step (the same noise as the
  // start; the clean init after the last step); an inpainting UNet (2z + 1 input channels) gets
  // [latents | mask | masked image latents] instead, the masked image being the init with the
  // repainted pixels set to 0 (mid grey). Without a mask an inpainting UNet sees a mask of ones
  // and a grey masked image (text-to-image and plain image-to-image still work).
  const ImageView* mask = nullptr;
  // ControlNet (needs load_control_net): the control image, RGB of exactly width x height, fed
  // as v / 255 (a depth map: near = white, far and background = black; docs/diffusion.md). Its
  // residuals join every UNet pass (both rows with guidance) times control_scale (finite, >= 0; 0
  // skips the ControlNet). Guess
  // mode (the original ControlNet's): residual i of n times control_scale * 0.825^(n - 1 - i), and
  // the unconditional row gets none (for empty or weak prompts).
  const ImageView* control_image = nullptr;
  float control_scale = 1.0f;
  bool control_guess_mode = false;
  // Decode with the tiny decoder (needs load_tiny_decoder) instead of the VAE: about 20x less
  // work for a softer image (fast choices and previews).
  bool tiny_decode = false;
};

// Sent after every denoising step. Pointers are valid during the callback only.
struct StepProgress {
  int step = 0;      // 0-based, counted from the first step that runs (image-to-image skips some)
  int steps = 0;     // the steps that run
  double sigma = 0;  // the step's starting sigma
  double ms = 0;     // wall time of this step (UNet passes + sampler update)
  const float* latents = nullptr;  // NHWC [latent_height, latent_width, channels] after the step
  int64_t latent_height = 0, latent_width = 0, latent_channels = 0;
  // Cheap preview of the model's current prediction of the clean latents (x - sigma * eps)
  // through kLatentRgb: RGB8 [latent_height, latent_width, 3]; null when the latents do not have
  // 4 channels.
  const uint8_t* preview_rgb = nullptr;
};

struct GenerateCallbacks {
  std::function<void(const StepProgress&)> on_step;  // may be empty
  // Checked before the text encoder, before every step and before the VAE decode; set ->
  // generate() returns kCancelled. May be null.
  const std::atomic<bool>* cancel = nullptr;
};

struct GeneratedImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;    // RGB8, row-major, top row first, width * height * 3
  std::vector<float> decoded;  // the VAE output NHWC [height, width, 3], about [-1, 1], unclamped
  std::vector<float> latents;  // the final latents NHWC
  int steps_run = 0;           // image-to-image runs fewer than the request's steps
  double text_ms = 0, encode_ms = 0, denoise_ms = 0, vae_ms = 0;
};

class DiffusionModel {
 public:
  ~DiffusionModel();
  DiffusionModel(const DiffusionModel&) = delete;
  DiffusionModel& operator=(const DiffusionModel&) = delete;

  // `path`: a CompVis .safetensors file, a diffusers folder, or a folder with one CompVis file
  // (see the top of this file).
  static Expected<std::unique_ptr<DiffusionModel>> load(const std::string& path,
                                                        const DiffusionLoadOptions& options = {});

  const DiffusionModelFiles& files() const { return files_; }
  const UNetConfig& unet_config() const;
  const VaeDecoderConfig& vae_config() const;
  // Whether the model has a VAE encoder (image-to-image and inpainting need it), its config.
  bool has_encoder() const;
  const VaeEncoderConfig* encoder_config() const;  // null without one
  // An inpainting UNet (2z + 1 input channels: latents, mask, masked image latents).
  bool is_inpainting() const;
  int64_t text_width() const;
  int64_t context_length() const;  // the text encoder's positions (77)
  // Image width and height must be multiples of this: the VAE's upscale x the UNet's
  // downsampling (SD 1.5: 8 x 8 = 64).
  int64_t size_multiple() const;
  // The default image side: 512 for SD-sized UNets (model channels >= 320), else 64 rounded up
  // to size_multiple() (the tiny models are trained at 64 x 64).
  int64_t default_image_size() const;
  // UNet and VAE kernel switches (fusions, convolution algorithm, precision as given). load()
  // sets KernelOptions{} with the precision DiffusionLoadOptions::precision resolved to.
  void set_kernel_options(const KernelOptions& options);
  // The precision the UNet and VAE run in now (kBf16: reduced-precision products, bf16 on the CPU
  // or TF32 on a GPU), and its name: "f32", "bf16" or "tf32".
  kernels::Precision compute_precision() const;
  const char* compute_precision_label() const;
  // The LoRAs merged at load (DiffusionLoadOptions::loras), with the modules each changed.
  const std::vector<LoraMerged>& loras() const;
  // The backend everything runs on ("cpu (avx512, 2 threads)", "cuda (NVIDIA H200, ...)").
  const kernels::Backend& backend() const;
  // DeviceChoice::kAuto that ended on the CPU: why (empty otherwise).
  const std::string& device_note() const;

  // ControlNet (engine/diffusion/controlnet.h) for GenerateRequest::control_image, loaded onto
  // this model's backend, replacing any loaded one. `path`: a .safetensors file in the v1.1 layout
  // (`control_model.*`, or the same names without the prefix; a v1.0 file with SD built in: only
  // its `control_model.*` is read) or with diffusers' names, or a diffusers folder
  // (diffusion_pytorch_model.safetensors, directly or under controlnet/). Errors name the file and
  // tensor: kNotFound (no such file, no ControlNet in it), kUnsupported (.pth / .ckpt: convert
  // them to .safetensors; an SDXL or SD 2.x ControlNet), kInvalidArgument (made for another model:
  // levels, channels or hint scale differ). On error the previously loaded ControlNet stays.
  Status load_control_net(const std::string& path);
  void unload_control_net();
  bool has_control_net() const;
  const std::string& control_net_path() const;         // "" when none is loaded
  const ControlNetConfig* control_net_config() const;  // null when none is loaded

  // The tiny latent decoder (TAESD, engine/diffusion/tiny_decoder.h) for
  // GenerateRequest::tiny_decode, replacing any loaded one. `path`: a .safetensors file in the
  // release layout (taesd_decoder.safetensors) or diffusers' AutoencoderTiny, or a folder holding
  // taesd_decoder.safetensors or diffusion_pytorch_model.safetensors. Errors name the file:
  // kNotFound (no such file, a missing tensor), kUnsupported (.pth / .ckpt), kInvalidArgument (no
  // tiny decoder in it, a misshapen tensor, latents of another channel count or scale than this
  // model's, e.g. SD3's 16-channel TAESD; SDXL's has SD 1.5's shapes and cannot be told apart,
  // so the file is trusted to be this model family's). On error the loaded one stays.
  Status load_tiny_decoder(const std::string& path);
  void unload_tiny_decoder();
  bool has_tiny_decoder() const;
  const std::string& tiny_decoder_path() const;  // "" when none is loaded

  // The UNet context of `prompt` and `negative_prompt`: [2, context_length, text_width] rows
  // [negative, prompt] (EOS-padded ids, causal-only CLIP as SD runs it). Errors: tokenizer /
  // encoder ones.
  Status encode_prompts(const std::string& prompt, const std::string& negative_prompt,
                        std::vector<float>* context);

  // Runs the whole pipeline. Errors: kInvalidArgument naming the field (width / height not a
  // positive multiple of size_multiple(), steps < 1 or > 1000, a non-finite guidance scale, a
  // wrong initial_noise size, a strength outside (0, 1] or running no step, an init image or
  // mask whose size differs from the request's or with another channel count, a mask without an
  // init image, a mask with nothing to repaint); kNotFound for image-to-image on a model without
  // a VAE encoder; kCancelled; kCorruptData when the latents or the UNet output become NaN /
  // infinite ("step 2 of 20 (sigma ...): ..."), or the decoded image does.
  Expected<GeneratedImage> generate(const GenerateRequest& request,
                                    const GenerateCallbacks& callbacks = {});

 private:
  struct Impl;
  explicit DiffusionModel(std::unique_ptr<Impl> impl);
  // The init image's and mask's sizes, channels and strength against the request.
  Status check_image_inputs(const GenerateRequest& request) const;
  std::unique_ptr<Impl> impl_;
  DiffusionModelFiles files_;
};

// Diffusers -> CompVis key names (exposed for tests and tools). `layers_per_block`: ResBlocks per
// down level (up levels have one more); `up_block_has_attention(i)`: whether up_blocks.i has
// attentions (decides the upsampler's index). Returns "" for a name outside the model.
std::string diffusers_unet_key_to_compvis(
    const std::string& name, int64_t layers_per_block,
    const std::function<bool(int64_t)>& up_block_has_attention);
// A diffusers ControlNetModel key under its v1.1 name (no `control_model.` prefix): the encoder
// half as diffusers_unet_key_to_compvis, controlnet_cond_embedding.{conv_in, blocks.i, conv_out}
// -> input_hint_block.{0, 2i + 2, 2 hint_blocks + 2}, controlnet_down_blocks.k -> zero_convs.k.0,
// controlnet_mid_block -> middle_block_out.0. `hint_blocks`: the count of
// controlnet_cond_embedding.blocks. Returns "" for names outside the ControlNet.
std::string diffusers_controlnet_key_to_compvis(const std::string& name, int64_t layers_per_block,
                                                int64_t hint_blocks);
// `up_levels`: the number of decoder.up_blocks (they are numbered in reverse in CompVis; the
// encoder's down_blocks are not). Returns "" for names neither part uses.
std::string diffusers_vae_key_to_compvis(const std::string& name, int64_t up_levels);

}  // namespace tessera::diffusion
