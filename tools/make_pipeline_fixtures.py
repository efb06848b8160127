#!/usr/bin/python3
"""Writes the SD text-to-image pipeline parity fixture tests/fixtures/diffusion/pipeline/ (README.md there).

Model: the tiny UNet + VAE of tests/fixtures/diffusion/sd_tiny.safetensors (make_diffusion_fixtures.py)
conditioned by the tiny random CLIP text encoder of tests/fixtures/parity/text_encoder/ (width 32 =
the UNet's context dim, 4 heads, 1000-row vocabulary) with the tessera-tiny BPE vocabulary (730
tokens: assets/models/tessera-tiny/{vocab.json,merges.txt}, copied here so the fixture does not move
when that model is retrained). No new weights are stored: the C++ test assembles the CompVis single
file and the diffusers folder from these files.

The run (tools/tessera_ref/sd_pipeline.py): prompt PROMPT, unconditional "" as the negative, guidance
GUIDANCE (batch 2), Euler over the normal schedule, STEPS steps, seed SEED (NoiseRng stream 0),
image SIZE x SIZE. Single-threaded, deterministic: two runs give identical bytes.

Usage: /usr/bin/python3 tools/make_pipeline_fixtures.py [--out DIR]      (a few seconds)
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clip_tokenizer_ref import SimpleTokenizer, bytes_to_unicode  # noqa: E402
from make_diffusion_fixtures import TINY_UNET, TINY_VAE, TINY_VAE_ENCODER  # noqa: E402
from tessera_ref import st_io  # noqa: E402
from tessera_ref.clip_text import ClipTextModel  # noqa: E402
from tessera_ref.config import ClipTextConfig  # noqa: E402
from tessera_ref.sd_pipeline import Pipeline, noise_rng, pad_ids  # noqa: E402
from tessera_ref.sd_unet import UNET_PREFIX, UNet  # noqa: E402
from tessera_ref.sd_vae import VAE_PREFIX, VaeDecoder, VaeEncoder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "a red torus"
GUIDANCE = 2.0
STEPS = 3
SEED = 42
SIZE = 32  # pixels; the tiny VAE upscales 2x, so the latents are 16 x 16
CONTEXT_LEN = 77
# Image-to-image: 5 steps at strength 0.6 run the last 3. Inpainting: 3 steps at strength 1.
I2I_STEPS, I2I_STRENGTH = 5, 0.6
INPAINT_STEPS = 3
# LCM image-to-image: 2 steps at strength 0.5 (timesteps 499, 259), guidance 1 (one UNet pass).
LCM_STEPS, LCM_STRENGTH = 2, 0.5


def init_image(size):
    """A deterministic RGB8 picture: a disc on a two-colour ramp."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) / (size - 1)
    img = np.stack([40 + 180 * xx, 60 + 120 * yy, 200 - 150 * xx * yy], axis=-1)
    disc = (xx - 0.55) ** 2 + (yy - 0.45) ** 2 < 0.08
    img[disc] = [230, 40, 40]
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def mask_image(size):
    """White (repaint) over an off-centre rectangle whose edges do not fall on latent cell borders."""
    m = np.zeros((size, size), np.uint8)
    m[5:20, 9:27] = 255
    return m

