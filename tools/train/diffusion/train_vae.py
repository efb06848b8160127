#!/usr/bin/python3
"""Stage 1 of the tessera-tiny diffusion model: a tiny KL-VAE, 64x64 RGB <-> 4 x 16 x 16 latents.

Decoder = tools/tessera_ref/sd_vae.py (post_quant_conv + decoder) at models.VAE_CONFIG (levels of 64 (full
resolution), 32, 64 channels, one ResnetBlock per level, middle attention at the latent resolution); encoder =
models.VaeEncoder (training only). Loss: L1 + MSE on pixels in [-1, 1], weighted 1 + --fg-weight on
object pixels (see pixel_weights), + kl_weight * KL(q(z|x) || N(0,1)) (means over elements), the decoder
fed a posterior sample. Steps alternate between 32x32 random crops (batch --batch; the network is
convolutional apart from the middle attention) and full 64x64 images (every --full-every-th step, batch
--batch // 4, so the middle attention also trains at the size it runs at). --init-from starts a
fine-tuning run from another checkpoint's weights.
--decoder-only (with --init-from) fine-tunes the decoder alone: the encoder stays frozen, so the latents
(latents.npy, encoded by the --init-from run) and the latent scale stay exactly what the UNet was trained
on, and a better decoder drops into a trained diffusion model without retraining the UNet. Such a run
does not re-encode: its vae_done.json carries the init run's latent statistics.
The last 512 images (a tenth of a small set) are held out (val PSNR every --eval-every steps).

When --steps are done, every image is encoded (posterior mean) into latents.npy (float16 [N,4,16,16],
unscaled) beside the dataset, and the latent scale 1 / std(latents) is written to vae_done.json: the
UNet trains on scale * latents (SD's 0.18215 plays the same role).

Resumable: --run-dir holds vae_ckpt.pt (model + optimizer + RNG + step, every --ckpt-minutes),
vae_metrics.jsonl, vae.lock and at the end vae_done.json; running again continues or exits at once.

  /usr/bin/python3 tools/train/diffusion/train_vae.py [--threads 1] [--steps 2500] [--budget-minutes 18]
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models as M  # noqa: E402
import render  # noqa: E402
from train import run_record  # noqa: E402  (tools/ is on sys.path once models is imported)

common = M.common
N_VAL = 512


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default=M.RUN_DIR)
    p.add_argument("--data", default=render.DATA_DIR)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1400)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--crop", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--kl-weight", type=float, default=2e-5)
    p.add_argument("--fg-weight", type=float, default=4.0, help="extra loss weight on object pixels")
    p.add_argument("--full-every", type=int, default=2, help="every n-th step uses full 64x64 images")
    p.add_argument("--init-from", default="",
                   help="start a new run (own schedule and optimizer) from another run's vae_ckpt.pt")
    p.add_argument("--decoder-only", action="store_true",
                   help="with --init-from: train the decoder only (encoder frozen, latents unchanged)")
    p.add_argument("--ckpt-minutes", type=float, default=3.0)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop (after a checkpoint) after this")
    p.add_argument("--budget-minutes", type=float, default=0.0,
                   help="size the run to this: after 40 steps the measured speed caps --steps (the cap is "
                        "kept in the checkpoint, so a resumed run keeps its schedule)")
    a = p.parse_args(argv)
    if a.decoder_only and not a.init_from:
        p.error("--decoder-only needs --init-from (the run whose encoder produced latents.npy)")
    return a


def pixel_weights(x, fg_weight):
    """[B,1,H,W] loss weights 1 + fg_weight on the object: pixels farther than 0.08 (of the [-1, 1]
    range) from their row's background, estimated as the median of the two leftmost and two rightmost
    pixels of the row (backgrounds are flat or vertical gradients). Objects cover a small part of the
    frame; unweighted, the VAE learned the backgrounds and washed out the object colours."""
    border = torch.cat([x[..., :2], x[..., -2:]], dim=-1).median(dim=-1, keepdim=True).values
    fg = ((x - border).abs().amax(dim=1, keepdim=True) > 0.08).float()
    return 1.0 + fg_weight * fg


def to_float(u8):
    """uint8 [B,H,W,3] tensor -> float [B,3,H,W] in [-1, 1]."""
    return u8.permute(0, 3, 1, 2).float() / 127.5 - 1.0


@torch.no_grad()
def val_psnr(vae, images):
    vae.eval()
    errs = []
    for i in range(0, images.shape[0], 64):
        x = to_float(images[i:i + 64])
        mean, _ = vae.encoder(x)
        y = vae.decode_raw(mean).clamp(-1, 1)
        errs.append(((y - x) / 2).pow(2).mean(dim=(1, 2, 3)))
    vae.train()
    mse = torch.cat(errs)
    return float((-10 * torch.log10(mse.clamp_min(1e-10))).mean())


@torch.no_grad()
def encode_all(vae, images, log):
    vae.eval()
    out = []
    t0 = time.time()
    for i in range(0, images.shape[0], 128):
        mean, _ = vae.encoder(to_float(torch.from_numpy(np.ascontiguousarray(images[i:i + 128]))))
        out.append(mean.half())
    lat = torch.cat(out)
    log(f"encoded {lat.shape[0]} images in {time.time() - t0:.0f} s")
    return lat


def main(argv=None):
    a = parse_args(argv)
    git = run_record.git_state()   # the code this session runs: recorded in vae_done.json
    common.set_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    ckpt_path = os.path.join(a.run_dir, "vae_ckpt.pt")
    done_path = os.path.join(a.run_dir, "vae_done.json")
    logger = common.Logger(os.path.join(a.run_dir, "vae_metrics.jsonl"))
    lock = common.acquire_lock(os.path.join(a.run_dir, "vae.lock"), logger)  # noqa: F841 (held)
    lat_path = os.path.join(a.data, "latents.npy")
    if os.path.exists(done_path) and os.path.exists(lat_path):
        common.finalize_checkpoint(a.run_dir, "vae")
        logger.log(f"VAE already trained ({done_path}); nothing to do")
        return 0
    logger.log(run_record.log_line(git))

    images_np, _, meta = render.load_dataset(a.data)
    images = torch.from_numpy(np.ascontiguousarray(images_np))
    n = images.shape[0]
    n_val = min(N_VAL, n // 10)
    train, val = images[:n - n_val], images[n - n_val:]
    logger.log(f"data: {train.shape[0]} train / {val.shape[0]} val images from {a.data}")

    torch.manual_seed(a.seed)
    vae = M.KLVae()
    init_done = None
    if a.decoder_only:
        init_done_path = os.path.join(os.path.dirname(os.path.abspath(a.init_from)), "vae_done.json")
        if not os.path.exists(init_done_path) or not os.path.exists(lat_path):
            raise SystemExit(f"--decoder-only: {init_done_path} and {lat_path} must exist (the latents the "
                             "frozen encoder made; train or copy that run first)")
        with open(init_done_path) as f:
            init_done = json.load(f)
        for p_ in vae.encoder.parameters():
            p_.requires_grad_(False)
    trainable = [p_ for p_ in vae.parameters() if p_.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=a.lr, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed + 1)
    step, extra = 0, {}
    if a.init_from and not os.path.exists(ckpt_path):
        vae.load_state_dict(torch.load(a.init_from, map_location="cpu")["model"])
        logger.log(f"initialised from {a.init_from}; new schedule of {a.steps} steps")
    if os.path.exists(ckpt_path):
        step, extra = common.load_checkpoint(ckpt_path, vae, opt, gen)
        logger.log(f"resumed from {ckpt_path} at step {step}")
    logger.log(f"VAE: encoder {M.count_params(vae.encoder):,} + decoder {M.count_params(vae.first_stage):,} "
               f"parameters; config {vars(M.VAE_CONFIG)}; args {vars(a)}")

    if extra.get("planned_steps"):
        a.steps = int(extra["planned_steps"])
    t_start = t_ckpt = t_log = time.time()
    t_plan, s_plan = time.time(), step
    s_log, sums, cnt = step, {"l1": 0.0, "mse": 0.0, "kl": 0.0}, 0
    while step < a.steps:
        lr = common.cosine_lr(step, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        if step % a.full_every == a.full_every - 1:
            idx = torch.randint(train.shape[0], (max(1, a.batch // 4),), generator=gen)
            x = to_float(train[idx])
            w = pixel_weights(x, a.fg_weight)
        else:
            idx = torch.randint(train.shape[0], (a.batch,), generator=gen)
            oy, ox = (int(v) * 4 for v in torch.randint(0, (64 - a.crop) // 4 + 1, (2,), generator=gen))
            full = to_float(train[idx])
            x = full[:, :, oy:oy + a.crop, ox:ox + a.crop]
            w = pixel_weights(full, a.fg_weight)[:, :, oy:oy + a.crop, ox:ox + a.crop]
        with torch.set_grad_enabled(not a.decoder_only):
            mean, logvar = vae.encoder(x)
        z = mean + torch.randn(mean.shape, generator=gen) * torch.exp(0.5 * logvar)
        y = vae.decode_raw(z)
        l1 = (w * (y - x).abs()).mean()
        mse = (w * (y - x).pow(2)).mean()
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1.0 - logvar).mean()
        loss = l1 + mse + a.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        step += 1
        if a.budget_minutes > 0 and not extra.get("planned_steps") and step - s_plan == 40:
            rate = (step - s_plan) / max(1e-6, time.time() - t_plan)
            planned = max(step + 1, min(a.steps, int(rate * 60 * a.budget_minutes)))
            extra["planned_steps"] = a.steps = planned
            logger.log(f"step {step}: {rate:.3f} steps/s measured -> {planned} steps fit "
                       f"--budget-minutes {a.budget_minutes}")
        sums["l1"] += float(l1)
        sums["mse"] += float(mse)
        sums["kl"] += float(kl)
        cnt += 1
        if step % a.log_every == 0:
            now = time.time()
            rate = (step - s_log) / max(1e-6, now - t_log)
            avg = {k: v / cnt for k, v in sums.items()}
            logger.log(f"step {step} l1 {avg['l1']:.4f} mse {avg['mse']:.5f} kl {avg['kl']:.2f} lr {lr:.2e} "
                       f"{rate:.2f} steps/s")
            logger.metrics(step=step, lr=lr, steps_per_s=rate, **avg)
            t_log, s_log, sums, cnt = now, step, {k: 0.0 for k in sums}, 0
        if step % a.eval_every == 0 or step == a.steps:
            psnr = val_psnr(vae, val)
            logger.log(f"step {step} EVAL val PSNR {psnr:.2f} dB")
            logger.metrics(step=step, val_psnr=psnr)
            extra["val_psnr"] = psnr
        out_of_time = a.max_minutes > 0 and time.time() - t_start > 60 * a.max_minutes
        if time.time() - t_ckpt > 60 * a.ckpt_minutes or step == a.steps or out_of_time:
            common.save_checkpoint(ckpt_path, vae, opt, step, gen, extra)
            t_ckpt = time.time()
            logger.log(f"step {step}: checkpoint {ckpt_path}")
        if out_of_time:
            logger.log(f"--max-minutes {a.max_minutes} reached; stopping (resume by running again)")
            return 0

    psnr = val_psnr(vae, val)
    if a.decoder_only:  # the frozen encoder's latents stay; so do their statistics
        stats = {k: init_done[k] for k in ("latent_mean", "latent_std", "latent_std_per_channel",
                                           "latent_scale")}
        stats["encoder_from"] = a.init_from
        std, scale, per_channel = stats["latent_std"], stats["latent_scale"], stats["latent_std_per_channel"]
    else:
        lat = encode_all(vae, images_np, logger.log)
        flat = lat.float()
        std = float(flat.std())
        scale = 1.0 / std
        per_channel = [round(float(v), 4) for v in flat.std(dim=(0, 2, 3))]
        np.save(lat_path + ".tmp.npy", lat.numpy())
        os.replace(lat_path + ".tmp.npy", lat_path)
        stats = {"latent_mean": float(flat.mean()), "latent_std": std, "latent_std_per_channel": per_channel,
                 "latent_scale": scale}
    with open(done_path, "w") as f:
        json.dump({"step": step, **stats, "val_psnr": psnr, "images": int(images_np.shape[0]),
                   "data_seed": meta["seed"], **git, "args": vars(a)}, f, indent=2)
    # A side-by-side sheet (original above, reconstruction below) of 16 held-out images.
    with torch.no_grad():
        x = to_float(val[:16])
        y = vae.decode_raw(vae.encoder(x)[0]).clamp(-1, 1)
        pics = torch.cat([x, y]).permute(0, 2, 3, 1).add(1).mul(127.5).round().byte().numpy()
    render.write_png(os.path.join(a.run_dir, "vae_reconstructions.png"), render.grid(pics, 16))
    common.finalize_checkpoint(a.run_dir, "vae")
    logger.log(f"done: {step} steps, val PSNR {psnr:.2f} dB, latent std {std:.4f} -> scale {scale:.5f} "
               f"(per channel std {per_channel}); latents -> {lat_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
