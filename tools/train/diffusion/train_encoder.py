#!/usr/bin/python3
"""Trains the tessera-tiny VAE encoder in SD's own layout against the shipped (frozen) decoder and UNet,
so that image-to-image and inpainting work on the embedded model.

Why a new encoder: the encoder the decoder was trained with (models.VaeEncoder, a lighter layout with
symmetric stride-2 padding and no final GroupNorm) lived only in a training checkpoint that is gone, and the
engine reads SD's layout (tools/tessera_ref/sd_vae.py `VaeEncoder`: ResnetBlocks, Downsample with the
(0, 1, 0, 1) pad, single-head middle attention, norm_out, conv_out, quant_conv). Everything shipped stays as
it is: the decoder, the UNet and the latent scale (UNet latents = 0.18215 * the encoder's z, the constant the
decoder already divides by).

What it learns from, per step (half a batch each):
- renders of the training set (render.py's cache): weighted L1 + MSE between the image and the frozen
  decoder's output for a posterior sample (object pixels weighted as train_vae.py does), plus a small KL;
- images the shipped model made itself: Euler 20 steps, CFG 5, the training captions, their final latents
  kept. The encoder must give those latents back from the 8-bit images (latent MSE): this pins the encoder
  to the latents the UNet was trained on, not merely to some latents the decoder renders well.

Outputs in --run-dir: samples.npz (the model's own images and latents, cached), encoder_ckpt.pt (resumable),
encoder_metrics.jsonl, encoder_done.json (metrics, args, git commit), reconstructions.png (rows: image,
round trip through encoder + decoder; renders then model samples). --export adds the tensors
`first_stage_model.encoder.*` and `first_stage_model.quant_conv.*` to --model-dir's model.safetensors
(every existing tensor unchanged) and a "vae_encoder" section to its model.json.

  /usr/bin/python3 tools/train/diffusion/train_encoder.py --run-dir DIR [--steps 2000] [--export]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models as M  # noqa: E402
import render  # noqa: E402
import sample as S  # noqa: E402
from train import run_record  # noqa: E402
from tessera_ref import sd_sampler, sd_vae, st_io  # noqa: E402

# The shipped encoder: 64 channels at 64x64 and 32x32, 128 at the latent's 16x16, one ResnetBlock per level.
ENCODER_CONFIG = sd_vae.VaeEncoderConfig(in_channels=3, z_channels=4, ch=64, ch_mult=[1, 1, 2],
                                         num_res_blocks=1, groups=32)
SCALE = sd_vae.SD_LATENT_SCALE
N_VAL = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--data", default=render.DATA_DIR)
    p.add_argument("--model-dir", default=S.EXPORT_DIR, help="the shipped diffusion model (read; --export writes)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--samples", type=int, default=1536, help="images made by the shipped model (latent targets)")
    p.add_argument("--latent-weight", type=float, default=1.0)
    p.add_argument("--kl-weight", type=float, default=2e-5)
    p.add_argument("--fg-weight", type=float, default=6.0)
    p.add_argument("--full-every", type=int, default=4, help="every n-th step uses whole 64x64 images")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--ckpt-minutes", type=float, default=3.0)
    p.add_argument("--export", action="store_true", help="after training, add the encoder to --model-dir")
    return p.parse_args(argv)


def to_float(u8):
    return u8.permute(0, 3, 1, 2).float() / 127.5 - 1.0


def to_u8(x):
    return x.clamp(-1, 1).add(1).mul(127.5).round().byte().permute(0, 2, 3, 1)


@torch.no_grad()
def make_samples(unet, dec, clip, tok, captions, n, seed, log, steps=20, cfg=5.0, batch=64):
    """n images the shipped model makes for random training captions: (uint8 [n,64,64,3], latents
    float32 [n,4,16,16], captions)."""
    rng = np.random.default_rng([seed, 11])
    caps = [captions[int(i)] for i in rng.integers(0, len(captions), n)]
    sched = sd_sampler.Schedule()
    sigmas = sched.normal(steps)
    uncond = M.encode_text(clip, tok, [""])
    images, latents = [], []
    t0 = time.time()
    for k in range(0, n, batch):
        part = caps[k:k + batch]
        b = len(part)
        ctx = torch.cat([uncond.expand(b, -1, -1), M.encode_text(clip, tok, part)])
        x = np.stack([np.random.default_rng([seed, 12, k + i]).standard_normal((4, 16, 16))
                      for i in range(b)]) * sigmas[0]

        def model(xin, t):
            xt = torch.from_numpy(np.asarray(xin, np.float32))
            eps = unet(torch.cat([xt, xt]), torch.full((2 * b,), float(t)), ctx)
            e_u, e_c = eps.double().chunk(2)
            return (e_u + cfg * (e_c - e_u)).numpy()

        z = sd_sampler.sample_euler(model, sched, x, sigmas)[-1].astype(np.float32)
        zt = torch.from_numpy(z)
        images.append(to_u8(dec(zt, scale=SCALE)).numpy())
        latents.append(z)
        log(f"model samples {k + b}/{n} ({time.time() - t0:.0f} s)")
    return np.concatenate(images), np.concatenate(latents), caps


def pixel_weights(x, fg_weight):
    border = torch.cat([x[..., :2], x[..., -2:]], dim=-1).median(dim=-1, keepdim=True).values
    fg = ((x - border).abs().amax(dim=1, keepdim=True) > 0.08).float()
    return 1.0 + fg_weight * fg


@torch.no_grad()
def evaluate(enc, dec, renders, s_images, s_latents):
    """Round-trip PSNR (mode of the posterior) on held-out renders and model samples, the latent error
    on the samples (RMS against latents of std ~1), and the encoded renders' latent statistics."""
    enc.eval()
    out = {}
    for name, imgs in (("render", renders), ("sample", s_images)):
        errs, lat = [], []
        for i in range(0, imgs.shape[0], 64):
            x = to_float(imgs[i:i + 64])
            z = enc(x)
            y = dec(z, scale=SCALE).clamp(-1, 1)
            errs.append(((y - x) / 2).pow(2).mean(dim=(1, 2, 3)))
            lat.append(z)
        mse = torch.cat(errs)
        out[f"{name}_psnr"] = round(float((-10 * torch.log10(mse.clamp_min(1e-10))).mean()), 3)
        lat = torch.cat(lat)
        if name == "sample":
            out["sample_latent_rms"] = round(float((lat - s_latents).pow(2).mean().sqrt()), 4)
        else:
            out["render_latent_mean"] = [round(float(v), 3) for v in lat.mean(dim=(0, 2, 3))]
            out["render_latent_std"] = [round(float(v), 3) for v in lat.std(dim=(0, 2, 3))]
    out["sample_latent_mean"] = [round(float(v), 3) for v in s_latents.mean(dim=(0, 2, 3))]
    out["sample_latent_std"] = [round(float(v), 3) for v in s_latents.std(dim=(0, 2, 3))]
    enc.train()
    return out


