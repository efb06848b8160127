#!/usr/bin/python3
"""Writes tests/fixtures/diffusion/controlnet/: a ControlNet for the tiny pipeline model (../sd_tiny.safetensors,
../../parity/text_encoder) with random weights, in both published layouts, and what PyTorch gets with it
(tools/tessera_ref/sd_controlnet.py, sd_pipeline.py).

- control.safetensors: the v1.1 layout (`control_model.` + the UNet's encoder names, input_hint_block,
  zero_convs, middle_block_out), F16. Hint encoder 8, 16 -> 32 (one stride-2 convolution: the tiny VAE's x2).
- diffusers/diffusion_pytorch_model.safetensors (+ config.json): the same weights under diffusers'
  ControlNetModel names, F16 (the weights are F16-exact, so both layouts hold the same numbers; the
  fixture is 2 MB: the tiny UNet's encoder half, twice).
- expected.safetensors:
  - `forward.x` [2,4,16,16], `forward.t` [2], `forward.context` [2,77,32], `forward.hint` [1,3,32,32]:
    one ControlNet pass; `forward.residual.K` its residuals (scale 1); `forward.eps` the UNet with them at
    scale SCALE; `forward.eps_guess` with guess-mode scales (strength SCALE) and no control on row 0.
  - `t2i.*`: the pipeline fixture's text-to-image run (prompt, CFG, 3 Euler steps, seed, 32x32) with the
    ControlNet at SCALE: `t2i.latents.2`, `t2i.image`; `hint` (uint8 as F32 [32,32,3]) is its control image;
    `t2i_guess.latents.2` the same run in guess mode (strength SCALE).
  - `all.*`: image-to-image + ControlNet + LoRA + LCM: ../lora/kohya.safetensors merged at 1.0, LCM
    LCM_STEPS steps at strength LCM_STRENGTH from the pipeline fixture's init image, guidance 1, the
    ControlNet at SCALE: `all.latents`, `all.image`.

Usage: /usr/bin/python3 tools/make_controlnet_fixtures.py [--out DIR]      (a few seconds)
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_diffusion_fixtures import TINY_UNET, TINY_VAE, TINY_VAE_ENCODER  # noqa: E402
from make_pipeline_fixtures import (CONTEXT_LEN, GUIDANCE, PROMPT, SEED, SIZE, STEPS, hf_tokenizer,  # noqa: E402
                                    init_image, load_hf_clip, load_module, nd)
from tessera_ref import st_io  # noqa: E402
from tessera_ref.sd_controlnet import CONTROL_PREFIX, ControlNet, HintConfig, diffusers_key, guess_mode_scales  # noqa: E402
from tessera_ref.sd_lora import lora_delta  # noqa: E402
from tessera_ref.sd_pipeline import Pipeline, noise_rng, pad_ids  # noqa: E402
from tessera_ref.sd_unet import UNET_PREFIX, UNet  # noqa: E402
from tessera_ref.sd_vae import VAE_PREFIX, VaeDecoder, VaeEncoder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HINT = HintConfig(in_channels=3, channels=[8, 16], strides=[1, 2])
SCALE = 0.8
LCM_STEPS, LCM_STRENGTH = 4, 0.75
KOHYA_M = 1.0


def hint_image(size):
    """A depth-like control image: a bright disc fading to its rim, black around it (uint8 [size, size, 3])."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    r = np.hypot(yy - size * 0.45, xx - size * 0.55) / (size * 0.35)
    v = np.where(r < 1, 255 * (1 - 0.5 * r), 0)
    return np.repeat(np.round(v)[..., None], 3, axis=2).astype(np.uint8)


def hint_tensor(u8):
    return torch.from_numpy(u8.astype(np.float32) / np.float32(255)).permute(2, 0, 1)[None].contiguous()


