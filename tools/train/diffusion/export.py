#!/usr/bin/python3
"""Exports the tessera-tiny diffusion model: <out>/model.safetensors in the CompVis single-file layout
(`model.diffusion_model.*` = the UNet's EMA weights, `first_stage_model.post_quant_conv.*` +
`first_stage_model.decoder.*` = the VAE decoder; F32) and <out>/model.json (the model card). The text
encoder is not duplicated: it is tessera-tiny's, ../text_encoder with ../vocab.json + ../merges.txt.

Latent scale: the UNet works on scale * raw latents (scale = 1 / std of the training latents, from
vae_done.json). So that a loader can use SD's constant (decode = decoder(post_quant_conv(z / 0.18215))),
the factor 0.18215 / scale is folded into post_quant_conv's weight: the card's latent_scale is 0.18215
and the measured raw scale is recorded beside it.

The export is checked: the exported tensors, loaded into fresh reference modules, must reproduce the
training modules' UNet output and decoded image (max abs difference printed, < 1e-4 required). Then a
4x4 sample sheet (sample.py, Euler 20 steps, CFG 5) is written to <out>/samples.png and a rough colour
check runs: 24 prompts "a <colour> sphere|cube on a grey background", each sample's object pixels (those
far from the grey) -> median RGB -> nearest of the 12 albedos scaled by a typical shading of 0.8;
the match rate goes into the card (a heuristic: shading and highlights move colours).

  /usr/bin/python3 tools/train/diffusion/export.py [--run-dir DIR] [--out assets/models/tessera-tiny/diffusion]
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
import sample as S  # noqa: E402
from tessera_ref import sd_unet, sd_vae  # noqa: E402

SD_SCALE = sd_vae.SD_LATENT_SCALE


def last_metric(path, key):
    val = None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if key in rec:
                    val = rec[key]
    return val


def init_info(vdone):
    """The earlier VAE run this one was fine-tuned from (--init-from), if any: its steps and metrics."""
    src = vdone["args"].get("init_from") or ""
    if not src:
        return None
    info = {"checkpoint": os.path.relpath(src, M.REPO) if os.path.isabs(src) else src}
    done = os.path.join(os.path.dirname(src), "vae_done.json")
    if os.path.exists(done):
        with open(done) as f:
            d = json.load(f)
        info.update({"steps": d["step"], "val_psnr": round(float(d["val_psnr"]), 2),
                     "args": d["args"], "train_seconds": train_seconds(
                         os.path.join(os.path.dirname(src), "vae_metrics.jsonl"))})
    return info


def train_seconds(path):
    """Sum over the logged intervals of log_every / steps_per_s (the training time, all sessions)."""
    tot, last = 0.0, 0
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if "steps_per_s" in rec and rec["steps_per_s"] > 0:
                    tot += (rec["step"] - last) / rec["steps_per_s"] if rec["step"] > last else 0.0
                    last = rec["step"]
    return round(tot)


@torch.no_grad()
def colour_check(unet, dec, clip, tok):
    names = list(render.COLOURS)
    prompts = [f"{render.CAP.article(c)} {c} {s} on a grey background" for c in names for s in ("sphere", "cube")]
    imgs = S.generate(unet, dec, SD_SCALE, clip, tok, prompts, seed=7)
    px_all = imgs.astype(np.float32) / 255
    bg = np.asarray(render.BACKGROUNDS["grey"][0])
    table = np.asarray([render.COLOURS[c] for c in names]) * 0.8
    hits, got = 0, []
    for k, img in enumerate(px_all):
        px = img.reshape(-1, 3)
        obj = px[np.abs(px - bg).max(axis=1) > 0.12]
        if obj.shape[0] < 20:
            got.append("none")
            continue
        med = np.median(obj, axis=0)
        guess = names[int(np.argmin(((table - med) ** 2).sum(axis=1)))]
        got.append(guess)
        hits += guess == names[k // 2]
    return hits / len(prompts), dict(zip(prompts, got)), imgs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default=M.RUN_DIR)
    p.add_argument("--out", default=S.EXPORT_DIR)
    p.add_argument("--data", default=render.DATA_DIR)
    p.add_argument("--model-dir", default=M.MODEL_DIR, help="tessera-tiny folder (text encoder)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    M.common.set_threads(a.threads)
    t0 = time.time()
    with open(os.path.join(a.run_dir, "vae_done.json")) as f:
        vdone = json.load(f)
    with open(os.path.join(a.run_dir, "unet_done.json")) as f:
        udone = json.load(f)
    raw_scale = float(vdone["latent_scale"])
    vae = M.KLVae()
    vae.load_state_dict(torch.load(os.path.join(a.run_dir, "vae_ckpt.pt"), map_location="cpu")["model"])
    dec = vae.first_stage.eval()
    state = torch.load(os.path.join(a.run_dir, "unet_ckpt.pt"), map_location="cpu")
    ex = state["extra"]
    ucfg = M.unet_config(ex["context_dim"], ex["model_channels"])
    unet = sd_unet.UNet(ucfg).eval()
    unet.load_state_dict(ex["ema"])
    clip, tok, hf, fp = M.load_text_encoder(a.model_dir)
    if fp != ex.get("text_encoder_fingerprint"):
        print(f"WARNING: {a.model_dir}/text_encoder differs from the one the UNet was trained on", flush=True)

    weights = {sd_unet.UNET_PREFIX + k: v.detach().float().numpy() for k, v in unet.state_dict().items()}
    for k, v in dec.state_dict().items():
        v = v.detach().float().clone()
        if k == "post_quant_conv.weight":
            v = v * (SD_SCALE / raw_scale)
        weights[sd_vae.VAE_PREFIX + k] = v.numpy()
    os.makedirs(a.out, exist_ok=True)
    n_unet = M.count_params(unet)
    n_vae = M.count_params(dec)
    import safetensors_io
    safetensors_io.save(os.path.join(a.out, "model.safetensors"), weights,
                        metadata={"format": "pt", "generator": "tools/train/diffusion/export.py",
                                  "text_encoder": "../text_encoder"})
    vcfg = M.VAE_CONFIG
    with open(os.path.join(a.data, "meta.json")) as f:
        dmeta = json.load(f)
    card = {
        "name": "tessera-tiny-diffusion",
        "architecture": "Stable Diffusion 1.x (CompVis single-file layout), tiny",
        "files": {"weights": "model.safetensors", "text_encoder": "../text_encoder",
                  "vocab": "../vocab.json", "merges": "../merges.txt"},
        "image_size": 64, "latent_channels": vcfg.z_channels, "latent_size": 16, "vae_downsample": 4,
        "latent_scale": SD_SCALE,
        "latent_scale_note": (f"the UNet's latents are {raw_scale:.5f} x the VAE encoder's (1 / std over the "
                              f"training set); the factor 0.18215 / {raw_scale:.5f} is folded into "
                              "first_stage_model.post_quant_conv.weight so decode = decoder(post_quant_conv("
                              "z / 0.18215)) as in SD"),
        "raw_latent_scale": raw_scale,
        "unet": {**{k: v for k, v in vars(ucfg).items()}, "parameters": n_unet},
        "vae": {**{k: v for k, v in vars(vcfg).items()}, "parameters_decoder": n_vae},
        "text_conditioning": {"context": "last hidden state (after final_layer_norm) of the tessera-tiny text "
                                         "encoder over 77 tokens [BOS] text [EOS] padded with EOS, causal "
                                         "attention only, no padding mask (SD's convention)",
                              "context_dim": hf["hidden_size"], "uncond_prompt": "",
                              "text_encoder_fingerprint": fp},
        "scheduler": {"training": "scaled_linear betas 0.00085..0.012, 1000 steps, epsilon prediction",
                      "recommended": "Euler, 20 steps, classifier-free guidance 5"},
        "training": {
            "data": (f"{dmeta['images']} renders at 64x64 of {dmeta['geometries']} procedural shapes "
                     f"(tools/shapes, {len(dmeta['families'])} families), {dmeta['shadings_per_geometry']} "
                     f"colour/material/background draws each; tools/train/diffusion/render.py seed "
                     f"{dmeta['seed']}"),
            "colours": dmeta["colours"], "materials": dmeta["materials"], "backgrounds": dmeta["backgrounds"],
            "vae_steps": vdone["step"], "vae_args": vdone["args"],
            "vae_init": init_info(vdone),
            "unet_steps": udone["step"], "unet_args": udone["args"],
            "unet_ema": udone["args"]["ema"], "condition_dropout": udone["args"]["cond_drop"],
            "train_seconds": {"vae": train_seconds(os.path.join(a.run_dir, "vae_metrics.jsonl")),
                              "unet": train_seconds(os.path.join(a.run_dir, "unet_metrics.jsonl"))},
            "hardware": "1 CPU core (shared machine), Debian python3-torch, fp32",
        },
        "metrics": {"vae_val_psnr_db": round(float(vdone["val_psnr"]), 2),
                    "unet_val_eps_mse": udone.get("val_mse"),
                    "unet_val_eps_mse_by_t": last_metric(os.path.join(a.run_dir, "unet_metrics.jsonl"),
                                                         "val_mse_by_t")},
    }

    # Check: the exported tensors reproduce the training modules.
    with open(os.path.join(a.out, "model.json"), "w") as f:
        json.dump(card, f, indent=2)
    unet2, dec2, scale2 = S.load_exported(a.out)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 16, 16, generator=g)
    ctx = torch.randn(2, 77, ex["context_dim"], generator=g)
    with torch.no_grad():
        du = float((unet(x, torch.tensor([10.0, 900.0]), ctx) - unet2(x, torch.tensor([10.0, 900.0]), ctx)).abs().max())
        dd = float((dec(x, scale=raw_scale) - dec2(x, scale=scale2)).abs().max())
    print(f"export check: UNet max |diff| {du:.2e}, decoder max |diff| {dd:.2e}", flush=True)
    if du > 1e-4 or dd > 1e-4:
        raise SystemExit("exported weights do not reproduce the trained modules")

    imgs = S.generate(unet2, dec2, scale2, clip, tok, S.PROMPTS, seed=0)
    render.write_png(os.path.join(a.out, "samples.png"), render.grid(imgs, 4))
    rate, got, cimgs = colour_check(unet2, dec2, clip, tok)
    render.write_png(os.path.join(a.out, "colour_check.png"), render.grid(cimgs, 6))
    card["metrics"]["colour_match_rate_heuristic"] = round(rate, 3)
    card["metrics"]["colour_check"] = got
    card["samples"] = {"file": "samples.png", "prompts_row_major": S.PROMPTS,
                       "sampler": "Euler, 20 steps, CFG 5, seeds [0, i]"}
    card["status"] = ("demonstration model trained on one shared CPU core in about an hour (see "
                      "training.train_seconds), not a quality model: judge it by samples.png (prompts in "
                      f"samples.prompts_row_major); heuristic colour match {rate:.0%} on colour_check.png")
    with open(os.path.join(a.out, "model.json"), "w") as f:
        json.dump(card, f, indent=2)
    print(f"exported {n_unet:,} UNet + {n_vae:,} VAE decoder parameters -> {a.out} "
          f"(colour match {rate:.2f}) in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
