#!/usr/bin/python3
"""Writes the deterministic diffusion parity fixtures under tests/fixtures/diffusion/ (README.md there).

A tiny random-weight SD 1.x UNet, VAE decoder and VAE encoder with the CompVis single-file key names
(`model.diffusion_model.*`, `first_stage_model.*`) in one checkpoint, plus expected.safetensors with the
inputs and the outputs of the fp32 reference (tools/tessera_ref/sd_unet.py, sd_vae.py). Weights are
stored F16 (to keep the fixtures small); the reference runs on the F16-rounded values in f32, so the
C++ engine (which widens F16 exactly) sees the same weights. Also checks the parameter counts of the
full SD 1.5 config (UNet 859,520,964; VAE decoder + post_quant_conv 49,490,199; VAE encoder + quant_conv
34,163,664) on the meta device.
Single-threaded, fixed seeds: two runs give byte-identical files.

Usage: /usr/bin/python3 tools/make_diffusion_fixtures.py [--out DIR]      (a few seconds)

The files stay under 3 MiB in total (checked), hence F16 weights and few intermediate outputs.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tessera_ref import st_io  # noqa: E402
from tessera_ref.sd_unet import SD15_UNET, UNET_PREFIX, UNet, UNetConfig  # noqa: E402
from tessera_ref.sd_vae import (SD15_VAE, SD15_VAE_ENCODER, SD_LATENT_SCALE, VAE_PREFIX, VaeConfig,  # noqa: E402
                                VaeDecoder, VaeEncoder, VaeEncoderConfig)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SD15_UNET_PARAMS = 859_520_964
SD15_VAE_DECODER_PARAMS = 49_490_199
SD15_VAE_ENCODER_PARAMS = 34_163_664

TINY_UNET = UNetConfig(in_channels=4, out_channels=4, model_channels=32, channel_mult=[1, 2],
                       num_res_blocks=1, attention_levels=[0], num_heads=2, context_dim=32, groups=32)
# The VAE widens towards full resolution ([2, 1]: 32 channels at the latent resolution, 64 at the
# output) so that the fixtures stay under 2 MB and still cover nin_shortcut, upsampling and the middle
# attention.
TINY_VAE = VaeConfig(z_channels=4, out_channels=3, ch=32, ch_mult=[2, 1], num_res_blocks=0, groups=32)
# The encoder (image-to-image) mirrors it: 32 channels at full resolution, 64 at the latent's, one
# ResnetBlock per level (the second has a nin_shortcut), the (0, 1, 0, 1)-padded Downsample, the middle
# attention.
TINY_VAE_ENCODER = VaeEncoderConfig(in_channels=3, z_channels=4, ch=32, ch_mult=[1, 2], num_res_blocks=1,
                                    groups=32)
TIMESTEPS = [999.0, 37.0]
CONTEXT_LEN = 77
LATENT_HW = 16

README = """# Diffusion parity fixtures (generated: do not edit)

Written by `/usr/bin/python3 tools/make_diffusion_fixtures.py` from the fp32 PyTorch reference in
`tools/tessera_ref/sd_unet.py` and `sd_vae.py` (Debian python3-torch, one thread, fixed seeds; two
runs give identical bytes). Random weights with the CompVis single-file key names, stored F16 (the
reference computes with the F16-rounded values in f32).

## scheduler.json
Written separately by `tools/make_scheduler_fixtures.py` from `tools/tessera_ref/sd_sampler.py`
(numpy float64): training sigmas, normal and Karras schedules with timesteps, and sampler
trajectories (Euler, Euler-a with supplied noise, DPM++ 2M) on a toy eps model; its docstring
documents the format.

## sd_tiny.safetensors (UNet + VAE decoder + VAE encoder, CompVis layout)
- UNet (`model.diffusion_model.`): {unet}
  (GroupNorm eps 1e-5, 1e-6 around transformers; LayerNorm eps 1e-5; heads are not visible in the
  shapes: pass 2).
- VAE decoder (`first_stage_model.`): {vae}
  (decoder runs num_res_blocks + 1 = {vae_blocks} ResnetBlocks per level; GroupNorm eps 1e-6).