def merge_kohya(weights, path):
    """../lora/kohya.safetensors merged into `weights` (UNet and text encoder keys) at KOHYA_M, with the
    module -> weight table of make_lora_fixtures.py."""
    from make_lora_fixtures import KOHYA
    lora, _ = st_io.load(path)
    for stem, target, _, alpha in KOHYA:
        down = torch.from_numpy(np.array(lora[stem + ".lora_down.weight"], np.float32))
        up = torch.from_numpy(np.array(lora[stem + ".lora_up.weight"], np.float32))
        a = float(np.asarray(lora[stem + ".alpha"])) if stem + ".alpha" in lora else None
        weights[target] = weights[target] + lora_delta(down, up, a, KOHYA_M)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "diffusion", "controlnet"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(os.path.join(args.out, "diffusers"), exist_ok=True)
    fixtures = os.path.join(ROOT, "tests", "fixtures")
    sd, _ = st_io.load(os.path.join(fixtures, "diffusion", "sd_tiny.safetensors"))
    unet = load_module(UNet(TINY_UNET), sd, UNET_PREFIX)
    vae = load_module(VaeDecoder(TINY_VAE), sd, VAE_PREFIX)
    encoder = load_module(VaeEncoder(TINY_VAE_ENCODER), sd, VAE_PREFIX)
    te_dir = os.path.join(fixtures, "parity", "text_encoder")
    clip, _ = load_hf_clip(te_dir)

    # The ControlNet: the UNet's encoder half plus noise (a trained one has drifted from its copy), random
    # hint encoder and zero convolutions (a trained one's are not zero), all F16-exact.
    torch.manual_seed(11)
    net = ControlNet(TINY_UNET, HINT).eval()
    g = torch.Generator().manual_seed(12)
    state = {}
    unet_sd = unet.state_dict()
    for k, v in net.state_dict().items():
        if k in unet_sd:
            v = unet_sd[k] + 0.05 * torch.randn(v.shape, generator=g) * (unet_sd[k].std() + 1e-3)
        elif k.startswith(("zero_convs", "middle_block_out")):
            v = torch.randn(v.shape, generator=g) * (0.08 if k.endswith("weight") else 0.02)
        state[k] = v.half().float()
    net.load_state_dict(state)
    cn = {CONTROL_PREFIX + k: v.numpy() for k, v in state.items()}
    st_io.save(os.path.join(args.out, "control.safetensors"), cn, dtypes={k: "F16" for k in cn})
    hint_convs = len(HINT.channels) + 1
    diff = {diffusers_key(k, TINY_UNET.num_res_blocks, hint_convs): v.numpy() for k, v in state.items()}
    if len(diff) != len(state):
        raise SystemExit("diffusers renaming is not one-to-one")
    st_io.save(os.path.join(args.out, "diffusers", "diffusion_pytorch_model.safetensors"), diff,
               dtypes={k: "F16" for k in diff})
    with open(os.path.join(args.out, "diffusers", "config.json"), "w") as f:
        json.dump({"_class_name": "ControlNetModel", "in_channels": 4,
                   "block_out_channels": [32, 64], "layers_per_block": 1,
                   "conditioning_embedding_out_channels": HINT.channels, "cross_attention_dim": 32,
                   "attention_head_dim": TINY_UNET.num_heads}, f, indent=1)

    # One pass: batch 2 with its own t and contexts.
    g = torch.Generator().manual_seed(13)
    x = torch.randn(2, 4, 16, 16, generator=g)
    t = torch.tensor([500.0, 500.0])
    tok = hf_tokenizer(os.path.join(fixtures, "diffusion", "pipeline", "vocab.json"),
                       os.path.join(fixtures, "diffusion", "pipeline", "merges.txt"))
    eos = tok.encoder["<|endoftext|>"]
    rows = [pad_ids(tok.encode_with_specials(p), CONTEXT_LEN, eos) for p in ("", PROMPT)]
    rgb_hint = hint_image(SIZE)
    hint = hint_tensor(rgb_hint)
    out = {}
    with torch.no_grad():
        context = clip(torch.tensor(rows, dtype=torch.long))
        res = net(x, hint.repeat(2, 1, 1, 1), t, context)
        from tessera_ref.sd_controlnet import controlled_unet
        eps = controlled_unet(unet, x, t, context, res, SCALE)
        keep = torch.tensor([0.0, 1.0]).reshape(2, 1, 1, 1)
        eps_guess = controlled_unet(unet, x, t, context, [r * keep for r in res],
                                    guess_mode_scales(SCALE, len(res)))
        plain = unet(x, t, context)
    out.update({"forward.x": nd(x), "forward.t": nd(t), "forward.context": nd(context), "forward.hint": nd(hint),
                "forward.eps": nd(eps), "forward.eps_guess": nd(eps_guess)})
    for k, r in enumerate(res):
        out[f"forward.residual.{k}"] = nd(r)
    print(f"{len(res)} residuals; |eps - plain| max {float((eps - plain).abs().max()):.3f}")

    # Text-to-image with the ControlNet (CFG: it runs on both rows).
    pipe = Pipeline(unet, vae, clip, encoder)
    pipe.control = (net, hint, [SCALE] * len(res), False)
    lat = SIZE // 2
    noise = noise_rng(SEED, 0, 4 * lat * lat).reshape(1, lat, lat, 4).transpose(0, 3, 1, 2).copy()
    _, _, latents, image = pipe.sample_euler(context, noise, STEPS, GUIDANCE)
    out.update({"t2i.latents.2": nd(latents[-1]), "t2i.image": nd(image), "hint": rgb_hint.astype(np.float32)})
    # Guess mode: the scales 0.825^(n-1-i), and no control on the unconditional row.
    pipe.control = (net, hint, guess_mode_scales(SCALE, len(res)), True)
    _, _, guess_latents, _ = pipe.sample_euler(context, noise, STEPS, GUIDANCE)
    out["t2i_guess.latents.2"] = nd(guess_latents[-1])

    # Everything at once: LoRA merged, LCM image-to-image, ControlNet, guidance 1.
    weights = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in sd.items()}
    te, _ = st_io.load(os.path.join(te_dir, "model.safetensors"))
    weights.update({k: torch.from_numpy(np.array(v, np.float32)) for k, v in te.items()})
    merge_kohya(weights, os.path.join(fixtures, "diffusion", "lora", "kohya.safetensors"))
    unet_l = load_module(UNet(TINY_UNET), {k: v.numpy() for k, v in weights.items()}, UNET_PREFIX)
    clip_l, _ = load_hf_clip(te_dir)
    clip_l.load_state_dict({k: weights[k] for k in clip_l.state_dict()})
    pipe_l = Pipeline(unet_l, vae, clip_l, encoder)
    pipe_l.control = (net, hint, [SCALE] * len(res), False)
    context_l = pipe_l.encode(rows)
    rgb = init_image(SIZE)
    _, all_latents, all_image = pipe_l.sample_lcm_image(context_l, noise, LCM_STEPS, 1.0, SEED, rgb, LCM_STRENGTH)
    out.update({"all.latents": nd(all_latents), "all.image": nd(all_image)})

    st_io.save(os.path.join(args.out, "expected.safetensors"), out,
               metadata={"generator": "tools/make_controlnet_fixtures.py", "scale": str(SCALE),
                         "lcm_steps": str(LCM_STEPS), "lcm_strength": str(LCM_STRENGTH),
                         "kohya_multiplier": str(KOHYA_M)})
    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    if total >= 2.5 * 1024 * 1024:
        raise SystemExit(f"controlnet fixture is {total} bytes, over the 2.5 MiB budget")
    print(f"t2i latents |max| {np.abs(latents[-1]).max():.3f}; all latents |max| {np.abs(all_latents).max():.3f}; "
          f"{total} bytes")


if __name__ == "__main__":
    main()
