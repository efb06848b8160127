#!/usr/bin/python3
"""Stage 2 of the tessera-tiny diffusion model: a tiny SD 1.x UNet (tools/tessera_ref/sd_unet.py) over
the VAE latents of train_vae.py (4 x 16 x 16, times the latent scale of vae_done.json), conditioned by
cross-attention on the FROZEN tessera-tiny text encoder (context = its 77 x width last hidden state,
SD convention: EOS padding, no padding mask; width read from text_encoder/config.json).

Objective: epsilon prediction under SD's scaled-linear schedule (1000 steps, betas 0.00085..0.012),
t uniform, loss MSE weighted by min(SNR, --min-snr) / SNR (Min-SNR-gamma weighting: faster
convergence, still an epsilon model). --cond-drop of the captions (10 %) are replaced by the empty
prompt so classifier-free guidance works. --offset-noise S adds S x N(0,1) per image and channel to the
training noise (the held-out loss keeps plain noise): under this schedule the signal's per-channel mean
outlives the noise's at high t on 16x16 latents, so without it the UNet reads the colour off the starting
noise instead of the prompt (v3/v4); sampling is unchanged. AdamW, cosine LR with warm-up; an exponential moving average
of the weights (--ema) is what export.py ships. The contexts of every distinct caption are computed
once and cached beside the dataset (contexts_<fingerprint>.npy, float16), keyed by a fingerprint of the
text encoder weights (a replaced text encoder gets a new cache; the fingerprint is kept in the
checkpoint and a change is logged).

Every --eval-every steps: held-out loss (the last 512 images, fixed t and noise, EMA weights); every
--sample-every steps: a 4x4 sample sheet (sample.py prompts, Euler 20 steps, CFG 5) in the run dir.

--train-new-tokens: the text encoder's extension rows (tools/train/diffusion/extend_vocab.py: whole-word
tokens for the colour / material / background words, text_encoder/extension.json) are learned together
with the UNet (AdamW at --token-lr, no weight decay, their own EMA), every other text encoder weight stays
frozen, so the shape engine's text features do not move. Contexts are then computed in the loop (the
rows change), not cached. export.py writes the EMA rows into the text encoder.
--init-from CKPT starts the UNet (and its EMA) from another run's unet_ckpt.pt with a fresh optimizer and
schedule.

Resumable: unet_ckpt.pt (model + optimizer + EMA + RNG + step), unet_metrics.jsonl, unet.lock,
unet_done.json, like the other stages.

  /usr/bin/python3 tools/train/diffusion/train_unet.py [--threads 1] [--steps 4000] [--batch 32] [--budget-minutes 38]
"""

import argparse
import copy
import hashlib
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
from train import run_record  # noqa: E402  (tools/ is on sys.path once models is imported)
import sample as S  # noqa: E402
from tessera_ref import sd_unet  # noqa: E402