@torch.no_grad()
def reconstructions(enc, dec, renders, s_images, path):
    rows = []
    for imgs in (renders[:12], s_images[:12]):
        x = to_float(imgs)
        y = to_u8(dec(enc(x), scale=SCALE))
        rows += [imgs.numpy(), y.numpy()]
    render.write_png(path, render.grid(np.concatenate(rows), 12))


def export(enc, model_dir, done, log):
    path = os.path.join(model_dir, "model.safetensors")
    tensors, meta = st_io.load(path)
    prefix = sd_vae.VAE_PREFIX
    added = {prefix + k: v.detach().numpy().astype(np.float32) for k, v in enc.state_dict().items()}
    clash = sorted(k for k in added if k in tensors)
    if clash:
        log(f"replacing {len(clash)} encoder tensors already in {path}")
    tensors.update(added)
    tmp = path + ".tmp"
    st_io.save(tmp, tensors, metadata=meta)
    os.replace(tmp, path)
    card_path = os.path.join(model_dir, "model.json")
    with open(card_path) as f:
        card = json.load(f)
    c = ENCODER_CONFIG
    card["vae_encoder"] = {
        "layout": "SD 1.x encoder (first_stage_model.encoder.* + quant_conv), CompVis names",
        "in_channels": c.in_channels, "z_channels": c.z_channels, "ch": c.ch, "ch_mult": c.ch_mult,
        "num_res_blocks": c.num_res_blocks, "groups": c.groups,
        "parameters": sum(int(v.size) for v in added.values()),
        "latent_scale": SCALE,
        "training": {k: done[k] for k in ("steps", "train_seconds", "args", "git_commit") if k in done},
        "metrics": done["metrics"],
        "note": ("trained after the decoder and UNet, against both frozen: renders through the decoder "
                 "(reconstruction) and the model's own samples (their latents back from the 8-bit images); "
                 "tools/train/diffusion/train_encoder.py"),
    }
    with open(card_path + ".tmp", "w") as f:
        json.dump(card, f, indent=2)
        f.write("\n")
    os.replace(card_path + ".tmp", card_path)
    log(f"exported {len(added)} encoder tensors into {path}; card {card_path}")


