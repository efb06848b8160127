#!/usr/bin/python3
"""Trains a depth ControlNet (tools/tessera_ref/sd_controlnet.py, the CompVis / ControlNet v1.1 layout) for
the shipped tessera-tiny diffusion model; the UNet, VAE and text encoder stay frozen and unchanged.

The net: the UNet's encoder half (time_embed, input_blocks, middle_block) initialised as a copy of the shipped
UNet's weights, a hint encoder for the VAE's factor 4 (3 -> 16, 16, 32 (stride 2), 32, 64 (stride 2) -> 32
= model channels; the engine infers the strides from the shapes: a conv that changes the channel count and
is neither the first nor the last has stride 2, every other stride 1), zero convs (one per input block)
and middle_block_out; those and the hint encoder's last conv start at zero (`zero_init`), so step 0 is
exactly the shipped model.

Depth hints (render.py `--depth`, the convention the engine renders at inference): per pixel z = view-space
depth of the first hit (distance along the camera's forward axis, not along the ray); over the object's
pixels v = z_min / z (nearest point 1, farther darker: MiDaS-like normalised inverse depth), background 0;
uint8 round(v * 255) in R, G and B; the network gets hint = uint8 / 255 in [0, 1], 3 channels, NCHW.

Training (the ControlNet paper's recipe, the UNet's own objective): epsilon-prediction MSE of
controlled_unet(frozen UNet, x_t, t, ctx, controlnet(x_t, hint, t, ctx)), SD's scaled-linear schedule,
t uniform, Min-SNR-5 weighting and offset noise 0.15 as train_unet.py trained the shipped UNet (v5),
--cond-drop (50 %) of the captions replaced by the empty prompt so the net learns from the hint alone;
AdamW, cosine LR with warm-up, no EMA. Data: one shading per geometry (shading g % 3 of geometry g) of
render.py's cache, the last --n-eval geometries held out; latents from the shipped SD-layout VAE encoder
(posterior mean x 0.18215) and text contexts are computed once and cached in the depth folder.

Evaluation (held-out geometries, their captions, the shipped sampler: Euler 20 steps, CFG 5, noise seeds
[seed, i]): (a) no control, (b) ControlNet at scale 1 (in both CFG passes, same hint), (c) (b) with the
empty prompt. Silhouette IoU of each generated image's object mask (pixels whose RGB differs from the
background colour by more than --iou-threshold, max-abs in [0, 1]; background colour per row = the median
of the top 2-pixel band blended linearly into the bottom band's, because the sky-blue gradient defeats a
single border median) against the depth mask (v > 0); the same judge on the training renders is reported
as its ceiling, and the plain judge (one median of the whole 2-pixel border, --plain-iou-threshold) too. During training:
held-out eps-MSE with and without control (fixed t and noise). contact_sheet.png: rows of [depth hint |
no control | control | control + empty prompt | the training render].

Outputs in --run-dir: controlnet_ckpt.pt (resumable), controlnet_metrics.jsonl, controlnet_done.json
(metrics, args, git commit), contact_sheet.png. --export writes --model-dir/controlnet-depth.safetensors
(every key `control_model.` + the ControlNet's state_dict key, float32, no UNet tensors) and a
"controlnet_depth" section in its model.json (every other field kept).

  /usr/bin/python3 tools/train/diffusion/train_controlnet.py --run-dir DIR [--steps 5000]
      [--budget-minutes 40] [--export] [--eval-only]
"""

import argparse
import hashlib
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
import train_encoder as TE  # noqa: E402
from train import run_record  # noqa: E402
from tessera_ref import sd_controlnet, sd_sampler, sd_unet, sd_vae, st_io  # noqa: E402