README = """# SD pipeline parity fixture (generated: do not edit)

Written by `/usr/bin/python3 tools/make_pipeline_fixtures.py` from `tools/tessera_ref/sd_pipeline.py`
(fp32 PyTorch, one thread). The model is assembled by the test from existing fixtures:
- UNet + VAE decoder: `../sd_tiny.safetensors` (CompVis keys; UNet heads 2, see ../README.md);
- text encoder: `../../parity/text_encoder/` (CLIP width {width}, {layers} layers, 4 heads, HF keys);
- tokenizer: `vocab.json` + `merges.txt` here (a copy of tessera-tiny's 730-token BPE; BOS {bos},
  EOS {eos}, which also pads).

Run: prompt "{prompt}", negative "" (unconditional), guidance {guidance} (batch [uncond, cond]), Euler,
normal schedule, {steps} steps, seed {seed} (initial noise = NoiseRng(seed) stream 0, see
engine/diffusion/scheduler.h), {size}x{size} pixels ({lat}x{lat} latents).

## expected.safetensors (F32 unless noted; NCHW as PyTorch)
| name | shape | meaning |
|---|---|---|
| `text.ids` | I32 [2,77] | row 0: "" ([BOS, EOS] padded with EOS), row 1: the prompt |
| `text.context` | [2,77,{width}] | CLIP last hidden state, causal only (the UNet context) |
| `noise` | [1,4,{lat},{lat}] | NoiseRng({seed}) stream 0, N(0,1), filled in NHWC order (the engine's latent layout) |
| `sigmas` | [{steps1}] | the normal schedule's sigmas, last 0 |
| `timesteps` | [{steps}] | the UNet timestep of each step |
| `latents.I` | [1,4,{lat},{lat}] | latents after Euler step I (I = 0..{last}) |
| `image` | [1,3,{size},{size}] | VAE decode of the final latents (in about [-1, 1], not clamped) |

Image-to-image and inpainting (`Pipeline.sample_euler_image`; the VAE encoder of ../sd_tiny.safetensors;
same prompt, guidance, seed and noise):
| name | shape | meaning |
|---|---|---|
| `i2i.rgb` | [{size},{size},3] | the init image (its RGB8 values): a red disc on a two-colour ramp |
| `i2i.mask` | [{size},{size}] | the mask (255 = repaint, 0 = keep): an off-centre rectangle |
| `i2i.init_latents` | [1,4,{lat},{lat}] | 0.18215 x the encoder posterior's mean of the init image |
| `i2i.first` | [1] | the first step that runs: {i2i_steps} steps at strength {i2i_strength} |
| `i2i.latents.I` | [1,4,{lat},{lat}] | latents after the I-th step run |
| `i2i.image` | [1,3,{size},{size}] | its decoded image |
| `inpaint.latents`, `inpaint.image` | | inpainting with the mask, this UNet, {inpaint_steps} steps, strength 1 |
| `inpaint9.conv_in` | [32,9,3,3] | conv_in of an inpainting UNet (the UNet's other weights unchanged) |
| `inpaint9.latents`, `inpaint9.image` | | the same inpainting run with that UNet |
| `lcm.timesteps` | [{lcm_steps}] | LCM image-to-image: {lcm_steps} steps at strength {lcm_strength}, guidance 1 |
| `lcm.latents`, `lcm.image` | | its final latents (noise per step: NoiseRng({seed}) stream i + 1) and image |
"""


def hf_tokenizer(vocab_path, merges_path):
    """clip_tokenizer_ref.SimpleTokenizer over a Hugging Face vocab.json + merges.txt."""
    tok = SimpleTokenizer.__new__(SimpleTokenizer)
    tok.byte_encoder = bytes_to_unicode()
    tok.byte_decoder = {v: k for k, v in tok.byte_encoder.items()}
    with open(vocab_path, encoding="utf-8") as f:
        tok.encoder = json.load(f)
    tok.decoder = {v: k for k, v in tok.encoder.items()}
    with open(merges_path, encoding="utf-8") as f:
        lines = [ln for ln in f.read().split("\n") if ln and not ln.startswith("#version")]
    tok.merges = [tuple(ln.split()) for ln in lines]
    tok.bpe_ranks = dict(zip(tok.merges, range(len(tok.merges))))
    tok.cache = {"<|startoftext|>": "<|startoftext|>", "<|endoftext|>": "<|endoftext|>"}
    return tok


def load_module(module, tensors, prefix):
    state = {k: torch.from_numpy(tensors[prefix + k].astype(np.float32)) for k in module.state_dict()}
    module.load_state_dict(state)
    return module.eval()


def load_hf_clip(te_dir):
    """(ClipTextModel in eval mode, its ClipTextConfig) from a Hugging Face text encoder folder
    (model.safetensors + config.json)."""
    te, _ = st_io.load(os.path.join(te_dir, "model.safetensors"))
    with open(os.path.join(te_dir, "config.json")) as f:
        te_cfg = json.load(f)
    cfg = ClipTextConfig(vocab_size=te_cfg["vocab_size"], max_position=te_cfg["max_position_embeddings"],
                         width=te_cfg["hidden_size"], n_layer=te_cfg["num_hidden_layers"],
                         n_head=te_cfg["num_attention_heads"], mlp_hidden=te_cfg["intermediate_size"],
                         eps=te_cfg["layer_norm_eps"])
    return load_module(ClipTextModel(cfg), te, ""), cfg


