#!/usr/bin/python3
"""Samples a 4x4 grid of prompts from the tessera-tiny diffusion model into a PNG (so quality can be
looked at): the reference Euler sampler (tools/tessera_ref/sd_sampler.py, SD's "normal" discrete
schedule), 20 steps, classifier-free guidance 5 (uncond = the empty prompt), one seed per prompt.

From the exported model (default; assets/models/tessera-tiny/diffusion/model.safetensors + model.json,
the text encoder from ../text_encoder) or, with --run-dir, from the training checkpoints (the UNet's EMA
weights, the VAE decoder of vae_ckpt.pt, the latent scale of vae_done.json).

  /usr/bin/python3 tools/train/diffusion/sample.py [--out samples.png] [--run-dir DIR] [--steps 20]
      [--cfg 5] [--seed 0] [--prompts "a red torus|a blue sphere|..."]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models as M  # noqa: E402
import render  # noqa: E402
from tessera_ref import sd_sampler, sd_unet, sd_vae  # noqa: E402

PROMPTS = [
    "a red torus", "a blue sphere", "a green cone", "a yellow cube",
    "a shiny purple mug", "a white snowman on a sky blue background", "a brown chair", "an orange pyramid",
    "a metal grey dumbbell", "a pink mushroom", "a green pine tree", "a cyan bottle on a dark background",
    "a red house", "a black table on a white background", "a yellow lamp", "a blue ring",
]
EXPORT_DIR = os.path.join(M.MODEL_DIR, "diffusion")


@torch.no_grad()
def generate(unet, decoder, latent_scale, clip, tok, prompts, seed=0, steps=20, cfg=5.0, latent_hw=16):
    """prompts -> uint8 images [N, 64, 64, 3]. decoder: sd_vae.VaeDecoder; latent_scale: what the
    decoder divides the UNet's latents by."""
    n = len(prompts)
    cond = M.encode_text(clip, tok, list(prompts))
    uncond = M.encode_text(clip, tok, [""]).expand(n, -1, -1)
    ctx = torch.cat([uncond, cond])
    sched = sd_sampler.Schedule()
    sigmas = sched.normal(steps)
    noise = np.stack([np.random.default_rng([seed, i]).standard_normal((4, latent_hw, latent_hw))
                      for i in range(n)])
    x = noise * sigmas[0]

    def model(xin, t):
        xt = torch.from_numpy(np.asarray(xin, np.float32))
        eps = unet(torch.cat([xt, xt]), torch.full((2 * n,), float(t)), ctx)
        e_u, e_c = eps.double().chunk(2)
        return (e_u + cfg * (e_c - e_u)).numpy()

    x = sd_sampler.sample_euler(model, sched, x, sigmas)[-1]
    img = decoder(torch.from_numpy(x.astype(np.float32)), scale=latent_scale).clamp(-1, 1)
    return img.permute(0, 2, 3, 1).add(1).mul(127.5).round().byte().numpy()


def load_exported(model_dir=EXPORT_DIR):
    """(unet, decoder, latent_scale, num_heads) from model.safetensors + model.json."""
    with open(os.path.join(model_dir, "model.json")) as f:
        card = json.load(f)
    weights, _ = M.st_io_load(os.path.join(model_dir, "model.safetensors"))
    u = card["unet"]
    ucfg = sd_unet.UNetConfig(in_channels=u["in_channels"], out_channels=u["out_channels"],
                              model_channels=u["model_channels"], channel_mult=u["channel_mult"],
                              num_res_blocks=u["num_res_blocks"], attention_levels=u["attention_levels"],
                              num_heads=u["num_heads"], context_dim=u["context_dim"], groups=u["groups"])
    v = card["vae"]
    vcfg = sd_vae.VaeConfig(z_channels=v["z_channels"], out_channels=v["out_channels"], ch=v["ch"],
                            ch_mult=v["ch_mult"], num_res_blocks=v["num_res_blocks"], groups=v["groups"])
    unet, dec = sd_unet.UNet(ucfg).eval(), sd_vae.VaeDecoder(vcfg).eval()
    for mod, prefix in ((unet, sd_unet.UNET_PREFIX), (dec, sd_vae.VAE_PREFIX)):
        # The VAE's encoder and quant_conv (image-to-image) are not the decoder's.
        sd = {k[len(prefix):]: torch.from_numpy(np.array(w, np.float32)) for k, w in weights.items()
              if k.startswith(prefix) and not k.startswith((prefix + "encoder.", prefix + "quant_conv."))}
        mod.load_state_dict(sd, strict=True)
    return unet, dec, float(card["latent_scale"])


def load_from_run(run_dir):
    with open(os.path.join(run_dir, "vae_done.json")) as f:
        vdone = json.load(f)
    vae = M.KLVae()
    vae.load_state_dict(torch.load(os.path.join(run_dir, "vae_ckpt.pt"), map_location="cpu")["model"])
    state = torch.load(os.path.join(run_dir, "unet_ckpt.pt"), map_location="cpu")
    ex = state["extra"]
    unet = sd_unet.UNet(M.unet_config(ex["context_dim"], ex["model_channels"])).eval()
    unet.load_state_dict(ex["ema"])
    return unet, vae.first_stage.eval(), float(vdone["latent_scale"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(M.RUN_DIR, "samples.png"))
    p.add_argument("--model-dir", default=EXPORT_DIR)
    p.add_argument("--run-dir", default="", help="sample from this run's checkpoints instead")
    p.add_argument("--text-model-dir", default=M.MODEL_DIR)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--cfg", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompts", default="", help="'|'-separated (default: 16 built-in prompts)")
    a = p.parse_args(argv)
    M.common.set_threads(a.threads)
    prompts = a.prompts.split("|") if a.prompts else PROMPTS
    t0 = time.time()
    unet, dec, scale = load_from_run(a.run_dir) if a.run_dir else load_exported(a.model_dir)
    clip, tok, _, _ = M.load_text_encoder(a.text_model_dir)
    imgs = generate(unet, dec, scale, clip, tok, prompts, a.seed, a.steps, a.cfg)
    render.write_png(a.out, render.grid(imgs, 4))
    print(f"{len(prompts)} samples ({a.steps} Euler steps, CFG {a.cfg}) in {time.time() - t0:.1f} s -> {a.out}")
    for i, pr in enumerate(prompts):
        print(f"  row {i // 4} col {i % 4}: {pr}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