- VAE encoder (`first_stage_model.encoder.*`, `first_stage_model.quant_conv`): {encoder}
  (Downsample = pad (0, 1, 0, 1) + 3x3 stride-2 conv; GroupNorm eps 1e-6).

## expected.safetensors (all F32, NCHW as PyTorch)
| name | shape | meaning |
|---|---|---|
| `unet.x` | [2,4,16,16] | latent input (N(0,1)) |
| `unet.t` | [2] | timesteps {timesteps} |
| `unet.context` | [2,77,32] | cross-attention context (N(0,1)) |
| `unet.time_embed` | [2,128] | time_embed(timestep_embedding(t)) |
| `unet.input_blocks.3` | [2,64,8,8] | output of input block 3 (level 1's ResBlock, 32 -> 64 channels) |
| `unet.middle_block` | [2,64,8,8] | output of the middle block |
| `unet.eps` | [2,4,16,16] | UNet output |
| `vae.z` | [1,4,16,16] | scaled latent (N(0, 0.18215^2)); decode divides by 0.18215 |
| `vae.mid` | [1,32,16,16] | decoder after the middle block |
| `vae.image` | [1,3,32,32] | decoder output |
| `enc.image` | [1,3,32,32] | encoder input in [-1, 1] (a smooth ramp plus noise) |
| `enc.down.0` | [1,32,16,16] | encoder after level 0 (its Downsample included) |
| `enc.mid` | [1,64,16,16] | encoder after the middle block |
| `enc.moments` | [1,8,16,16] | quant_conv output: mean (0..3), log-variance (4..7), unclamped |
| `enc.noise` | [1,4,16,16] | N(0,1) for the posterior sample |
| `enc.latents` | [1,4,16,16] | 0.18215 * (mean + exp(clamp(logvar) / 2) * noise) |
| `enc.mode` | [1,4,16,16] | 0.18215 * mean |

Full SD 1.5 config check (meta device): UNet {unet_params:,} parameters, VAE decoder + post_quant_conv
{vae_params:,}, VAE encoder + quant_conv {encoder_params:,}.
"""


def randomize(module, seed):
    """Weights ~ N(0, 1/fan_in) (fan_in = in_features or in_c*k*k), biases 0.1 N(0,1), norm scales
    1 + 0.2 N(0,1); then rounded to F16 (what the file stores). Sorted-name order, so the values depend
    only on names, shapes and seed."""
    g = torch.Generator().manual_seed(seed)
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            r = torch.randn(p.shape, generator=g)
            if name.endswith("bias"):
                p.copy_(0.1 * r)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.2 * r)
            else:
                p.copy_(r / float(np.prod(p.shape[1:])) ** 0.5)
            p.copy_(p.half().float())
    return module


def count_params(module):
    return sum(p.numel() for p in module.parameters())


def check_sd15_counts():
    unet = count_params(UNet(SD15_UNET, device="meta"))
    vae = count_params(VaeDecoder(SD15_VAE, device="meta"))
    enc = count_params(VaeEncoder(SD15_VAE_ENCODER, device="meta"))
    if unet != SD15_UNET_PARAMS or vae != SD15_VAE_DECODER_PARAMS or enc != SD15_VAE_ENCODER_PARAMS:
        raise SystemExit(f"SD 1.5 parameter counts differ: UNet {unet} (want {SD15_UNET_PARAMS}), "
                         f"VAE decoder {vae} (want {SD15_VAE_DECODER_PARAMS}), encoder {enc} "
                         f"(want {SD15_VAE_ENCODER_PARAMS})")
    return unet, vae


def nd(t):
    return t.detach().contiguous().numpy().astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "diffusion"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    unet_params, vae_params = check_sd15_counts()
    os.makedirs(args.out, exist_ok=True)

    unet = randomize(UNet(TINY_UNET).eval(), seed=1234)
    vae = randomize(VaeDecoder(TINY_VAE).eval(), seed=5678)
    weights = {UNET_PREFIX + k: nd(v) for k, v in unet.state_dict().items()}
    weights.update({VAE_PREFIX + k: nd(v) for k, v in vae.state_dict().items()})
    encoder = randomize(VaeEncoder(TINY_VAE_ENCODER).eval(), seed=9012)
    weights.update({VAE_PREFIX + k: nd(v) for k, v in encoder.state_dict().items()})
    st_io.save(os.path.join(args.out, "sd_tiny.safetensors"), weights,
               dtypes={k: "F16" for k in weights},
               metadata={"format": "pt", "generator": "tools/make_diffusion_fixtures.py"})

    g = torch.Generator().manual_seed(42)
    x = torch.randn(2, TINY_UNET.in_channels, LATENT_HW, LATENT_HW, generator=g)
    t = torch.tensor(TIMESTEPS)
    ctx = torch.randn(2, CONTEXT_LEN, TINY_UNET.context_dim, generator=g)
    z = torch.randn(1, TINY_VAE.z_channels, LATENT_HW, LATENT_HW, generator=g) * SD_LATENT_SCALE
    # The encoder's input: a smooth image in [-1, 1] plus noise (a photo-like mix of both scales).
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 2 * LATENT_HW), torch.linspace(-1, 1, 2 * LATENT_HW),
                            indexing="ij")
    smooth = torch.stack([xx, yy, xx * yy]).unsqueeze(0) * 0.8
    enc_image = (smooth + 0.2 * torch.randn(smooth.shape, generator=g)).clamp(-1, 1)
    enc_noise = torch.randn(1, TINY_VAE_ENCODER.z_channels, LATENT_HW, LATENT_HW, generator=g)
    out = {}
    with torch.no_grad():
        taps = {}
        eps = unet(x, t, ctx, taps)
        vtaps = {}
        image = vae(z, taps=vtaps)
        etaps = {}
        mean, logvar = encoder.moments(enc_image, taps=etaps)
        moments = encoder.quant_conv(encoder.encoder(enc_image))  # unclamped, as the engine returns
        sampled = encoder(enc_image, noise=enc_noise)
    out.update({"unet.x": nd(x), "unet.t": nd(t), "unet.context": nd(ctx), "unet.eps": nd(eps),
                "unet.time_embed": nd(taps["time_embed"]), "unet.middle_block": nd(taps["middle_block"]),
                "unet.input_blocks.3": nd(taps["input_blocks.3"]),
                "vae.z": nd(z), "vae.mid": nd(vtaps["mid"]), "vae.image": nd(image),
                "enc.image": nd(enc_image), "enc.down.0": nd(etaps["down.0"]), "enc.mid": nd(etaps["mid"]),
                "enc.moments": nd(moments), "enc.noise": nd(enc_noise), "enc.latents": nd(sampled),
                "enc.mode": nd(mean * SD_LATENT_SCALE)})
    st_io.save(os.path.join(args.out, "expected.safetensors"), out)

    total = sum(os.path.getsize(os.path.join(args.out, f))
                for f in ("sd_tiny.safetensors", "expected.safetensors"))
    if total >= 3 * 1024 * 1024:
        raise SystemExit(f"fixtures are {total} bytes, over the 3 MiB budget")

    def describe(cfg):
        return ", ".join(f"{k}={v}" for k, v in vars(cfg).items())
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README.format(unet=describe(TINY_UNET), vae=describe(TINY_VAE),
                              encoder=describe(TINY_VAE_ENCODER), vae_blocks=TINY_VAE.num_res_blocks + 1, timesteps=TIMESTEPS,
                              unet_params=unet_params, vae_params=vae_params,
                              encoder_params=SD15_VAE_ENCODER_PARAMS))
    print(f"SD 1.5 counts ok: UNet {unet_params:,}, VAE decoder {vae_params:,}; tiny UNet "
          f"{count_params(unet):,}, tiny VAE {count_params(vae):,}; eps |max| {eps.abs().max():.3f}, "
          f"image |max| {image.abs().max():.3f}")


if __name__ == "__main__":
    main()
