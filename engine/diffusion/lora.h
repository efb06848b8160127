// LoRA files for SD 1.x, merged into the weights at load (docs/diffusion.md, "LoRA").
//
// Formats read (safetensors), per module a down and an up matrix and an optional alpha:
//   kohya / A1111   lora_unet_<path>.lora_down.weight / .lora_up.weight / .alpha, and
//   lora_te_<path>
//                   for the CLIP text encoder; <path> is a diffusers or an original (LDM) module
//                   path with its dots written as underscores (down_blocks_0_attentions_0_...,
//                   input_blocks_4_1_...);
//   diffusers/PEFT  unet.<path>.lora_A.weight / .lora_B.weight (also .lora_A.default.weight),
//                   text_encoder.<path>...; a file without the unet. prefix is the UNet's; older
//                   files: <path>.lora.down.weight / .lora.up.weight, .lora_linear_layer.down /
//                   .up, and attention processors <...>.processor.to_q_lora.down.weight.
// Shapes: linear down [r, in], up [out, r]; convolutions down [r, in, k, k], up [out, r, 1, 1].
// The change is multiplier * alpha / r * (up x down), reshaped to the weight (r = down's rows;
// alpha absent: alpha = r). A diffusers/PEFT file's alpha may be in its safetensors metadata
// `lora_adapter_metadata` (PEFT's LoraConfig as JSON: "unet.lora_alpha" / "text_encoder.lora_alpha"
// or "lora_alpha", with "...alpha_pattern" per module suffix); an .alpha tensor wins. Several
// files add up.
//
// Why merged, not applied per step: the change costs one GEMM per module at load (SD 1.5 with the
// 67 M-parameter LCM-LoRA: see bench/RESULTS.md) and nothing per step, while applying it on the
// fly adds two thin products per layer to every UNet pass; 8-bit or bf16 weights then come from
// the merged f32 values, so they stay correct. A different set of LoRAs means a reload.
//
// Errors name the file and the key: kUnsupported for SDXL / SD 2.x files (lora_te1_/lora_te2_,
// text_encoder_2, 1024-wide cross-attention), LoHa / LoKr / Tucker modules; kInvalidArgument for
// a module whose target does not exist in the model or whose shapes do not fit it, and for a file
// whose keys match nothing; kCorruptData for a down without an up (or the reverse) or a bad alpha.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "engine/diffusion/sd_config.h"
#include "engine/weights/weight_store.h"

namespace tessera::diffusion {

struct LoraSpec {
  std::string path;
  float multiplier = 1.0f;
};

// "FILE" or "FILE:M" (M a number; a Windows drive letter is not a multiplier).
Expected<LoraSpec> parse_lora_spec(const std::string& text);

// One module of a LoRA file.
struct LoraModule {
  std::string key;    // the file's key stem, for messages
  bool text = false;  // the CLIP text encoder (else the UNet)
  std::string path;   // dotted module path as written (diffusers, LDM or HF CLIP)
  std::string down_name, up_name;
  float alpha = 0.0f;  // 0: none given (scale 1)
};

struct LoraFileModules {
  std::string path;
  std::vector<LoraModule> modules;
};

// Reads a LoRA file's key names (and alphas; not its weights). Errors as above.
Expected<LoraFileModules> read_lora_modules(const std::string& path);
// The same on an opened file (its path() names it in messages).
Expected<LoraFileModules> read_lora_modules(const SafeTensors& file);

// The underscored module path of a kohya key with its dots put back: every "_" becomes "." except
// inside the multi-word names SD's modules use (down_blocks, transformer_blocks, to_q, in_layers,
// self_attn, q_proj, ...): "down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q" ->
// "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q".
std::string kohya_path_to_dotted(const std::string& underscored);

// What merging did, for the load line and the PNG's settings.
struct LoraMerged {
  std::string path;
  float multiplier = 1.0f;
  int unet_modules = 0, text_modules = 0;
};

// Adds the modules of `spec` to the weights they change: the UNet's to `unet` (CompVis names
// under kUNetPrefix; diffusers paths are renamed with `unet_config`'s block layout), the text
// encoder's to `text` (its names with or without `text_prefix`, e.g.
// "cond_stage_model.transformer."). A null store skips its modules (the pipeline merges the UNet's
// and the text encoder's as each is loaded). Must run before the models read the stores
// (WeightStore::add_low_rank). Fills the counts of `merged` for the parts it merged.
Status merge_lora(const LoraSpec& spec, const LoraFileModules& file, const UNetConfig& unet_config,
                  WeightStore* unet, WeightStore* text, const std::string& text_prefix,
                  LoraMerged* merged);

}  // namespace tessera::diffusion
