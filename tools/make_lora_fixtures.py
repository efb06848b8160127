#!/usr/bin/python3
"""Writes tests/fixtures/diffusion/lora/: two LoRA files for the tiny pipeline model (../sd_tiny.safetensors
+ ../../parity/text_encoder) and what PyTorch gets with them merged (tools/tessera_ref/sd_lora.py).

- kohya.safetensors (kohya / A1111 keys, lora_down / lora_up / alpha): UNet modules named by diffusers
  paths (an attention to_q, a resnet's 3x3 conv1, a 1x1 proj_in, the middle block's attn2.to_k) and by an
  original LDM path (the middle block's ff.net.2), and two text encoder modules (lora_te_: q_proj, fc1).
- peft.safetensors (diffusers / PEFT keys, lora_A / lora_B, no alpha): unet.down_blocks...attn2.to_out.0,
  unet.up_blocks.1.attentions.0...attn1.to_v, text_encoder...layers.1.self_attn.v_proj.
The run: the text-to-image fixture's (make_pipeline_fixtures.py: prompt, guidance, 3 Euler steps, seed,
32x32) with kohya at multiplier KOHYA_M and peft at PEFT_M merged. expected.safetensors: `merged.<name>`
for three changed weights, `latents.2` and `image`; its metadata lists the multipliers.

Usage: /usr/bin/python3 tools/make_lora_fixtures.py [--out DIR]      (a few seconds)
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_diffusion_fixtures import TINY_UNET, TINY_VAE  # noqa: E402
from make_pipeline_fixtures import (CONTEXT_LEN, GUIDANCE, PROMPT, SEED, SIZE, STEPS, hf_tokenizer,  # noqa: E402
                                    load_hf_clip, load_module, nd)
from tessera_ref import st_io  # noqa: E402
from tessera_ref.sd_lora import lora_delta  # noqa: E402
from tessera_ref.sd_pipeline import Pipeline, noise_rng, pad_ids  # noqa: E402
from tessera_ref.sd_unet import UNET_PREFIX, UNet  # noqa: E402
from tessera_ref.sd_vae import VAE_PREFIX, VaeDecoder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KOHYA_M, PEFT_M = 1.0, 0.5
U = UNET_PREFIX
TE = "text_model."
# (key stem, target weight, rank, alpha): kohya file.
KOHYA = [
    ("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q",
     U + "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight", 4, 2.0),
    ("lora_unet_down_blocks_0_resnets_0_conv1", U + "input_blocks.1.0.in_layers.2.weight", 4, 4.0),
    ("lora_unet_down_blocks_0_attentions_0_proj_in", U + "input_blocks.1.1.proj_in.weight", 2, None),
    ("lora_unet_middle_block_1_transformer_blocks_0_ff_net_2",
     U + "middle_block.1.transformer_blocks.0.ff.net.2.weight", 4, 8.0),
    ("lora_unet_mid_block_attentions_0_transformer_blocks_0_attn2_to_k",
     U + "middle_block.1.transformer_blocks.0.attn2.to_k.weight", 4, 4.0),
    ("lora_te_text_model_encoder_layers_0_self_attn_q_proj", TE + "encoder.layers.0.self_attn.q_proj.weight", 4, 4.0),
    ("lora_te_text_model_encoder_layers_0_mlp_fc1", TE + "encoder.layers.0.mlp.fc1.weight", 2, 1.0),
]
# (key stem, target, rank): PEFT file (lora_A = down, lora_B = up, no alpha: scale 1).
PEFT = [
    ("unet.down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_out.0",
     U + "input_blocks.1.1.transformer_blocks.0.attn2.to_out.0.weight", 4),
    ("unet.up_blocks.1.attentions.0.transformer_blocks.0.attn1.to_v",
     U + "output_blocks.2.1.transformer_blocks.0.attn1.to_v.weight", 3),
    ("text_encoder.text_model.encoder.layers.1.self_attn.v_proj", TE + "encoder.layers.1.self_attn.v_proj.weight", 4),
]
CHECKED = [U + "input_blocks.1.0.in_layers.2.weight", U + "input_blocks.1.1.proj_in.weight",
           TE + "encoder.layers.0.self_attn.q_proj.weight"]


def factors(g, shape, rank, conv3):
    """(down, up) for a weight of `shape`, F16-rounded as stored."""
    out, inn = shape[0], shape[1]
    if len(shape) == 4:
        k = shape[2]
        down = torch.randn(rank, inn, k, k, generator=g) / (inn * k * k) ** 0.5
        up = torch.randn(out, rank, 1, 1, generator=g) * 0.5
    else:
        down = torch.randn(rank, inn, generator=g) / inn ** 0.5
        up = torch.randn(out, rank, generator=g) * 0.5
    return down.half().float(), up.half().float()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "diffusion", "lora"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    fixtures = os.path.join(ROOT, "tests", "fixtures")
    sd, _ = st_io.load(os.path.join(fixtures, "diffusion", "sd_tiny.safetensors"))
    te_dir = os.path.join(fixtures, "parity", "text_encoder")
    te, _ = st_io.load(os.path.join(te_dir, "model.safetensors"))
    weights = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in {**sd, **te}.items()}

    g = torch.Generator().manual_seed(2024)
    kohya, peft = {}, {}
    for stem, target, rank, alpha in KOHYA:
        down, up = factors(g, weights[target].shape, rank, False)
        kohya[stem + ".lora_down.weight"] = down.numpy()
        kohya[stem + ".lora_up.weight"] = up.numpy()
        if alpha is not None:
            kohya[stem + ".alpha"] = np.asarray(alpha, np.float32)
        weights[target] = weights[target] + lora_delta(down, up, alpha, KOHYA_M)
    for stem, target, rank in PEFT:
        down, up = factors(g, weights[target].shape, rank, False)
        peft[stem + ".lora_A.weight"] = down.numpy()
        peft[stem + ".lora_B.weight"] = up.numpy()
        weights[target] = weights[target] + lora_delta(down, up, None, PEFT_M)
    st_io.save(os.path.join(args.out, "kohya.safetensors"), kohya,
               dtypes={k: "F16" for k in kohya if not k.endswith(".alpha")})
    st_io.save(os.path.join(args.out, "peft.safetensors"), peft, dtypes={k: "F16" for k in peft})

    state = {k: v.numpy() for k, v in weights.items()}
    unet = load_module(UNet(TINY_UNET), state, UNET_PREFIX)
    vae = load_module(VaeDecoder(TINY_VAE), state, VAE_PREFIX)
    clip, _ = load_hf_clip(te_dir)
    clip.load_state_dict({k: weights[k] for k in clip.state_dict()})
    tok = hf_tokenizer(os.path.join(fixtures, "diffusion", "pipeline", "vocab.json"),
                       os.path.join(fixtures, "diffusion", "pipeline", "merges.txt"))
    eos = tok.encoder["<|endoftext|>"]
    rows = [pad_ids(tok.encode_with_specials(p), CONTEXT_LEN, eos) for p in ("", PROMPT)]
    pipe = Pipeline(unet, vae, clip)
    context = pipe.encode(rows)
    lat = SIZE // 2
    noise = noise_rng(SEED, 0, 4 * lat * lat).reshape(1, lat, lat, 4).transpose(0, 3, 1, 2).copy()
    _, _, latents, image = pipe.sample_euler(context, noise, STEPS, GUIDANCE)
    out = {"latents.2": nd(latents[-1]), "image": nd(image), "text.context": nd(context)}
    for name in CHECKED:
        out["merged." + name] = nd(weights[name])
    st_io.save(os.path.join(args.out, "expected.safetensors"), out,
               metadata={"generator": "tools/make_lora_fixtures.py", "kohya_multiplier": str(KOHYA_M),
                         "peft_multiplier": str(PEFT_M)})
    print(f"kohya {len(kohya)} tensors, peft {len(peft)}; latents |max| {np.abs(latents[-1]).max():.3f}")


if __name__ == "__main__":
    main()