common = M.common
HINT = sd_controlnet.HintConfig(in_channels=3, channels=[16, 16, 32, 32, 64], strides=[1, 1, 2, 1, 2])
EXPORT_NAME = "controlnet-depth.safetensors"
SCALE = sd_vae.SD_LATENT_SCALE


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--data", default=render.DATA_DIR)
    p.add_argument("--depth", default=render.DEPTH_DIR, help="render.py --depth's folder (caches go there too)")
    p.add_argument("--model-dir", default=S.EXPORT_DIR, help="the shipped diffusion model (read; --export writes)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--cond-drop", type=float, default=0.5)
    p.add_argument("--min-snr", type=float, default=5.0)
    p.add_argument("--offset-noise", type=float, default=0.15)
    p.add_argument("--n-eval", type=int, default=128, help="held-out geometries (the last ones)")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--ckpt-minutes", type=float, default=3.0)
    p.add_argument("--budget-minutes", type=float, default=0.0,
                   help="after 40 steps the measured speed caps --steps (kept in the checkpoint)")
    p.add_argument("--eval-samples", type=int, default=0, help="generate for the first N held-out (0 = all)")
    p.add_argument("--iou-threshold", type=float, default=0.12, help="the row-wise background judge's")
    p.add_argument("--plain-iou-threshold", type=float, default=0.15, help="the plain border-median judge's")
    p.add_argument("--sample-steps", type=int, default=20)
    p.add_argument("--cfg", type=float, default=5.0)
    p.add_argument("--eval-only", action="store_true", help="skip training (use the checkpoint as it is)")
    p.add_argument("--export", action="store_true", help="after training, write the ControlNet into --model-dir")
    return p.parse_args(argv)


# ---- data ----------------------------------------------------------------------------------------------

def split(n_geometries, spg, n_eval):
    """Image rows: one shading per geometry (g % spg); (train rows, held-out rows)."""
    rows = np.arange(n_geometries) * spg + np.arange(n_geometries) % spg
    return rows[:n_geometries - n_eval], rows[n_geometries - n_eval:]


def unet_sha256(model_dir):
    """sha256 over the frozen UNet's tensors in model.safetensors (sorted names, then float32 bytes): the
    UNet a ControlNet was trained against (recorded in the card; the test checks it is still that one)."""
    weights, _ = M.st_io_load(os.path.join(model_dir, "model.safetensors"))
    h = hashlib.sha256()
    for k in sorted(weights):
        if k.startswith(sd_unet.UNET_PREFIX):
            h.update(k.encode())
            h.update(np.ascontiguousarray(weights[k], np.float32).tobytes())
    return h.hexdigest()


def load_encoder(model_dir):
    weights, _ = M.st_io_load(os.path.join(model_dir, "model.safetensors"))
    p = sd_vae.VAE_PREFIX
    sd = {k[len(p):]: torch.from_numpy(np.array(w, np.float32)) for k, w in weights.items()
          if k.startswith((p + "encoder.", p + "quant_conv."))}
    enc = sd_vae.VaeEncoder(TE.ENCODER_CONFIG).eval()
    enc.load_state_dict(sd, strict=True)
    h = hashlib.sha1()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].numpy().tobytes())
    return enc, h.hexdigest()[:12]


