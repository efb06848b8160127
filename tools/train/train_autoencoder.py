#!/usr/bin/python3
"""Stage 1 of tessera-tiny: trains the shape tokenizer (OneDAutoEncoder-compatible autoencoder).

Encoder over surface points + normals with FPS latent queries (see common.py), spherical VQ bottleneck
(straight-through, commitment loss, k-means initialisation at the end of a codebook-free warm-up, dead-code
restarts), latent transformer decoder and occupancy head trained with BCE on occupancy samples (half near
the surface, half uniform: the dataset's surface-weighted queries). Token-prefix robustness: for a
fraction of the samples a random-length tail of the latent sequence is replaced by the reserved fill
code (id num_codes - 1), with short prefixes favoured (log-uniform length).

Resumable: the run directory holds ae_ckpt.pt (model + optimizer + RNG states + step, rewritten every
--ckpt-minutes), ae_metrics.jsonl and, once --steps are done, ae_done.json. Running the script again
continues from the checkpoint; a finished run exits at once.

  /usr/bin/python3 tools/train/train_autoencoder.py [--threads 1] [--steps 6000] [--max-minutes M]

The v2 recipe (issue 38, tools/train/README.md "tessera-tiny v2 recipe"): --encoder-queries lattice
--num-freqs 64 --fourier-max 96 --online-occupancy --consistency 0.5 (tools/train/records/tessera-tiny-v2-pilot/).
The defaults are the phase 1-13 recipe, so older start scripts replay as they ran.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common, run_record  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default=common.RUN_DIR)
    p.add_argument("--data", default=common.DATA_DIR)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=6000, help="total optimizer steps (cosine schedule length)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--n-points", type=int, default=512, help="encoder surface points per shape")
    p.add_argument("--n-query", type=int, default=512, help="occupancy samples per shape per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=200, help="LR warm-up steps")
    p.add_argument("--vq-start", type=int, default=2500, help="steps without the codebook (warm-up)")
    p.add_argument("--tail-prob", type=float, default=0.3, help="fraction of samples with a fill tail")
    p.add_argument("--fourier-std", type=float, default=4.0, help="init std of the Fourier frequencies")
    p.add_argument("--num-freqs", type=int, default=32,
                   help="Fourier frequencies per axis (embedder.weight [3, N]; the engine reads N from that "
                        "shape). 32 until phase 13; the v2 recipe: 64. A resume or --init-from takes the "
                        "checkpoint's own")
    p.add_argument("--fourier-max", type=float, default=0.0,
                   help="> 0: start the Fourier frequencies log-spaced from --fourier-min to this (rad per "
                        "unit; random signs) instead of N(0, --fourier-std); v2: 96 (wavelength 0.065, two "
                        "voxels of the 65^3 mesh lattice)")
    p.add_argument("--fourier-min", type=float, default=1.0)
    p.add_argument("--encoder-queries", choices=common.ENCODER_QUERIES, default=None,
                   help="latent queries of the encoder (common.TrainShapeTokenizer): fps (phases 1-13, the "
                        "default for new runs), lattice (v2: a fixed coarse-to-fine lattice scaled to the "
                        "input's bounds) or learned (Cube 3D's); --init-from / resume: the checkpoint's")
    p.add_argument("--online-occupancy", action="store_true",
                   help="v2: draw the occupancy samples afresh at every step from the shapes' SDFs "
                        "(train/occupancy.py: uniform + thin surface band + edges and rims) instead of the "
                        "dataset's fixed occ_points")
    p.add_argument("--occ-mix", default="0.3,0.45,0.25",
                   help="--online-occupancy fractions uniform,band,edge (shapes without edges: band)")
    p.add_argument("--band-sigmas", default="0.003,0.01,0.03", help="--online-occupancy surface band sigmas")
    p.add_argument("--edge-sigmas", default="0.004,0.015", help="--online-occupancy edge band sigmas")
    p.add_argument("--edge-weight", type=float, default=2.0,
                   help="--online-occupancy: BCE weight of the edge samples (the others weigh 1)")
    p.add_argument("--tie-qk-init", type=int, default=0, help="1: encoder cross-attn c_k = c_q at init")
    p.add_argument("--commit", type=float, default=0.25)
    p.add_argument("--ckpt-minutes", type=float, default=5.0)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop (after a checkpoint) after this")
    p.add_argument("--init-from", default="",
                   help="start a new run from the weights (codebook included, VQ on) of another run's "
                        "ae_ckpt.pt: a fine-tuning phase with its own schedule, optimizer and run dir")
    p.add_argument("--family-weights", default="",
                   help="sampling weight per family, 'name=w,...' (default 1), or 'auto': "
                        "1 + 2 * (1 - IoU) from the last evaluation in the --init-from run's metrics")
    p.add_argument("--train-decoder-only", action="store_true",
                   help="fine-tune only what turns codes into occupancy (bottleneck c_out, decoder, "
                        "occupancy head): the encoder, the shared Fourier embedder and the codebook stay "
                        "bit for bit, so every shape keeps its token ids and a GPT trained on them "
                        "(tokens.npz of the --init-from run) stays valid; needs --init-from")
    p.add_argument("--code-noise", type=float, default=0.0,
                   help="robustness to wrong codes (a GPT's mistakes): for --code-noise-prob of the samples "
                        "each non-tail position is replaced by a uniformly random code with a probability "
                        "drawn from [0, CODE_NOISE); the occupancy target stays the true shape. Needs the "
                        "codebook (VQ on). 0 = off (and no extra random draws: older runs replay exactly)")
    p.add_argument("--code-noise-prob", type=float, default=0.5)
    p.add_argument("--consistency", type=float, default=0.0,
                   help="weight of a code-stability loss: each step also encodes a second, disjoint sample "
                        "of --n-points of the same shapes and adds CONSISTENCY x MSE between the two "
                        "pre-quantization latent sequences, so that a shape's codes depend less on its point "
                        "sample (tools/train/code_stability.py: 25 %% of the positions agree without it). "
                        "Needs 2 x --n-points surface points per shape; not with --train-decoder-only")
    a = p.parse_args(argv)
    if a.consistency < 0:
        p.error(f"--consistency {a.consistency} must be >= 0")
    if a.consistency > 0 and a.train_decoder_only:
        p.error("--consistency trains the encoder; --train-decoder-only freezes it")
    if not 0.0 <= a.code_noise <= 1.0 or not 0.0 <= a.code_noise_prob <= 1.0:
        p.error(f"--code-noise {a.code_noise} and --code-noise-prob {a.code_noise_prob} must be in [0, 1]")
    return a


# Parameters that decide which code a shape gets, or what a code id means to the GPT (its wte rows are
# shape_proj(codebook)): frozen by --train-decoder-only.
ENCODING_PREFIXES = ("encoder.", "embedder.", "bottleneck.block.codebook", "bottleneck.block.c_in",
                     "bottleneck.block.norm", "bottleneck.block.cb_", "bottleneck.block.c_x")


def freeze_encoding_(model):
    """requires_grad False on the encoding side (ENCODING_PREFIXES); returns the frozen names."""
    names = []
    for name, prm in model.named_parameters():
        if name.startswith(ENCODING_PREFIXES):
            prm.requires_grad_(False)
            names.append(name)
    return names


def check_encoding_unchanged(model, kept):
    for name, prm in model.named_parameters():
        if name in kept and not torch.equal(prm.detach(), kept[name]):
            raise RuntimeError(f"--train-decoder-only: {name} changed; the token ids would no longer match")


class ValSet:
    """A fixed held-out subset (2 shapes per family) with ground-truth grids from the SDFs."""

    def __init__(self, val, per_family=2, res=32, seed=1):
        from shapes.families import make_shape
        from shapes.dataset import SPLITS
        self.res = res
        pick, gts, fams = [], [], []
        names = val["family_names"]
        for fi, fam in enumerate(names):
            rows = np.nonzero(val["family_ids"] == fi)[0][:per_family]
            for r in rows:
                rng = np.random.default_rng([int(val["manifest"]["seed"]), SPLITS["val"], fi,
                                             int(val["indices"][r])])
                shape = make_shape(fam, rng)
                gts.append(common.sdf_grid(shape.sdf, res))
                pick.append(int(r))
                fams.append(fam)
        self.rows, self.gts, self.fams = pick, gts, fams


def family_weights(a, names):
    """Per-family sampling weights from --family-weights (see its help)."""
    w = {n: 1.0 for n in names}
    spec = a.family_weights.strip()
    if spec == "auto":
        if not a.init_from:
            raise SystemExit("--family-weights auto needs --init-from (it reads that run's last IoUs)")
        metrics = os.path.join(os.path.dirname(os.path.abspath(a.init_from)), "ae_metrics.jsonl")
        last = None
        with open(metrics) as f:
            for line in f:
                rec = json.loads(line)
                if "val_iou_family" in rec:
                    last = rec["val_iou_family"]
        if last is None:
            raise SystemExit(f"{metrics}: no evaluation with per-family IoU to weight by")
        for n in names:
            w[n] = round(1.0 + 2.0 * (1.0 - float(last.get(n, 0.5))), 3)
    elif spec:
        for item in spec.split(","):
            name, _, val = item.partition("=")
            if name.strip() not in w:
                raise SystemExit(f"--family-weights: unknown family '{name.strip()}' (known: {names})")
            w[name.strip()] = float(val)
    return w


def _floats(text):
    return tuple(float(v) for v in text.split(",") if v.strip())


def keep_lengths(b, n, prob, gen):
    """Per-sample kept prefix length: n for (1-prob) of samples, else log-uniform in [1, n]."""
    u = torch.rand(b, generator=gen)
    k = torch.exp(torch.rand(b, generator=gen) * math.log(n)).floor().long().clamp(1, n)
    return torch.where(u < prob, k, torch.full_like(k, n))


@torch.no_grad()
def evaluate(model, val, vs, n_points, quantize, prefixes=(64, 16)):
    """Grid IoU of reconstructions (full and prefix decodes) on the fixed val subset; before the
    codebook exists (quantize False) the continuous projections are decoded."""
    model.eval()
    pts = torch.from_numpy(val["surface_points"][vs.rows, :n_points])
    nrm = torch.from_numpy(val["surface_normals"][vs.rows, :n_points])
    ids = model.encode_ids(pts, nrm)
    agree = None
    if quantize and val["surface_points"].shape[1] >= 2 * n_points:
        # code stability (as tools/train/code_stability.py, on fewer shapes and points): the share of
        # positions whose code is the same from a second, disjoint point sample of the same shape
        ids_b = model.encode_ids(torch.from_numpy(val["surface_points"][vs.rows, n_points:2 * n_points]),
                                 torch.from_numpy(val["surface_normals"][vs.rows, n_points:2 * n_points]))
        agree = float((ids == ids_b).float().mean())
    out = {}
    for k in prefixes:
        lat = model.reconstruct_latents(pts, nrm, k, quantize=quantize)
        ious = [common.iou(common.occupancy_grid_from_latents(model, lat[i:i + 1], vs.res), vs.gts[i])
                for i in range(len(vs.rows))]
        out[k] = ious
    model.train()
    fam_iou = {}
    for f, v in zip(vs.fams, out[prefixes[0]]):
        fam_iou.setdefault(f, []).append(v)
    return ({k: float(np.mean(v)) for k, v in out.items()},
            {f: round(float(np.mean(v)), 3) for f, v in fam_iou.items()},
            int(torch.unique(ids).numel()), agree)


def main(argv=None):
    a = parse_args(argv)
    git = run_record.git_state()   # the code this session runs: recorded in ae_done.json
    common.set_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    ckpt_path = os.path.join(a.run_dir, "ae_ckpt.pt")
    done_path = os.path.join(a.run_dir, "ae_done.json")
    logger = common.Logger(os.path.join(a.run_dir, "ae_metrics.jsonl"))
    lock = common.acquire_lock(os.path.join(a.run_dir, "ae.lock"), logger)  # noqa: F841 (held)
    if os.path.exists(done_path):
        common.finalize_checkpoint(a.run_dir, "ae")
        logger.log(f"autoencoder already trained ({done_path}); nothing to do")
        return 0
    logger.log(run_record.log_line(git))

    train = common.load_split(os.path.join(a.data, "train"))
    val = common.load_split(os.path.join(a.data, "val"))
    sp = torch.from_numpy(train["surface_points"])
    sn = torch.from_numpy(train["surface_normals"])
    op = torch.from_numpy(train["occ_points"])
    ol = torch.from_numpy(train["occ_labels"].astype(np.float32))
    n_train = sp.shape[0]
    if a.consistency > 0 and 2 * a.n_points > sp.shape[1]:
        raise SystemExit(f"--consistency needs two disjoint samples of --n-points {a.n_points}: {a.data} has "
                         f"{sp.shape[1]} surface points per shape")
    vs = ValSet(val)
    logger.log(f"data: {n_train} train shapes, {len(vs.rows)} val shapes for in-training IoU "
               f"({len(train['family_names'])} families)")

    torch.manual_seed(a.seed)
    init = torch.load(a.init_from, map_location="cpu") if a.init_from else None
    # The architecture of a resumed run or of an --init-from start is the checkpoint's (tensor shapes
    # and recorded query mode); a new run takes the arguments.
    own = torch.load(ckpt_path, map_location="cpu") if os.path.exists(ckpt_path) else None
    src = own if own is not None else init
    if src is not None:
        cfg = common.shape_config_of_state(src["model"])
        queries = common.encoder_queries_of(src.get("extra"))
        if a.encoder_queries and a.encoder_queries != queries:
            raise SystemExit(f"--encoder-queries {a.encoder_queries}: the checkpoint's encoder uses {queries}")
    else:
        cfg = common.tiny_shape_config(a.num_freqs)
        queries = a.encoder_queries or "fps"
    model = common.TrainShapeTokenizer(cfg, seed=a.seed, fourier_std=a.fourier_std, queries=queries,
                                       fourier_min=a.fourier_min, fourier_max=a.fourier_max)
    if a.tie_qk_init:
        model.tie_encoder_qk_()
    kept = {}
    if a.train_decoder_only:
        if init is None or not (init.get("extra") or {}).get("vq_on"):
            raise SystemExit("--train-decoder-only needs --init-from a run whose codebook is on")
        # Frozen before the optimizer exists, so AdamW never sees (or decays) them; the reference for
        # the bit-for-bit check is the run we started from, also when resuming our own run.
        kept = {name: init["model"][name].clone() for name in freeze_encoding_(model)}
    opt = torch.optim.AdamW(common.param_groups(model, 0.01), lr=a.lr, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(a.seed + 1)
    step, extra = 0, {"vq_on": False}
    if init is not None and not os.path.exists(ckpt_path):
        model.load_state_dict(init["model"])
        extra = dict(init.get("extra") or {})
        extra["vq_on"] = bool(extra.get("vq_on", False))
        logger.log(f"initialised from {a.init_from} (its step {init.get('step')}, VQ "
                   f"{'on' if extra['vq_on'] else 'off'}); new schedule of {a.steps} steps")
    if own is not None:
        step, extra = common.load_checkpoint(ckpt_path, model, opt, gen, state=own)
        logger.log(f"resumed from {ckpt_path} at step {step}")
        del own
    extra["encoder_queries"] = queries
    if kept:
        check_encoding_unchanged(model, kept)
        logger.log(f"decoder-only fine-tune: {sum(v.numel() for v in kept.values()):,} encoding "
                   f"parameters frozen ({len(kept)} tensors)")
    n_params = sum(p.numel() for p in model.parameters())
    logger.log(f"shape tokenizer: {n_params:,} parameters; config {common.C.as_dict(cfg)}; args {vars(a)}")

    occ = None
    if a.online_occupancy:
        from train.occupancy import OnlineOccupancy
        occ = OnlineOccupancy(train, "train", seed=a.seed, mix=_floats(a.occ_mix), band_sigmas=_floats(a.band_sigmas),
                              edge_sigmas=_floats(a.edge_sigmas), edge_weight=a.edge_weight, logger=logger)
    logger.log(f"encoder queries: {queries}; Fourier frequencies per axis: {cfg.num_freqs}, |w| "
               f"{float(model.embedder.weight.abs().min()):.2f}..{float(model.embedder.weight.abs().max()):.2f}")

    fam_w = family_weights(a, train["family_names"])
    logger.log(f"family sampling weights {fam_w}")
    sample_w = torch.tensor([fam_w[train["family_names"][int(f)]] for f in train["family_ids"]],
                            dtype=torch.double)

    t_start = t_ckpt = t_log = time.time()
    s_log = step
    acc_sum = loss_sum = 0.0
    n_sum = 0
    while step < a.steps:
        if not extra["vq_on"] and step >= a.vq_start:
            # end of the codebook-free warm-up: k-means the encoder outputs into the codebook
            model.eval()
            with torch.no_grad():
                zs = []
                for _ in range(8):
                    idx = torch.randint(n_train, (32,), generator=gen)
                    zs.append(model.project(model.encode_latents(sp[idx, :a.n_points],
                                                                 sn[idx, :a.n_points])))
                model.kmeans_init_codebook(torch.cat(zs), gen)
            model.train()
            extra["vq_on"] = True
            logger.log(f"step {step}: codebook initialised by k-means; VQ on")
        lr = common.cosine_lr(step, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.multinomial(sample_w, a.batch, replacement=True, generator=gen)
        perm = torch.rand(a.batch, sp.shape[1], generator=gen).argsort(dim=1)
        ps = perm[:, :a.n_points]
        sp_b, sn_b = sp[idx], sn[idx]

        def take(x, cols):
            return torch.gather(x, 1, cols[..., None].expand(-1, -1, 3))
        pts, nrm = take(sp_b, ps), take(sn_b, ps)
        qw = None
        if occ is not None:   # fresh points every step, labelled by the SDFs
            qp, ql, qw = occ.batch(idx.tolist(), a.n_query, step)
        else:                 # the dataset's fixed samples (phases 1-13; the same draws as then)
            pq = torch.rand(a.batch, op.shape[1], generator=gen).argsort(dim=1)[:, :a.n_query]
            qp = torch.gather(op[idx], 1, pq[..., None].expand(-1, -1, 3))
            ql = torch.gather(ol[idx], 1, pq)
        keep = keep_lengths(a.batch, cfg.num_latents, a.tail_prob, gen)
        noise = None
        if a.code_noise > 0 and extra["vq_on"]:
            rate = torch.rand(a.batch, generator=gen) * a.code_noise
            rate = torch.where(torch.rand(a.batch, generator=gen) < a.code_noise_prob, rate, torch.zeros(()))
            noise = (torch.rand(a.batch, cfg.num_latents, generator=gen) < rate[:, None],
                     torch.randint(model.fill_id, (a.batch, cfg.num_latents), generator=gen))
        logits, aux = model.forward_train(pts, nrm, qp, keep, vq_on=extra["vq_on"], noise=noise)
        if qw is None:
            loss = F.binary_cross_entropy_with_logits(logits, ql)
        else:
            loss = (F.binary_cross_entropy_with_logits(logits, ql, reduction="none") * qw).sum() / qw.sum()
        if a.consistency > 0:
            ps2 = perm[:, a.n_points:2 * a.n_points]
            z2 = model.project(model.encode_latents(take(sp_b, ps2), take(sn_b, ps2)))
            loss = loss + a.consistency * F.mse_loss(aux["z"], z2)
        if extra["vq_on"] and not a.train_decoder_only:
            loss = loss + aux["codebook"] + a.commit * aux["commit"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        with torch.no_grad():
            full = keep == cfg.num_latents
            if full.any():
                acc_sum += float(((logits[full] > 0).float() == ql[full]).float().mean())
                n_sum += 1
            loss_sum += float(loss)
            if extra["vq_on"] and not a.train_decoder_only:
                model.update_usage(aux["ids"])
                if step % 100 == 0:
                    nd = model.restart_dead_codes(aux["z"].detach(), gen)
                    if nd:
                        logger.log(f"step {step}: restarted {nd} dead codes")
        if step % a.log_every == 0:
            now = time.time()
            rate = (step - s_log) / max(1e-6, now - t_log)
            msg = (f"step {step} loss {loss_sum / a.log_every:.4f} acc(full) "
                   f"{acc_sum / max(1, n_sum):.4f} lr {lr:.2e} {rate:.2f} steps/s")
            if extra["vq_on"]:
                msg += f" commit {float(aux['commit']):.4f}"
            logger.log(msg)
            logger.metrics(step=step, loss=loss_sum / a.log_every, acc=acc_sum / max(1, n_sum), lr=lr,
                           steps_per_s=rate, vq_on=extra["vq_on"])
            t_log, s_log, acc_sum, loss_sum, n_sum = now, step, 0.0, 0.0, 0
        if step % a.eval_every == 0 or step == a.steps:
            te = time.time()
            means, fam, used, agree = evaluate(model, val, vs, a.n_points, extra["vq_on"])
            logger.log(f"step {step} EVAL iou(full) {means[64]:.4f} iou(16-token prefix) {means[16]:.4f} "
                       f"codes used {used}" + ("" if agree is None else f" code agreement {agree:.3f}") +
                       f" ({time.time() - te:.0f} s) per family {fam}")
            logger.metrics(step=step, val_iou=means[64], val_iou_prefix16=means[16],
                           val_iou_family=fam, codes_used=used,
                           **({} if agree is None else {"val_code_agreement": agree}))
        out_of_time = a.max_minutes > 0 and time.time() - t_start > 60 * a.max_minutes
        if time.time() - t_ckpt > 60 * a.ckpt_minutes or step == a.steps or out_of_time:
            if kept:
                check_encoding_unchanged(model, kept)
            common.save_checkpoint(ckpt_path, model, opt, step, gen, extra)
            t_ckpt = time.time()
            logger.log(f"step {step}: checkpoint {ckpt_path}")
        if out_of_time:
            logger.log(f"--max-minutes {a.max_minutes} reached; stopping (resume by running again)")
            return 0
    with open(done_path, "w") as f:
        json.dump({"step": step, **git, "args": vars(a)}, f, indent=2)
    common.finalize_checkpoint(a.run_dir, "ae")
    logger.log(f"done: {step} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
