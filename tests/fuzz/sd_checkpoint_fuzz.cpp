// libFuzzer target for what the diffusion loader reads from a checkpoint before any weight: the
// SD 1.x configurations inferred from tensor shapes (UNet, VAE decoder, VAE encoder, ControlNet),
// the diffusers -> CompVis key renaming of every tensor name (UNet, VAE, ControlNet), and a LoRA
// file's modules. Errors must
// name the file; nothing may crash or read out of bounds, whatever the names and shapes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/safetensors.h"
#include "engine/diffusion/controlnet.h"
#include "engine/diffusion/lora.h"
#include "engine/diffusion/pipeline.h"
#include "engine/diffusion/sd_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto st = tessera::SafeTensors::parse(data, size, "fuzz.safetensors");
  if (!st.ok()) return 0;
  namespace d = tessera::diffusion;
  const auto named = [](const tessera::Status& s) {
    if (!s.ok() && s.message().find("fuzz.safetensors") == std::string::npos &&
        s.code() != tessera::ErrorCode::kInvalidArgument) {
      __builtin_trap();
    }
  };
  named(d::infer_unet_config(*st).status());
  named(d::infer_vae_decoder_config(*st).status());
  auto encoder = d::infer_vae_encoder_config(*st);
  named(encoder.status());
  if (encoder.ok()) {
    // The shapes the loader would then ask for exist for every level the config names.
    (void)d::vae_encoder_tensor_shapes(*encoder);
    if (encoder->levels() < 1 || encoder->z_channels < 1) __builtin_trap();
  }
  // The same bytes as a ControlNet, with and without the v1.1 prefix, for SD 1.5 and for the
  // encoder the file itself describes (so the hint and fit checks are reached).
  for (const char* prefix : {d::kControlPrefix, ""}) {
    auto cn = d::infer_controlnet_config(*st, d::sd15_unet_config(), 8, prefix);
    named(cn.status());
    auto own = d::infer_unet_encoder_config(*st, 8, prefix);
    if (!own.ok()) continue;
    for (int64_t downscale : {1, 2, 4, 8}) {
      cn = d::infer_controlnet_config(*st, *own, downscale, prefix);
      named(cn.status());
      if (cn.ok()) {
        if (cn->hint.channels.empty() || cn->hint.downscale() != downscale) __builtin_trap();
        (void)d::controlnet_tensor_shapes(*cn);
      }
    }
  }
  const auto no_attention = [](int64_t) { return false; };
  for (const auto& info : st->tensors()) {
    (void)d::diffusers_unet_key_to_compvis(info.name, 2, no_attention);
    (void)d::diffusers_vae_key_to_compvis(info.name, 4);
    (void)d::diffusers_controlnet_key_to_compvis(info.name, 2, 6);
  }
  // The same bytes as a LoRA file: its modules grouped, alphas read, paths given their dots.
  auto lora = d::read_lora_modules(*st);
  named(lora.status());
  if (lora.ok()) {
    if (lora->modules.empty()) __builtin_trap();
    for (const d::LoraModule& m : lora->modules) {
      if (m.down_name.empty() || m.up_name.empty() || !(m.alpha >= 0)) __builtin_trap();
      (void)d::kohya_path_to_dotted(m.key);
    }
  }
  return 0;
}