def main(argv=None):
    a = parse_args(argv)
    git = run_record.git_state()
    M.common.set_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    logger = M.common.Logger(os.path.join(a.run_dir, "encoder_metrics.jsonl"))
    log = logger.log
    log(run_record.log_line(git))
    torch.manual_seed(a.seed)

    unet, dec, scale = S.load_exported(a.model_dir)
    if abs(scale - SCALE) > 1e-6:
        raise SystemExit(f"{a.model_dir}: latent_scale {scale}, expected SD's {SCALE}")
    for p_ in list(unet.parameters()) + list(dec.parameters()):
        p_.requires_grad_(False)
    images_np, captions, _ = render.load_dataset(a.data)
    n = images_np.shape[0]
    train_r = torch.from_numpy(np.ascontiguousarray(images_np[:n - N_VAL]))
    val_r = torch.from_numpy(np.ascontiguousarray(images_np[n - N_VAL:]))

    samples_path = os.path.join(a.run_dir, "samples.npz")
    if os.path.exists(samples_path):
        z = np.load(samples_path)
        s_img, s_lat = z["images"], z["latents"]
        log(f"model samples from {samples_path}: {s_img.shape[0]}")
    else:
        clip, tok, _, _ = M.load_text_encoder(os.path.dirname(os.path.abspath(a.model_dir)))
        s_img, s_lat, s_caps = make_samples(unet, dec, clip, tok, captions[:n - N_VAL], a.samples, a.seed, log)
        np.savez(samples_path + ".tmp.npz", images=s_img, latents=s_lat, captions=np.array(s_caps))
        os.replace(samples_path + ".tmp.npz", samples_path)
    s_img, s_lat = torch.from_numpy(s_img), torch.from_numpy(s_lat)
    ns_val = max(64, s_img.shape[0] // 8)
    s_train_img, s_train_lat = s_img[:-ns_val], s_lat[:-ns_val]
    s_val_img, s_val_lat = s_img[-ns_val:], s_lat[-ns_val:]

    enc = sd_vae.VaeEncoder(ENCODER_CONFIG)
    opt = torch.optim.AdamW(enc.parameters(), lr=a.lr, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed + 1)
    ckpt_path = os.path.join(a.run_dir, "encoder_ckpt.pt")
    step, train_seconds = 0, 0.0
    if os.path.exists(ckpt_path):
        st = torch.load(ckpt_path, map_location="cpu")
        enc.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        step, train_seconds = st["step"], st["train_seconds"]
        log(f"resumed from {ckpt_path} at step {step}")
    log(f"encoder {M.count_params(enc):,} parameters, config {vars(ENCODER_CONFIG)}; args {vars(a)}")

    def save():
        torch.save({"model": enc.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step,
                    "train_seconds": train_seconds}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    half = a.batch // 2
    t_ckpt = time.time()
    sums, cnt = {"rec": 0.0, "lat": 0.0, "kl": 0.0}, 0
    while step < a.steps:
        t0 = time.time()
        lr = M.common.cosine_lr(step, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        full = step % a.full_every == a.full_every - 1
        # Crops of 32x32 at multiples of the latent cell (4 px) on the other steps: 4x cheaper.
        oy, ox = (int(v) * 4 for v in torch.randint(0, 9, (2,), generator=gen))
        crop = (lambda t, f=1: t) if full else (lambda t, f=1: t[..., oy // f:(oy + 32) // f, ox // f:(ox + 32) // f])
        xf = to_float(train_r[torch.randint(train_r.shape[0], (half,), generator=gen)])
        x = crop(xf)
        mean, logvar = enc.moments(x)
        zr = mean + torch.randn(mean.shape, generator=gen) * torch.exp(0.5 * logvar)
        y = dec(SCALE * zr, scale=SCALE)
        w = crop(pixel_weights(xf, a.fg_weight))
        rec = (w * (y - x).abs()).mean() + (w * (y - x).pow(2)).mean()
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1.0 - logvar).mean()
        si = torch.randint(s_train_img.shape[0], (half,), generator=gen)
        ms, _ = enc.moments(crop(to_float(s_train_img[si])))
        lat = (SCALE * ms - crop(s_train_lat[si], 4)).pow(2).mean()
        loss = rec + a.latent_weight * lat + a.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(enc.parameters(), 1.0)
        opt.step()
        step += 1
        train_seconds += time.time() - t0
        sums["rec"] += float(rec)
        sums["lat"] += float(lat)
        sums["kl"] += float(kl)
        cnt += 1
        if step % 25 == 0:
            row = {"step": step, "lr": round(lr, 6), **{k: round(v / cnt, 5) for k, v in sums.items()},
                   "s_per_step": round(train_seconds / step, 3)}
            log(json.dumps(row))
            logger.metrics(**row)
            sums, cnt = {k: 0.0 for k in sums}, 0
        if step % a.eval_every == 0 or step == a.steps:
            ev = evaluate(enc, dec, val_r, s_val_img, s_val_lat)
            log(json.dumps({"step": step, "eval": ev}))
            logger.metrics(step=step, eval=ev)
        if time.time() - t_ckpt > a.ckpt_minutes * 60 or step == a.steps:
            save()
            t_ckpt = time.time()

    metrics = evaluate(enc, dec, val_r, s_val_img, s_val_lat)
    reconstructions(enc, dec, val_r, s_val_img, os.path.join(a.run_dir, "reconstructions.png"))
    done = {"steps": step, "train_seconds": round(train_seconds), "metrics": metrics, "args": vars(a),
            "config": vars(ENCODER_CONFIG), "model_samples": int(s_img.shape[0]),
            "git_commit": git["git_commit"], "git_dirty": git["git_dirty"]}
    with open(os.path.join(a.run_dir, "encoder_done.json"), "w") as f:
        json.dump(done, f, indent=2)
    log(f"done: {json.dumps(metrics)}")
    if a.export:
        export(enc, a.model_dir, done, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