common = M.common
N_VAL = 512


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default=M.RUN_DIR)
    p.add_argument("--data", default=render.DATA_DIR)
    p.add_argument("--model-dir", default=M.MODEL_DIR, help="tessera-tiny folder (text_encoder, vocab)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=1800)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--model-channels", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--cond-drop", type=float, default=0.1)
    p.add_argument("--min-snr", type=float, default=5.0)
    p.add_argument("--ema", type=float, default=0.998)
    p.add_argument("--ckpt-minutes", type=float, default=4.0)
    p.add_argument("--eval-every", type=int, default=300)
    p.add_argument("--sample-every", type=int, default=600)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--init-from", default="", help="another run's unet_ckpt.pt to start the UNet from")
    p.add_argument("--train-new-tokens", action="store_true",
                   help="learn the text encoder's extension rows (extend_vocab.py) with the UNet")
    p.add_argument("--token-lr", type=float, default=5e-3)
    p.add_argument("--offset-noise", type=float, default=0.0,
                   help="offset noise: the training noise gets S x N(0,1) per image and channel added to every "
                        "pixel (sampling is unchanged), so x_t at high t no longer leaks the image's mean "
                        "colour and the UNet must take colour from the prompt (0 = plain SD training)")
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop (after a checkpoint) after this")
    p.add_argument("--budget-minutes", type=float, default=0.0,
                   help="size the run to this: after 40 steps the measured speed caps --steps (the cap is "
                        "kept in the checkpoint, so a resumed run keeps its schedule)")
    return p.parse_args(argv)


class TokenRows:
    """The learned extension rows of the text encoder's token embedding (rows >= base); contexts are the
    frozen encoder run with base rows + these rows."""

    NAME = "text_model.embeddings.token_embedding.weight"

    def __init__(self, clip, tok, model_dir, texts):
        path = os.path.join(model_dir, "text_encoder", "extension.json")
        if not os.path.exists(path):
            raise SystemExit(f"{path}: no vocabulary extension (run tools/train/diffusion/extend_vocab.py "
                             "first, or train without --train-new-tokens)")
        with open(path) as f:
            self.ext = json.load(f)
        self.base = int(self.ext["base_vocab_size"])
        self.clip = clip
        for p_ in clip.parameters():
            p_.requires_grad_(False)
        w = dict(clip.named_parameters())[self.NAME].detach()
        if w.shape[0] <= self.base:
            raise SystemExit(f"{model_dir}/text_encoder: {w.shape[0]} token rows, extension.json says the "
                             f"base vocabulary has {self.base}: nothing to learn")
        self.base_rows = w[:self.base].clone()
        import extend_vocab
        self.base_fingerprint = extend_vocab.base_fingerprint(clip.state_dict(), self.base)
        self.rows = torch.nn.Parameter(w[self.base:].clone())
        self.ema = w[self.base:].clone()
        self.ids, _ = tok.batch(texts, M.CONTEXT_LEN)
        # The differentiable copy of the forward must be the reference's forward.
        probe = torch.arange(min(8, len(texts)))
        with torch.no_grad():
            diff = float((self.contexts(self.rows, probe) - clip(self.ids[probe])).abs().max())
        if diff > 1e-5:
            raise SystemExit(f"TokenRows.contexts differs from ClipTextModel.forward by {diff}")

    def contexts(self, rows, sel):
        """ClipTextModel.forward (which runs under no_grad) with the token rows base + `rows`,
        differentiable in `rows`."""
        tm = self.clip.text_model
        ids = self.ids[sel]
        t = ids.shape[1]
        x = F.embedding(ids, torch.cat([self.base_rows, rows])) + \
            tm.embeddings.position_embedding(torch.arange(t))
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
        for layer in tm.encoder.layers:
            x = layer(x, mask)
        return tm.final_layer_norm(x)

    def install_ema(self):
        """Puts the EMA rows into the clip module (for the sample sheets)."""
        with torch.no_grad():
            dict(self.clip.named_parameters())[self.NAME][self.base:] = self.ema


def context_cache(a, captions, logger):
    """(contexts float16 tensor [U+1, 77, W] with row 0 = the empty prompt, caption -> row index [N],
    text config, fingerprint)."""
    clip, tok, hf, fp = M.load_text_encoder(a.model_dir)
    uniq = sorted(set(captions))
    key = hashlib.sha1((fp + "\n" + "\n".join(uniq)).encode()).hexdigest()[:12]
    path = os.path.join(a.data, f"contexts_{key}.npy")
    if os.path.exists(path):
        ctx = torch.from_numpy(np.load(path))
        logger.log(f"contexts of {len(uniq)} captions from {path}")
    else:
        t0 = time.time()
        ctx = M.encode_text(clip, tok, [""] + uniq).half()
        np.save(path + ".tmp.npy", ctx.numpy())
        os.replace(path + ".tmp.npy", path)
        logger.log(f"encoded {len(uniq)} distinct captions + the empty prompt in {time.time() - t0:.0f} s -> {path}")
    row = {c: i + 1 for i, c in enumerate(uniq)}
    return ctx, torch.tensor([row[c] for c in captions]), hf, fp, (clip, tok)


@torch.no_grad()
def val_loss(model, lat, cidx, ctx, acp, gen_seed=1234):
    model.eval()
    g = torch.Generator().manual_seed(gen_seed)
    tot, n = 0.0, 0
    buckets = {}
    for i in range(0, lat.shape[0], 128):
        x0 = lat[i:i + 128]
        b = x0.shape[0]
        t = torch.linspace(0, 999, b).round().long()[torch.randperm(b, generator=g)]
        eps = torch.randn(x0.shape, generator=g)
        a_ = acp[t].view(-1, 1, 1, 1)
        xt = a_.sqrt() * x0 + (1 - a_).sqrt() * eps
        err = (model(xt, t.float(), ctx[cidx[i:i + 128]].float()) - eps).pow(2).mean(dim=(1, 2, 3))
        tot += float(err.sum())
        n += b
        for tv, e in zip(t.tolist(), err.tolist()):
            k = "t<250" if tv < 250 else ("t<500" if tv < 500 else ("t<750" if tv < 750 else "t>=750"))
            buckets.setdefault(k, []).append(e)
    model.train()
    return tot / n, {k: round(float(np.mean(v)), 4) for k, v in sorted(buckets.items())}


def main(argv=None):
    a = parse_args(argv)
    git = run_record.git_state()   # the code this session runs: recorded in unet_done.json
    common.set_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    ckpt_path = os.path.join(a.run_dir, "unet_ckpt.pt")
    done_path = os.path.join(a.run_dir, "unet_done.json")
    logger = common.Logger(os.path.join(a.run_dir, "unet_metrics.jsonl"))
    lock = common.acquire_lock(os.path.join(a.run_dir, "unet.lock"), logger)  # noqa: F841 (held)
    if os.path.exists(done_path):
        common.finalize_checkpoint(a.run_dir, "unet")
        logger.log(f"UNet already trained ({done_path}); nothing to do")
        return 0
    logger.log(run_record.log_line(git))
    # A VAE (fine-tuning) run in progress in this run dir holds vae.lock: wait for its latents.
    vlock = common.acquire_lock(os.path.join(a.run_dir, "vae.lock"), logger)
    vlock.close()
    vdone_path = os.path.join(a.run_dir, "vae_done.json")
    if not os.path.exists(vdone_path):
        raise SystemExit(f"{vdone_path}: the VAE stage has not finished (run train_vae.py first)")
    with open(vdone_path) as f:
        vdone = json.load(f)
    scale = float(vdone["latent_scale"])
    _, captions, meta = render.load_dataset(a.data)
    lat = torch.from_numpy(np.load(os.path.join(a.data, "latents.npy"))).float() * scale
    if lat.shape[0] != len(captions):
        raise SystemExit(f"{a.data}/latents.npy has {lat.shape[0]} rows for {len(captions)} captions")
    if a.train_new_tokens:
        clip, tok, hf, fp = M.load_text_encoder(a.model_dir)
        uniq = sorted(set(captions))
        row_of = {c: i + 1 for i, c in enumerate(uniq)}
        cidx = torch.tensor([row_of[c] for c in captions])
        trows = TokenRows(clip, tok, a.model_dir, [""] + uniq)
        ctx = None
        logger.log(f"learning {trows.rows.shape[0]} extension token rows (base vocabulary {trows.base}) with "
                   f"the UNet; {len(uniq)} distinct captions encoded in the loop")
    else:
        ctx, cidx, hf, fp, (clip, tok) = context_cache(a, captions, logger)
        trows = None
    n = lat.shape[0]
    n_val = min(N_VAL, n // 10)
    n_train = n - n_val
    vae = M.KLVae()
    vae.load_state_dict(torch.load(os.path.join(a.run_dir, "vae_ckpt.pt"), map_location="cpu")["model"])
    decoder = vae.first_stage.eval()

    torch.manual_seed(a.seed)
    cfg = M.unet_config(hf["hidden_size"], a.model_channels)
    model = sd_unet.UNet(cfg)
    ema = copy.deepcopy(model).eval()
    for p_ in ema.parameters():
        p_.requires_grad_(False)
    opt = torch.optim.AdamW(common.param_groups(model, 0.01), lr=a.lr, betas=(0.9, 0.99))
    if trows is not None:
        opt.add_param_group({"params": [trows.rows], "weight_decay": 0.0, "lr_scale": a.token_lr / a.lr})
    gen = torch.Generator().manual_seed(a.seed + 1)
    step, extra = 0, {}
    if a.init_from and not os.path.exists(ckpt_path):
        src = torch.load(a.init_from, map_location="cpu")
        model.load_state_dict(src["model"])
        ema.load_state_dict(src["extra"]["ema"])
        logger.log(f"initialised the UNet and its EMA from {a.init_from} (step {src['step']}); "
                   f"new schedule of {a.steps} steps")
        extra["init_from"] = a.init_from
    if os.path.exists(ckpt_path):
        has_rows = "token_rows" in torch.load(ckpt_path, map_location="cpu")["extra"]
        if has_rows != (trows is not None):
            raise SystemExit(f"{ckpt_path}: written {'with' if has_rows else 'without'} "
                             f"--train-new-tokens; resume it the same way or use another --run-dir")
        step, extra = common.load_checkpoint(ckpt_path, model, opt, gen)
        ema.load_state_dict(extra["ema"])
        if trows is not None:
            if extra.get("token_base_fingerprint") != trows.base_fingerprint:
                raise SystemExit(f"{ckpt_path}: its token rows were learned against another text encoder "
                                 f"than {a.model_dir}/text_encoder's; use another --run-dir")
            opt.param_groups[-1]["lr_scale"] = a.token_lr / a.lr  # --token-lr of this invocation
            with torch.no_grad():
                trows.rows.copy_(extra["token_rows"])
            trows.ema = extra["token_rows_ema"].clone()
        logger.log(f"resumed from {ckpt_path} at step {step}")
        if extra.get("text_encoder_fingerprint") != fp:
            logger.log(f"WARNING: the text encoder changed since this checkpoint was written "
                       f"({extra.get('text_encoder_fingerprint')} -> {fp}); training continues on the new one")
    extra.update({"context_dim": cfg.context_dim, "model_channels": cfg.model_channels,
                  "text_encoder_fingerprint": fp, "latent_scale": scale})
    logger.log(f"UNet: {M.count_params(model):,} parameters; config {vars(cfg)}; {n_train} train / {n_val} "
               f"val latents {tuple(lat.shape[1:])}, latent scale {scale:.5f}; args {vars(a)}")
    acp = M.alphas_cumprod()
    snr = acp / (1 - acp)
    weight = torch.clamp(snr, max=a.min_snr) / snr

    if extra.get("planned_steps"):
        a.steps = int(extra["planned_steps"])
    t_start = t_ckpt = t_log = time.time()
    t_plan, s_plan = time.time(), step
    s_log, loss_sum, cnt = step, 0.0, 0
    while step < a.steps:
        lr = common.cosine_lr(step, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        idx = torch.randint(n_train, (a.batch,), generator=gen)
        x0 = lat[idx]
        t = torch.randint(0, 1000, (a.batch,), generator=gen)
        eps = torch.randn(x0.shape, generator=gen)
        if a.offset_noise > 0:
            eps = eps + a.offset_noise * torch.randn(x0.shape[0], x0.shape[1], 1, 1, generator=gen)
        a_ = acp[t].view(-1, 1, 1, 1)
        xt = a_.sqrt() * x0 + (1 - a_).sqrt() * eps
        rows = cidx[idx].clone()
        rows[torch.rand(a.batch, generator=gen) < a.cond_drop] = 0  # the empty prompt
        cond = trows.contexts(trows.rows, rows) if trows is not None else ctx[rows].float()
        pred = model(xt, t.float(), cond)
        loss = ((pred - eps).pow(2).mean(dim=(1, 2, 3)) * weight[t]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()) + ([trows.rows] if trows is not None else []), 1.0)
        opt.step()
        step += 1
        if a.budget_minutes > 0 and not extra.get("planned_steps") and step - s_plan == 40:
            rate = (step - s_plan) / max(1e-6, time.time() - t_plan)
            planned = max(step + 1, min(a.steps, int(rate * 60 * a.budget_minutes)))
            extra["planned_steps"] = a.steps = planned
            logger.log(f"step {step}: {rate:.3f} steps/s measured -> {planned} steps fit "
                       f"--budget-minutes {a.budget_minutes}")
        decay = min(a.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(decay).add_(pm.detach(), alpha=1 - decay)
            if trows is not None:
                trows.ema.mul_(decay).add_(trows.rows.detach(), alpha=1 - decay)
        loss_sum += float(loss)
        cnt += 1
        if step % a.log_every == 0:
            now = time.time()
            rate = (step - s_log) / max(1e-6, now - t_log)
            logger.log(f"step {step} loss {loss_sum / cnt:.4f} lr {lr:.2e} {rate:.3f} steps/s")
            logger.metrics(step=step, loss=loss_sum / cnt, lr=lr, steps_per_s=rate)
            t_log, s_log, loss_sum, cnt = now, step, 0.0, 0
        if step % a.eval_every == 0 or step == a.steps:
            if trows is not None:
                with torch.no_grad():
                    vctx = trows.contexts(trows.ema, cidx[n_train:])
                vl, by_t = val_loss(ema, lat[n_train:], torch.arange(n - n_train), vctx, acp)
            else:
                vl, by_t = val_loss(ema, lat[n_train:], cidx[n_train:], ctx, acp)
            logger.log(f"step {step} EVAL val eps-MSE (EMA) {vl:.4f} by t {by_t}")
            logger.metrics(step=step, val_mse=vl, val_mse_by_t=by_t)
            extra["val_mse"] = vl
        if step % a.sample_every == 0 or step == a.steps:
            ts = time.time()
            if trows is not None:
                trows.install_ema()
            imgs = S.generate(ema, decoder, scale, clip, tok, S.PROMPTS, seed=0)
            out = os.path.join(a.run_dir, f"samples_step{step:05d}.png")
            render.write_png(out, render.grid(imgs, 4))
            logger.log(f"step {step}: samples -> {out} ({time.time() - ts:.0f} s)")
        out_of_time = a.max_minutes > 0 and time.time() - t_start > 60 * a.max_minutes
        if time.time() - t_ckpt > 60 * a.ckpt_minutes or step == a.steps or out_of_time:
            extra["ema"] = ema.state_dict()
            if trows is not None:
                extra["token_rows"] = trows.rows.detach().clone()
                extra["token_rows_ema"] = trows.ema.clone()
                extra["token_base"] = trows.base
                extra["token_base_fingerprint"] = trows.base_fingerprint
            common.save_checkpoint(ckpt_path, model, opt, step, gen, extra)
            t_ckpt = time.time()
            logger.log(f"step {step}: checkpoint {ckpt_path}")
        if out_of_time:
            logger.log(f"--max-minutes {a.max_minutes} reached; stopping (resume by running again)")
            return 0
    with open(done_path, "w") as f:
        json.dump({"step": step, "val_mse": extra.get("val_mse"), "train_images": n_train,
                   "distinct_captions": int(cidx.max()), "text_encoder_fingerprint": fp,
                   "seconds_this_session": round(time.time() - t_start), **git, "args": vars(a)}, f, indent=2)
    common.finalize_checkpoint(a.run_dir, "unet")
    logger.log(f"done: {step} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