def nd(t):
    return np.ascontiguousarray(np.asarray(t, dtype=np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "diffusion", "pipeline"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)

    fixtures = os.path.join(ROOT, "tests", "fixtures")
    sd, _ = st_io.load(os.path.join(fixtures, "diffusion", "sd_tiny.safetensors"))
    unet = load_module(UNet(TINY_UNET), sd, UNET_PREFIX)
    vae = load_module(VaeDecoder(TINY_VAE), sd, VAE_PREFIX)
    encoder = load_module(VaeEncoder(TINY_VAE_ENCODER), sd, VAE_PREFIX)
    clip, cfg = load_hf_clip(os.path.join(fixtures, "parity", "text_encoder"))
    if cfg.width != TINY_UNET.context_dim:
        raise SystemExit(f"text width {cfg.width} != UNet context {TINY_UNET.context_dim}")

    tiny = os.path.join(ROOT, "assets", "models", "tessera-tiny")
    for name in ("vocab.json", "merges.txt"):
        if os.path.abspath(os.path.join(tiny, name)) != os.path.abspath(os.path.join(args.out, name)):
            if not os.path.exists(os.path.join(args.out, name)):
                shutil.copyfile(os.path.join(tiny, name), os.path.join(args.out, name))
    tok = hf_tokenizer(os.path.join(args.out, "vocab.json"), os.path.join(args.out, "merges.txt"))
    bos, eos = tok.encoder["<|startoftext|>"], tok.encoder["<|endoftext|>"]
    rows = [pad_ids(tok.encode_with_specials(p), CONTEXT_LEN, eos) for p in ("", PROMPT)]

    pipe = Pipeline(unet, vae, clip, encoder)
    context = pipe.encode(rows)
    lat = SIZE // (2 ** (len(TINY_VAE.ch_mult) - 1))
    # The engine's latents are NHWC: the stream fills them in that order.
    noise = noise_rng(SEED, 0, 4 * lat * lat).reshape(1, lat, lat, 4).transpose(0, 3, 1, 2).copy()
    sigmas, timesteps, latents, image = pipe.sample_euler(context, noise, STEPS, GUIDANCE)

    out = {"text.ids": np.asarray(rows, dtype=np.int32), "text.context": nd(context),
           "noise": nd(noise), "sigmas": nd(sigmas), "timesteps": nd(timesteps), "image": nd(image)}
    for i, x in enumerate(latents):
        out[f"latents.{i}"] = nd(x)

    # Image-to-image, inpainting with this UNet, and with an inpainting UNet: the same UNet but for
    # conv_in, widened to 2z + 1 = 9 input channels (its weights stored here: inpaint.conv_in).
    rgb, mask = init_image(SIZE), mask_image(SIZE)
    first, i2i_latents, i2i_image = pipe.sample_euler_image(context, noise, I2I_STEPS, GUIDANCE, rgb,
                                                            I2I_STRENGTH)
    _, mask_latents, mask_image_out = pipe.sample_euler_image(context, noise, INPAINT_STEPS, GUIDANCE, rgb,
                                                              1.0, mask)
    g = torch.Generator().manual_seed(77)
    conv_in = unet.input_blocks[0][0]
    wide = torch.nn.Conv2d(9, conv_in.out_channels, 3, padding=1)
    with torch.no_grad():
        wide.weight.copy_((torch.randn(wide.weight.shape, generator=g) / 81 ** 0.5).half().float())
        wide.bias.copy_(conv_in.bias)
    unet.input_blocks[0][0] = wide
    _, wide_latents, wide_image = pipe.sample_euler_image(context, noise, INPAINT_STEPS, GUIDANCE, rgb, 1.0,
                                                          mask)
    unet.input_blocks[0][0] = conv_in
    lcm_t, lcm_latents, lcm_image = pipe.sample_lcm_image(context, noise, LCM_STEPS, 1.0, SEED, rgb, LCM_STRENGTH)
    out.update({"lcm.timesteps": nd(lcm_t), "lcm.latents": nd(lcm_latents), "lcm.image": nd(lcm_image)})
    out.update({"i2i.rgb": rgb.astype(np.float32), "i2i.mask": mask.astype(np.float32),
                "i2i.init_latents": nd(pipe.encode_image(rgb)),
                "i2i.first": np.asarray([first], np.float32), "i2i.image": nd(i2i_image),
                "inpaint.latents": nd(mask_latents[-1]), "inpaint.image": nd(mask_image_out),
                "inpaint9.conv_in": nd(wide.weight.detach()), "inpaint9.latents": nd(wide_latents[-1]),
                "inpaint9.image": nd(wide_image)})
    for i, x in enumerate(i2i_latents):
        out[f"i2i.latents.{i}"] = nd(x)
    st_io.save(os.path.join(args.out, "expected.safetensors"), out,
               metadata={"generator": "tools/make_pipeline_fixtures.py", "prompt": PROMPT})
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    if total >= 1024 * 1024:
        raise SystemExit(f"pipeline fixture is {total} bytes, over the 1 MiB budget")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(README.format(width=cfg.width, layers=cfg.n_layer, bos=bos, eos=eos, prompt=PROMPT,
                              guidance=GUIDANCE, steps=STEPS, steps1=STEPS + 1, last=STEPS - 1,
                              seed=SEED, size=SIZE, lat=lat, i2i_steps=I2I_STEPS,
                              i2i_strength=I2I_STRENGTH, inpaint_steps=INPAINT_STEPS,
                              lcm_steps=LCM_STEPS, lcm_strength=LCM_STRENGTH))
    print(f"prompt ids {rows[1][:8]}...; latents |max| {np.abs(latents[-1]).max():.3f}, "
          f"image |max| {np.abs(image).max():.3f}; {total} bytes")


if __name__ == "__main__":
    main()
