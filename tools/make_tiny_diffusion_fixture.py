#!/usr/bin/python3
"""Writes tests/fixtures/diffusion/tessera_tiny/: parity of the C++ pipeline with PyTorch on the SHIPPED
tiny diffusion model (assets/models/tessera-tiny/diffusion, text encoder ../text_encoder).

The run (tools/tessera_ref/sd_pipeline.py, fp32, one thread): prompt PROMPT, unconditional "" as the
negative, guidance GUIDANCE, Euler over the normal schedule, STEPS steps, seed SEED (NoiseRng stream 0),
64x64. Then image-to-image with the shipped VAE encoder: that image (8-bit) repainted with I2I_PROMPT at strength
I2I_STRENGTH over I2I_STEPS steps (tensors i2i.*). The expected file records the FNV-1a 64 hash of model.safetensors: when the model is retrained, the C++
test says so and this script must be re-run.

Usage: /usr/bin/python3 tools/make_tiny_diffusion_fixture.py [--out DIR]      (a few seconds)
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_pipeline_fixtures import hf_tokenizer, load_hf_clip, load_module, nd  # noqa: E402
from tessera_ref import st_io  # noqa: E402
from tessera_ref.sd_pipeline import Pipeline, noise_rng, pad_ids  # noqa: E402
from tessera_ref.sd_unet import UNET_PREFIX, UNet, UNetConfig  # noqa: E402
from tessera_ref.sd_vae import VAE_PREFIX, VaeConfig, VaeDecoder, VaeEncoder, VaeEncoderConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "a blue sphere"
GUIDANCE = 5.0
STEPS = 3
SEED = 7
SIZE = 64
CONTEXT_LEN = 77
# Image-to-image with the shipped VAE encoder: the text-to-image result above (as 8-bit RGB) repainted
# with I2I_PROMPT, I2I_STEPS steps at strength I2I_STRENGTH.
I2I_PROMPT = "a red sphere"
I2I_STEPS, I2I_STRENGTH = 4, 0.5


def fields(cls, d):
    names = set(cls.__dataclass_fields__) if hasattr(cls, "__dataclass_fields__") else set(d)
    return cls(**{k: v for k, v in d.items() if k in names})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "diffusion", "tessera_tiny"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    tiny = os.path.join(ROOT, "assets", "models", "tessera-tiny")
    model_path = os.path.join(tiny, "diffusion", "model.safetensors")
    if not os.path.exists(model_path):
        raise SystemExit(f"{model_path}: missing (train it with tools/train/diffusion/run_diffusion.sh)")
    with open(os.path.join(tiny, "diffusion", "model.json")) as f:
        card = json.load(f)
    sd, _ = st_io.load(model_path)
    unet = load_module(UNet(fields(UNetConfig, card["unet"])), sd, UNET_PREFIX)
    vae = load_module(VaeDecoder(fields(VaeConfig, card["vae"])), sd, VAE_PREFIX)
    clip, _ = load_hf_clip(os.path.join(tiny, "text_encoder"))
    tok = hf_tokenizer(os.path.join(tiny, "vocab.json"), os.path.join(tiny, "merges.txt"))
    eos = tok.encoder["<|endoftext|>"]
    rows = [pad_ids(tok.encode_with_specials(p), CONTEXT_LEN, eos) for p in ("", PROMPT)]

    encoder = load_module(VaeEncoder(fields(VaeEncoderConfig, card["vae_encoder"])), sd, VAE_PREFIX)
    pipe = Pipeline(unet, vae, clip, encoder)
    context = pipe.encode(rows)
    lat = SIZE // (2 ** (len(card["vae"]["ch_mult"]) - 1))
    noise = noise_rng(SEED, 0, 4 * lat * lat).reshape(1, lat, lat, 4).transpose(0, 3, 1, 2).copy()
    sigmas, timesteps, latents, image = pipe.sample_euler(context, noise, STEPS, GUIDANCE)
    with open(model_path, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8)
    h = 0xcbf29ce484222325
    for b in data.tolist():  # FNV-1a 64 (the C++ test computes the same)
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    sha = f"{h:016x}"
    out = {"text.context": nd(context), "sigmas": nd(sigmas), "image": nd(image)}
    rgb = np.clip(np.round((np.clip(image[0], -1, 1) + 1) * 127.5), 0, 255).astype(np.uint8).transpose(1, 2, 0)
    rows2 = [pad_ids(tok.encode_with_specials(p), CONTEXT_LEN, eos) for p in ("", I2I_PROMPT)]
    _, i2i_latents, i2i_image = pipe.sample_euler_image(pipe.encode(rows2), noise, I2I_STEPS, GUIDANCE, rgb,
                                                        I2I_STRENGTH)
    out.update({"i2i.rgb": rgb.astype(np.float32), "i2i.init_latents": nd(pipe.encode_image(rgb)),
                "i2i.latents": nd(i2i_latents[-1]), "i2i.image": nd(i2i_image)})
    for i, x in enumerate(latents):
        out[f"latents.{i}"] = nd(x)
    st_io.save(os.path.join(args.out, "expected.safetensors"), out,
               metadata={"generator": "tools/make_tiny_diffusion_fixture.py", "prompt": PROMPT,
                         "guidance": str(GUIDANCE), "steps": str(STEPS), "seed": str(SEED),
                         "size": str(SIZE), "model_fnv1a64": sha, "i2i_prompt": I2I_PROMPT,
                         "i2i_steps": str(I2I_STEPS), "i2i_strength": str(I2I_STRENGTH)})
    print(f"{PROMPT!r}: latents |max| {np.abs(latents[-1]).max():.3f}, image |max| "
          f"{np.abs(image).max():.3f}; model fnv1a64 {sha}")


if __name__ == "__main__":
    main()