@torch.no_grad()
def latents_cache(a, images, rows, log):
    """float32 [len(rows), 4, 16, 16]: the shipped encoder's posterior mean x 0.18215 (the UNet's latents)."""
    enc, fp = load_encoder(a.model_dir)
    key = hashlib.sha1((fp + "," + ",".join(map(str, rows.tolist()))).encode()).hexdigest()[:12]
    path = os.path.join(a.depth, f"cn_latents_{key}.npy")
    if os.path.exists(path):
        log(f"latents of {len(rows)} images from {path}")
        return torch.from_numpy(np.load(path))
    t0, out = time.time(), []
    for i in range(0, len(rows), 128):
        x = TE.to_float(torch.from_numpy(np.ascontiguousarray(images[rows[i:i + 128]])))
        out.append(enc(x))
        if (i // 128) % 10 == 0:
            log(f"encoding latents {i + x.shape[0]}/{len(rows)} ({time.time() - t0:.0f} s)")
    lat = torch.cat(out)
    np.save(path + ".tmp.npy", lat.numpy())
    os.replace(path + ".tmp.npy", path)
    log(f"encoded {len(rows)} latents in {time.time() - t0:.0f} s -> {path}")
    return lat


@torch.no_grad()
def context_cache(a, caps, log):
    """(float16 [U+1, 77, W] contexts with row 0 = the empty prompt, row of each caption, clip, tok)."""
    clip, tok, _, fp = M.load_text_encoder(os.path.dirname(os.path.abspath(a.model_dir)))
    uniq = sorted(set(caps))
    key = hashlib.sha1((fp + "\n" + "\n".join(uniq)).encode()).hexdigest()[:12]
    path = os.path.join(a.depth, f"cn_contexts_{key}.npy")
    if os.path.exists(path):
        ctx = torch.from_numpy(np.load(path))
        log(f"contexts of {len(uniq)} captions from {path}")
    else:
        t0 = time.time()
        ctx = M.encode_text(clip, tok, [""] + uniq).half()
        np.save(path + ".tmp.npy", ctx.numpy())
        os.replace(path + ".tmp.npy", path)
        log(f"encoded {len(uniq)} captions + the empty prompt in {time.time() - t0:.0f} s -> {path}")
    row = {c: i + 1 for i, c in enumerate(uniq)}
    return ctx, torch.tensor([row[c] for c in caps]), clip, tok


def hint_of(depth_u8):
    """uint8 [B, 64, 64] depth maps -> float [B, 3, 64, 64] in [0, 1] (the engine's input)."""
    return torch.from_numpy(np.ascontiguousarray(depth_u8)).float().div(255.0)[:, None].expand(-1, 3, -1, -1)


def hint_strides_by_rule(in_channels, shapes):
    """The engine's rule: conv k (of n) changing the channel count, 0 < k < n - 1, has stride 2."""
    cin, out = in_channels, []
    for k, cout in enumerate(shapes):
        out.append(2 if (cout != cin and 0 < k < len(shapes) - 1) else 1)
        cin = cout
    return out


def make_controlnet(unet):
    cn = sd_controlnet.ControlNet(unet.cfg, HINT)
    got = hint_strides_by_rule(HINT.in_channels, HINT.channels + [unet.cfg.model_channels])
    if got != HINT.strides + [1]:
        raise SystemExit(f"hint strides {HINT.strides} do not follow the engine's rule ({got})")
    missing, unexpected = cn.load_state_dict(unet.state_dict(), strict=False)
    if unexpected and any(not k.startswith(("output_blocks.", "out.")) for k in unexpected):
        raise SystemExit(f"unexpected UNet tensors {unexpected[:4]}")
    if any(not k.startswith(("input_hint_block.", "zero_convs.", "middle_block_out.")) for k in missing):
        raise SystemExit(f"ControlNet tensors not in the UNet: {missing[:4]}")
    return cn.zero_init()


# ---- evaluation ----------------------------------------------------------------------------------------

@torch.no_grad()
def val_loss(unet, cn, lat, hint, ctx, acp, gen_seed=1234):
    """Held-out eps-MSE (fixed t, noise) without control and with it, with the captions and the empty prompt."""
    cn.eval()
    g = torch.Generator().manual_seed(gen_seed)
    b = lat.shape[0]
    t = torch.linspace(0, 999, b).round().long()[torch.randperm(b, generator=g)]
    eps = torch.randn(lat.shape, generator=g)
    a_ = acp[t].view(-1, 1, 1, 1)
    xt = a_.sqrt() * lat + (1 - a_).sqrt() * eps
    out = {}
    for name, c in (("caption", ctx["caption"]), ("empty", ctx["empty"])):
        tf = t.float()
        plain = (unet(xt, tf, c) - eps).pow(2).mean()
        ctl = (sd_controlnet.controlled_unet(unet, xt, tf, c, cn(xt, hint, tf, c)) - eps).pow(2).mean()
        out[f"{name}_no_control"] = round(float(plain), 5)
        out[f"{name}_control"] = round(float(ctl), 5)
    cn.train()
    return out


@torch.no_grad()
def generate(unet, cn, dec, cond, uncond, hint, seed, steps, cfg, batch=64):
    """Euler + CFG as sample.generate; cn None = no control, else the ControlNet at scale 1 in both passes."""
    sched = sd_sampler.Schedule()
    sigmas = sched.normal(steps)
    n = cond.shape[0]
    out = []
    for s0 in range(0, n, batch):
        b = min(batch, n - s0)
        ctx = torch.cat([uncond.expand(b, -1, -1), cond[s0:s0 + b]])
        h2 = None if hint is None else torch.cat([hint[s0:s0 + b]] * 2)
        x = np.stack([np.random.default_rng([seed, s0 + i]).standard_normal((4, 16, 16)) for i in range(b)])
        x = x * sigmas[0]

        def model(xin, t):
            xt = torch.from_numpy(np.asarray(xin, np.float32))
            x2, tt = torch.cat([xt, xt]), torch.full((2 * b,), float(t))
            if cn is None:
                eps = unet(x2, tt, ctx)
            else:
                eps = sd_controlnet.controlled_unet(unet, x2, tt, ctx, cn(x2, h2, tt, ctx))
            e_u, e_c = eps.double().chunk(2)
            return (e_u + cfg * (e_c - e_u)).numpy()

        z = sd_sampler.sample_euler(model, sched, x, sigmas)[-1].astype(np.float32)
        out.append(TE.to_u8(dec(torch.from_numpy(z), scale=SCALE)).numpy())
    return np.concatenate(out)


def object_mask(img_u8, threshold, rows=True):
    """bool [N, H, W]: pixels whose RGB differs from the background colour by > threshold (max-abs, [0, 1]).
    rows=False: the background colour is the median of the image's 2-pixel border. rows=True (the card's
    primary judge): per row, the median of the top 2-pixel band blended linearly into the median of the
    bottom band (the same for flat backgrounds; the sky-blue gradient changes by 0.45 top to bottom, which
    a single border median calls object: the plain judge scores the renders themselves 0.25 on it)."""
    x = img_u8.astype(np.float32) / 255.0
    n, h = x.shape[:2]
    if rows:
        top = np.median(x[:, :2].reshape(n, -1, 3), axis=1)
        bottom = np.median(x[:, -2:].reshape(n, -1, 3), axis=1)
        r = ((np.arange(h) - 0.5) / (h - 2.0)).clip(0, 1)[None, :, None, None]
        ref = top[:, None, None] * (1 - r) + bottom[:, None, None] * r
    else:
        border = np.concatenate([x[:, :2].reshape(n, -1, 3), x[:, -2:].reshape(n, -1, 3),
                                 x[:, 2:-2, :2].reshape(n, -1, 3), x[:, 2:-2, -2:].reshape(n, -1, 3)], axis=1)
        ref = np.median(border, axis=1)[:, None, None]
    return np.abs(x - ref).max(axis=-1) > threshold


def ious(img_u8, depth_u8, threshold, rows=True):
    m, d = object_mask(img_u8, threshold, rows), depth_u8 > 0
    inter = (m & d).sum(axis=(1, 2))
    union = (m | d).sum(axis=(1, 2))
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def evaluate(a, unet, cn, dec, clip, tok, ev_caps, ev_depth, ev_renders, log):
    cn.eval()
    t0 = time.time()
    cond = M.encode_text(clip, tok, list(ev_caps))
    uncond = M.encode_text(clip, tok, [""])
    hint = hint_of(ev_depth)
    img = {
        "no_control": generate(unet, None, dec, cond, uncond, None, a.seed, a.sample_steps, a.cfg),
        "control": generate(unet, cn, dec, cond, uncond, hint, a.seed, a.sample_steps, a.cfg),
        "control_empty_prompt": generate(unet, cn, dec, uncond.expand_as(cond), uncond, hint, a.seed,
                                         a.sample_steps, a.cfg),
    }
    res = {"samples": int(len(ev_caps)), "iou_threshold": a.iou_threshold,
           "sampler": f"Euler {a.sample_steps} steps, CFG {a.cfg}, noise seeds [{a.seed}, i]"}
    img["training_renders"] = ev_renders
    for k, v in img.items():
        res[f"iou_{k}"] = round(float(ious(v, ev_depth, a.iou_threshold).mean()), 4)
    res["plain_border_judge"] = {"iou_threshold": a.plain_iou_threshold}
    for k, v in img.items():
        res["plain_border_judge"][f"iou_{k}"] = round(float(ious(v, ev_depth, a.plain_iou_threshold, False).mean()), 4)
    del img["training_renders"]
    res["eval_seconds"] = round(time.time() - t0)
    log(f"evaluation: {json.dumps(res)}")
    rows = []
    for i in range(min(8, len(ev_caps))):
        d = np.repeat(ev_depth[i][..., None], 3, axis=-1)
        rows += [d, img["no_control"][i], img["control"][i], img["control_empty_prompt"][i], ev_renders[i]]
    path = os.path.join(a.run_dir, "contact_sheet.png")
    render.write_png(path, render.grid(np.stack(rows), 5))
    with open(os.path.join(a.run_dir, "contact_sheet.txt"), "w") as f:
        f.write("columns: depth hint | no control | ControlNet 1.0 | ControlNet 1.0 + empty prompt | training render\n")
        for i in range(min(8, len(ev_caps))):
            f.write(f"row {i}: {ev_caps[i]}\n")
    cn.train()
    return res


# ---- export --------------------------------------------------------------------------------------------

def export(cn, a, done, log):
    tensors = {sd_controlnet.CONTROL_PREFIX + k: v.detach().numpy().astype(np.float32)
               for k, v in cn.state_dict().items()}
    path = os.path.join(a.model_dir, EXPORT_NAME)
    st_io.save(path + ".tmp", tensors, metadata={"format": "pt", "layout": "ControlNet v1.1 (control_model.*)",
                                                 "hint": "depth"})
    os.replace(path + ".tmp", path)
    card_path = os.path.join(a.model_dir, "model.json")
    with open(card_path) as f:
        card = json.load(f)
    ev = done["evaluation"]
    card["controlnet_depth"] = {
        "file": EXPORT_NAME,
        "layout": "ControlNet v1.1 single file: control_model.{time_embed, input_blocks, middle_block} (the UNet's "
                  "encoder half), control_model.input_hint_block.{0,2,...}, control_model.zero_convs.K.0, "
                  "control_model.middle_block_out.0; float32; the UNet is not in it",
        "parameters": int(sum(v.size for v in tensors.values())),
        "hint_channels": [HINT.in_channels] + HINT.channels + [cn.cfg.model_channels],
        "hint_strides": HINT.strides + [1],
        "hint_stride_rule": "a hint conv that changes the channel count and is neither the first nor the last has "
                            "stride 2, all others 1",
        "hint_input": "3 x 64 x 64, uint8 / 255 in [0, 1] (no [-1, 1] normalisation), the same value in R, G, B",
        "depth_convention": "z = view-space depth of the first hit (along the camera's forward axis, not the ray); "
                            "over the object's pixels v = z_min / z (nearest 1, farther darker), background 0; "
                            "stored round(v * 255) (tools/train/diffusion/render.py depth_map)",
        "unet_sha256": unet_sha256(a.model_dir),
        "unet_sha256_note": "sha256 over the model.diffusion_model.* tensors of model.safetensors (sorted names, "
                            "each name then its float32 bytes): the frozen UNet this ControlNet was trained for",
        "training": {"run": os.path.basename(os.path.normpath(a.run_dir)), "steps": done["steps"],
                     "train_seconds": done["train_seconds"], "git_commit": done["git_commit"],
                     "recipe": f"epsilon MSE through the frozen UNet, Min-SNR-{a.min_snr:g}, offset noise "
                               f"{a.offset_noise:g}, {int(100 * a.cond_drop)} % empty prompts, AdamW lr {a.lr:g} "
                               f"cosine, batch {a.batch}, {done['train_images']} renders (one per geometry); "
                               "tools/train/diffusion/train_controlnet.py",
                     "final_loss": done.get("final_loss")},
        "evaluation": {
            "held_out": ev["samples"], "sampler": ev["sampler"], "scale": 1.0,
            "silhouette_iou_no_control": ev["iou_no_control"],
            "silhouette_iou_control": ev["iou_control"],
            "silhouette_iou_control_empty_prompt": ev["iou_control_empty_prompt"],
            "silhouette_iou_training_renders": ev["iou_training_renders"],
            "iou_threshold": ev["iou_threshold"],
            "method": "object mask = pixels whose RGB differs from the background colour by more than the "
                      "threshold (max-abs, [0, 1]) vs. the depth mask (v > 0); background colour per row = the "
                      "median of the top 2-pixel band blended linearly into the bottom band's (the sky-blue "
                      "gradient background defeats one border median); training_renders = the same judge on the "
                      "renders themselves (its ceiling)",
            "plain_border_judge": ev["plain_border_judge"],
        },
    }
    with open(card_path + ".tmp", "w") as f:
        json.dump(card, f, indent=2)
        f.write("\n")
    os.replace(card_path + ".tmp", card_path)
    log(f"exported {len(tensors)} tensors ({card['controlnet_depth']['parameters']:,} parameters) -> {path}; "
        f"card {card_path}")


# ---- main ----------------------------------------------------------------------------------------------

def main(argv=None):
    a = parse_args(argv)
    git = run_record.git_state()
    common.set_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    logger = common.Logger(os.path.join(a.run_dir, "controlnet_metrics.jsonl"))
    log = logger.log
    log(run_record.log_line(git))
    torch.manual_seed(a.seed)

    unet, dec, scale = S.load_exported(a.model_dir)
    if abs(scale - SCALE) > 1e-6:
        raise SystemExit(f"{a.model_dir}: latent_scale {scale}, expected SD's {SCALE}")
    for p_ in list(unet.parameters()) + list(dec.parameters()):
        p_.requires_grad_(False)
    images, captions, meta = render.load_dataset(a.data)
    depth = render.load_depth(a.depth)
    if depth.shape[0] != images.shape[0]:
        raise SystemExit(f"{a.depth}: {depth.shape[0]} depth maps for {images.shape[0]} images")
    tr_rows, ev_rows = split(meta["geometries"], meta["shadings_per_geometry"], a.n_eval)
    lat = latents_cache(a, images, np.concatenate([tr_rows, ev_rows]), log)
    tr_lat, ev_lat = lat[:len(tr_rows)], lat[len(tr_rows):]
    tr_depth = torch.from_numpy(np.ascontiguousarray(depth[tr_rows]))
    ev_depth = np.ascontiguousarray(depth[ev_rows])
    ev_caps = [captions[int(r)] for r in ev_rows]
    ctx, cidx, clip, tok = context_cache(a, [captions[int(r)] for r in tr_rows] + ev_caps, log)
    tr_cidx = cidx[:len(tr_rows)]
    ev_ctx = {"caption": ctx[cidx[len(tr_rows):]].float(), "empty": ctx[:1].float().expand(len(ev_rows), -1, -1)}
    ev_hint = hint_of(ev_depth)

    cn = make_controlnet(unet)
    opt = torch.optim.AdamW(cn.parameters(), lr=a.lr, betas=(0.9, 0.999), weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed + 1)
    ckpt_path = os.path.join(a.run_dir, "controlnet_ckpt.pt")
    step, extra = 0, {"train_seconds": 0.0}
    if os.path.exists(ckpt_path):
        step, extra = common.load_checkpoint(ckpt_path, cn, opt, gen)
        log(f"resumed from {ckpt_path} at step {step}")
    if extra.get("planned_steps"):
        a.steps = int(extra["planned_steps"])
    log(f"ControlNet {M.count_params(cn):,} parameters (hint {HINT}); {len(tr_rows)} train / {len(ev_rows)} "
        f"held-out images; args {vars(a)}")
    acp = M.alphas_cumprod()
    snr = acp / (1 - acp)
    weight = torch.clamp(snr, max=a.min_snr) / snr

    def save():
        common.save_checkpoint(ckpt_path, cn, opt, step, gen, extra)

    if step == 0 and not a.eval_only:
        v = val_loss(unet, cn, ev_lat, ev_hint, ev_ctx, acp)
        log(f"step 0 EVAL held-out eps-MSE {json.dumps(v)}")
        logger.metrics(step=0, val=v)
    t_ckpt = t_log = time.time()
    t_plan, s_plan, s_log = time.time(), step, step
    loss_sum, cnt, last_loss = 0.0, 0, extra.get("final_loss")
    while step < a.steps and not a.eval_only:
        t0 = time.time()
        lr = common.cosine_lr(step, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(len(tr_rows), (a.batch,), generator=gen)
        x0 = tr_lat[idx]
        hint = tr_depth[idx].float().div(255.0)[:, None].expand(-1, 3, -1, -1)
        t = torch.randint(0, 1000, (a.batch,), generator=gen)
        eps = torch.randn(x0.shape, generator=gen)
        if a.offset_noise > 0:
            eps = eps + a.offset_noise * torch.randn(x0.shape[0], x0.shape[1], 1, 1, generator=gen)
        a_ = acp[t].view(-1, 1, 1, 1)
        xt = a_.sqrt() * x0 + (1 - a_).sqrt() * eps
        rows = tr_cidx[idx].clone()
        rows[torch.rand(a.batch, generator=gen) < a.cond_drop] = 0  # the empty prompt
        c = ctx[rows].float()
        tf = t.float()
        pred = sd_controlnet.controlled_unet(unet, xt, tf, c, cn(xt, hint, tf, c))
        loss = ((pred - eps).pow(2).mean(dim=(1, 2, 3)) * weight[t]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(cn.parameters(), 1.0)
        opt.step()
        step += 1
        extra["train_seconds"] += time.time() - t0
        if a.budget_minutes > 0 and not extra.get("planned_steps") and step - s_plan == 40:
            rate = (step - s_plan) / max(1e-6, time.time() - t_plan)
            planned = max(step + 1, min(a.steps, int(rate * 60 * a.budget_minutes)))
            extra["planned_steps"] = a.steps = planned
            log(f"step {step}: {rate:.3f} steps/s measured -> {planned} steps fit --budget-minutes {a.budget_minutes}")
        loss_sum += float(loss)
        cnt += 1
        if step % a.log_every == 0 or step == a.steps:
            now = time.time()
            rate = (step - s_log) / max(1e-6, now - t_log)
            last_loss = extra["final_loss"] = round(loss_sum / cnt, 5)
            log(f"step {step} loss {last_loss:.4f} lr {lr:.2e} {rate:.3f} steps/s")
            logger.metrics(step=step, loss=last_loss, lr=lr, steps_per_s=rate)
            t_log, s_log, loss_sum, cnt = now, step, 0.0, 0
        if step % a.eval_every == 0 or step == a.steps:
            v = val_loss(unet, cn, ev_lat, ev_hint, ev_ctx, acp)
            log(f"step {step} EVAL held-out eps-MSE {json.dumps(v)}")
            logger.metrics(step=step, val=v)
            extra["val"] = v
        if time.time() - t_ckpt > 60 * a.ckpt_minutes or step == a.steps:
            save()
            t_ckpt = time.time()
            log(f"step {step}: checkpoint {ckpt_path}")

    k = a.eval_samples or len(ev_rows)
    ev_renders = np.ascontiguousarray(images[ev_rows[:k]])
    res = evaluate(a, unet, cn, dec, clip, tok, ev_caps[:k], ev_depth[:k], ev_renders, log)
    logger.metrics(step=step, evaluation=res)
    done = {"steps": step, "train_seconds": round(extra["train_seconds"]), "final_loss": last_loss,
            "val_eps_mse": extra.get("val"), "evaluation": res, "train_images": int(len(tr_rows)),
            "held_out_images": int(len(ev_rows)), "hint": {"channels": HINT.channels, "strides": HINT.strides},
            "parameters": M.count_params(cn), "args": vars(a),
            "git_commit": git["git_commit"], "git_dirty": git["git_dirty"]}
    with open(os.path.join(a.run_dir, "controlnet_done.json"), "w") as f:
        json.dump(done, f, indent=2)
    log(f"done: {step} steps")
    if a.export:
        export(cn, a, done, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
