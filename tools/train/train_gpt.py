#!/usr/bin/python3
"""Stage 2 of tessera-tiny: encodes the dataset with the trained shape tokenizer, then trains the tiny
CLIP text encoder and the Cube GPT (DualStreamRoformer, v0.5 style with the bounding-box token) jointly.

Steps (each skipped when its output exists, so the script resumes wherever it stopped):
1. vocabulary: tools/build_bpe_vocab.py -> RUN_DIR/vocab/{vocab.json,merges.txt} (CLIP format);
2. tokens: every training shape encoded twice (two disjoint 512-point subsets of its surface samples)
   -> RUN_DIR/tokens.npz, with 4 captions per shape (the dataset's + 3 re-drawn from the same shape);
   captions of the held-out template "a sculpture of ..." are reduced to their noun phrase, so that
   template only appears in evaluate.py's held-out prompts;
3. training: next-token cross-entropy over the shape codes; the condition is CLIP(caption) (77
   positions, EOS padding, padded keys masked) ++ bbox_proj(bbox), bbox = extents / max(extents) for half
   of the samples and (0,0,0) ("no box") otherwise; condition dropout --cond-drop: the empty prompt with
   bbox 0, which is exactly the unconditional branch of classifier-free guidance at inference.
   Checkpoints RUN_DIR/gpt_ckpt.pt every --ckpt-minutes, log metrics to gpt_metrics.jsonl, and writes
   gpt_done.json at the end.

  /usr/bin/python3 tools/train/train_gpt.py [--threads 1] [--steps 3000]
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common, run_record  # noqa: E402

HELDOUT_TEMPLATE = "a sculpture of "
CAPTIONS_PER_SHAPE = 4


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default=common.RUN_DIR)
    p.add_argument("--data", default=common.DATA_DIR)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--cond-drop", type=float, default=0.1)
    p.add_argument("--bbox-prob", type=float, default=0.5, help="fraction of samples given their box")
    p.add_argument("--ckpt-minutes", type=float, default=5.0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--max-minutes", type=float, default=0.0)
    p.add_argument("--init-from", default="",
                   help="start a new run from another run's gpt_ckpt.pt weights (text encoder + GPT)")
    p.add_argument("--freeze-text", action="store_true",
                   help="keep the text encoder fixed (only the GPT learns): the embedded diffusion "
                        "model is conditioned on the shipped text encoder, which must not change")
    p.add_argument("--text-from", default="",
                   help="start the text encoder (only) from another run's gpt_ckpt.pt; with a GPT of a "
                        "new size (--n-embd ...) the GPT starts from scratch")
    p.add_argument("--ae-ckpt", default="",
                   help="autoencoder checkpoint whose codebook (and encoder, for tokens.npz) the GPT "
                        "uses (default RUN_DIR/ae_ckpt.pt); lets a GPT train while the decoder of the "
                        "same codes is fine-tuned (train_autoencoder.py --train-decoder-only)")
    for name, default in (("n-embd", 128), ("n-layer", 4), ("n-single", 1), ("mlp-hidden", 256),
                          ("head-dim", 32)):
        p.add_argument(f"--{name}", type=int, default=default,
                       help=f"GPT size (default {default}; recorded in the checkpoint and used by export)")
    p.add_argument("--focus-words", default="",
                   help="comma-separated caption words (e.g. flat,low) to train on more often: a shape with a "
                        "caption containing one is drawn --focus-weight times as often and then always with "
                        "such a caption (a fine-tune towards words the model under-serves)")
    p.add_argument("--focus-weight", type=float, default=1.0,
                   help="sampling weight of the --focus-words shapes (>= 1; the others weigh 1)")
    p.add_argument("--extra-data", default="",
                   help="comma-separated dataset folders (their train/ split) appended to --data's training "
                        "shapes when tokens.npz is built, e.g. extra near-cubic boxes (tools.shapes.dataset "
                        "generate --select-noun cube); shapes already in --data are skipped")
    p.add_argument("--short-prob", type=float, default=0.0,
                   help="probability that a sample is captioned with a short caption (the noun alone, "
                        "'a' + noun, or 'a' + one adjective + noun: tools/shapes/captions.make_short_caption) "
                        "instead of one of its template captions; 0 (default) = the template captions only")
    p.add_argument("--short-per-shape", type=int, default=4, help="short captions drawn per shape")
    p.add_argument("--canonical-points", type=int, default=0,
                   help="one canonical encoding per training shape (v2 recipe): its first N surface points "
                        "(N = 2048: all of them) instead of two 512-point samples; the GPT then learns one "
                        "token sequence per shape, not a mixture of sample-dependent ones")
    p.add_argument("--allow-unfinished-ae", action="store_true",
                   help="encode with the autoencoder checkpoint even if its training is not done")
    return p.parse_args(argv)


def ensure_vocab(run_dir, logger):
    out = os.path.join(run_dir, "vocab")
    if os.path.exists(os.path.join(out, "vocab.json")) and os.path.exists(os.path.join(out, "merges.txt")):
        return out
    script = os.path.join(common.TOOLS, "build_bpe_vocab.py")
    logger.log(f"building the BPE vocabulary: {script} {out}")
    subprocess.run([sys.executable, script, out], check=True, cwd=common.REPO)
    return out


def normalize_caption(c):
    c = str(c)
    return c[len(HELDOUT_TEMPLATE):] if c.startswith(HELDOUT_TEMPLATE) else c


def load_shape_tokenizer(run_dir, allow_unfinished, ckpt=""):
    ckpt = ckpt or os.path.join(run_dir, "ae_ckpt.pt")
    if not os.path.exists(ckpt):
        raise FileNotFoundError(f"{ckpt}: no autoencoder checkpoint (run train_autoencoder.py first)")
    ae_dir = os.path.dirname(os.path.abspath(ckpt))
    if not allow_unfinished and not os.path.exists(os.path.join(ae_dir, "ae_done.json")):
        raise RuntimeError(f"{ae_dir}/ae_done.json missing: the autoencoder has not finished training "
                           "(pass --allow-unfinished-ae to use its latest checkpoint anyway)")
    state = torch.load(ckpt, map_location="cpu")
    model = common.shape_tokenizer_from_checkpoint(state)   # config and encoder queries of the checkpoint
    return model.eval(), int(state["step"])


def ensure_tokens(a, logger):
    path = os.path.join(a.run_dir, "tokens.npz")
    if os.path.exists(path):
        return path
    from shapes.captions import make_caption
    from shapes.dataset import SPLITS
    from shapes.families import make_shape
    model, ae_step = load_shape_tokenizer(a.run_dir, a.allow_unfinished_ae, a.ae_ckpt)
    out = {}
    for split in ("train", "val"):
        d = common.load_split(os.path.join(a.data, split))
        if split == "train" and a.extra_data:
            d = append_extra(d, [x for x in a.extra_data.split(",") if x], logger)
        n = d["surface_points"].shape[0]
        toks = []
        if a.canonical_points > 0:
            subsets = [slice(0, a.canonical_points)]
        else:
            subsets = [slice(0, 512), slice(512, 1024)] if split == "train" else [slice(0, 512)]
        for sl in subsets:
            ids = []
            for i in range(0, n, 64):
                ids.append(model.encode_ids(torch.from_numpy(d["surface_points"][i:i + 64, sl]),
                                            torch.from_numpy(d["surface_normals"][i:i + 64, sl])))
            toks.append(torch.cat(ids).numpy().astype(np.int16))
        caps = []
        seed = int(d["manifest"]["seed"])
        for i in range(n):
            fam, fid, idx = str(d["families"][i]), int(d["family_ids"][i]), int(d["indices"][i])
            row = [normalize_caption(d["captions"][i])]
            shape = make_shape(fam, np.random.default_rng([seed, SPLITS[split], fid, idx]))
            for j in range(1, CAPTIONS_PER_SHAPE):
                rng = np.random.default_rng([seed, 1000 + j, SPLITS[split], fid, idx])
                row.append(normalize_caption(make_caption(shape, rng)))
            caps.append("|".join(row))
        ext = d["extents"].astype(np.float32)
        out[f"{split}_tokens"] = np.stack(toks, axis=1)            # (n, encodings, L)
        out[f"{split}_captions"] = np.array(caps, dtype=str)
        out[f"{split}_bbox"] = ext / ext.max(axis=1, keepdims=True)
        out[f"{split}_family_ids"] = d["family_ids"]
        out[f"{split}_indices"] = d["indices"]
        logger.log(f"encoded {split}: {n} shapes x {len(subsets)} encodings, "
                   f"{len(np.unique(out[f'{split}_tokens']))} distinct codes")
    out["family_names"] = np.array(d["family_names"], dtype=str)
    out["ae_step"] = np.array(ae_step)
    out["seed"] = np.array(seed)
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **out)
    os.replace(tmp, path)
    return path


def append_extra(d, folders, logger):
    """d (common.load_split) with the training shapes of `folders` appended, skipping (family, index)
    pairs d already has; the seed must be d's (captions and shapes are re-made from it)."""
    have = set(zip(d["family_ids"].tolist(), d["indices"].tolist()))
    for folder in folders:
        x = common.load_split(os.path.join(folder, "train"))
        if int(x["manifest"]["seed"]) != int(d["manifest"]["seed"]):
            raise SystemExit(f"--extra-data {folder}: seed {x['manifest']['seed']}, --data has "
                             f"{d['manifest']['seed']}")
        if list(x["family_names"]) != list(d["family_names"]):
            raise SystemExit(f"--extra-data {folder}: family list differs from --data's")
        keep = np.array([(int(f), int(i)) not in have for f, i in zip(x["family_ids"], x["indices"])])
        for k in ("surface_points", "surface_normals", "occ_points", "occ_labels", "extents", "captions",
                  "families", "family_ids", "indices"):
            d[k] = np.concatenate([d[k], x[k][keep]])
        have.update(zip(x["family_ids"][keep].tolist(), x["indices"][keep].tolist()))
        logger.log(f"--extra-data {folder}: {int(keep.sum())} training shapes appended "
                   f"({int((~keep).sum())} already present)")
    return d


def short_captions(data, per_shape, logger):
    """[[str] * per_shape] for every training shape of tokens.npz: captions.make_short_caption of the
    shape re-made from its (seed, family, index), drawn from their own seeded streams."""
    from shapes.captions import make_short_caption
    from shapes.dataset import SPLITS
    from shapes.families import make_shape
    seed = int(data["seed"]) if "seed" in data else 1
    names = [str(f) for f in data["family_names"]]
    out = []
    t0 = time.time()
    for fid, idx in zip(data["train_family_ids"], data["train_indices"]):
        shape = make_shape(names[int(fid)], np.random.default_rng([seed, SPLITS["train"], int(fid), int(idx)]))
        out.append([make_short_caption(shape, np.random.default_rng([seed, 2000 + j, SPLITS["train"], int(fid),
                                                                     int(idx)])) for j in range(per_shape)])
    logger.log(f"short captions: {per_shape} per shape for {len(out)} shapes in {time.time() - t0:.0f} s, "
               f"e.g. {out[0]} / {out[-1]}")
    return out


GPT_SIZE_KEYS = ("n_embd", "n_layer", "n_single", "mlp_hidden", "head_dim")


def gpt_sizes_of(a):
    """The --n-embd ... arguments as the dict recorded in checkpoints (extra['gpt_sizes'])."""
    return {k: int(getattr(a, k)) for k in GPT_SIZE_KEYS}


def build_models(vocab_dir, codebook, seed, sizes=None):
    tok = common.BpeTokenizer(os.path.join(vocab_dir, "vocab.json"), os.path.join(vocab_dir, "merges.txt"))
    clip_cfg = common.tiny_clip_config(len(tok.encoder), tok.bos_id, tok.eos_id)
    clip = common.init_clip_(common.ClipTextModel(clip_cfg), seed + 7)
    gpt_cfg = common.tiny_gpt_config(common.tiny_shape_config(), clip_cfg.width, sizes)
    gpt = common.TrainGPT(gpt_cfg, codebook, seed=seed + 8)
    return tok, clip, gpt


class Joint(torch.nn.Module):
    """Text encoder + GPT trained together (one optimizer, one checkpoint)."""

    def __init__(self, clip, gpt):
        super().__init__()
        self.clip = clip
        self.gpt = gpt

    def condition(self, ids, mask, bbox):
        return self.gpt.encode_condition(common.clip_hidden(self.clip, ids, mask), bbox)

    def forward(self, codes, ids, mask, bbox):
        """codes (B,L) -> logits (B,L,K) over the shape codes for every position (teacher forcing)."""
        cfg = self.gpt.cfg
        bos = torch.full((codes.shape[0], 1), cfg.bos_id, dtype=torch.long)
        inp = torch.cat([bos, codes[:, :-1]], dim=1)
        return self.gpt(inp, self.condition(ids, mask, bbox))[..., :cfg.codebook_size]


def main(argv=None):
    a = parse_args(argv)
    git = run_record.git_state()   # the code this session runs: recorded in gpt_done.json
    common.set_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    logger = common.Logger(os.path.join(a.run_dir, "gpt_metrics.jsonl"))
    lock = common.acquire_lock(os.path.join(a.run_dir, "gpt.lock"), logger)  # noqa: F841 (held)
    done_path = os.path.join(a.run_dir, "gpt_done.json")
    if os.path.exists(done_path):
        common.finalize_checkpoint(a.run_dir, "gpt")
        logger.log(f"GPT already trained ({done_path}); nothing to do")
        return 0
    logger.log(run_record.log_line(git))
    common.finalize_checkpoint(a.run_dir, "ae")
    vocab_dir = ensure_vocab(a.run_dir, logger)
    tok_path = ensure_tokens(a, logger)
    data = np.load(tok_path)
    shape_model, _ = load_shape_tokenizer(a.run_dir, True, a.ae_ckpt)
    codebook = shape_model.codebook_vectors().detach()
    torch.manual_seed(a.seed)
    sizes = gpt_sizes_of(a)
    tok, clip, gpt = build_models(vocab_dir, codebook, a.seed, sizes)
    joint = Joint(clip, gpt)
    if a.freeze_text:
        # No gradient, so AdamW never touches these (no update, no weight decay).
        for prm in clip.parameters():
            prm.requires_grad_(False)
    opt = torch.optim.AdamW(common.param_groups(joint, 0.01), lr=a.lr, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(a.seed + 3)
    step, extra = 0, {"gpt_sizes": sizes}
    ckpt_path = os.path.join(a.run_dir, "gpt_ckpt.pt")
    if a.init_from and a.text_from:
        raise SystemExit("--init-from and --text-from are exclusive (the first includes the text encoder)")
    if a.init_from and not os.path.exists(ckpt_path):
        joint.load_state_dict(torch.load(a.init_from, map_location="cpu")["model"])
        logger.log(f"initialised from {a.init_from}; new schedule of {a.steps} steps")
    if a.text_from and not os.path.exists(ckpt_path):
        src = torch.load(a.text_from, map_location="cpu")["model"]
        text_sd = {k[len("clip."):]: v for k, v in src.items() if k.startswith("clip.")}
        if not text_sd:
            raise SystemExit(f"--text-from {a.text_from}: no clip.* tensors (not a train_gpt checkpoint)")
        try:
            clip.load_state_dict(text_sd)
        except RuntimeError as e:
            raise SystemExit(f"--text-from {a.text_from}: text encoder does not match this vocabulary: {e}")
        logger.log(f"text encoder from {a.text_from}; GPT {sizes} from scratch, {a.steps} steps")
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path, map_location="cpu")
        saved = (state.get("extra") or {}).get("gpt_sizes")
        if saved is not None and saved != sizes:
            raise SystemExit(f"{ckpt_path}: checkpoint GPT sizes {saved} differ from the arguments {sizes} "
                             "(pass the sizes it was started with)")
        step, extra = common.load_checkpoint(ckpt_path, joint, opt, gen, state)
        extra.setdefault("gpt_sizes", sizes)
        logger.log(f"resumed from {ckpt_path} at step {step}")
    logger.log(f"text encoder {sum(p.numel() for p in clip.parameters()):,} params, GPT "
               f"{sum(p.numel() for p in gpt.parameters()):,} params; vocab {len(tok.encoder)}; "
               f"gpt config {common.C.as_dict(gpt.cfg)}; args {vars(a)}")

    tokens = torch.from_numpy(data["train_tokens"].astype(np.int64))      # (n, E, L)
    caps = [c.split("|") for c in data["train_captions"]]
    bbox = torch.from_numpy(data["train_bbox"])
    n, n_enc = tokens.shape[0], tokens.shape[1]
    cap_cache = {}
    n_template = len(caps[0])
    if not 0.0 <= a.short_prob <= 1.0:
        raise SystemExit(f"--short-prob {a.short_prob}: must be in [0, 1]")
    if a.short_prob > 0:
        # appended after the template captions: indices >= n_template are short ones
        short = short_captions(data, a.short_per_shape, logger)
        caps = [row + extra for row, extra in zip(caps, short)]
    focus = [w.strip() for w in a.focus_words.split(",") if w.strip()]
    if a.focus_weight < 1.0:
        raise SystemExit(f"--focus-weight {a.focus_weight}: must be >= 1")
    # Per shape: the indices of its captions containing a focus word (as a whole word).
    focus_caps = [[j for j, c in enumerate(row) if any(w in c.split() for w in focus)] for row in caps]
    n_focus = sum(1 for f in focus_caps if f)
    if focus and n_focus == 0:
        raise SystemExit(f"--focus-words {a.focus_words}: no training caption contains any of them")
    weights = torch.tensor([a.focus_weight if f else 1.0 for f in focus_caps], dtype=torch.float64)
    if focus:
        logger.log(f"focus words {focus}: {n_focus} of {n} shapes drawn x{a.focus_weight:g} "
                   f"({float(weights[[bool(f) for f in focus_caps]].sum() / weights.sum()):.1%} of draws)")

    def encode_text(texts):
        rows = []
        for t in texts:
            if t not in cap_cache:
                cap_cache[t] = tok.pad77(t)
            rows.append(cap_cache[t])
        ids, masks = zip(*rows)
        return torch.tensor(ids), torch.tensor(masks)

    val_tokens = torch.from_numpy(data["val_tokens"][:, 0].astype(np.int64))
    val_caps = [c.split("|")[0] for c in data["val_captions"]]
    val_bbox = torch.zeros(len(val_caps), 3)

    t_start = t_ckpt = t_log = time.time()
    s_log, loss_sum, acc_sum = step, 0.0, 0.0
    while step < a.steps:
        lr = common.cosine_lr(step, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        if focus:
            idx = torch.multinomial(weights, a.batch, replacement=True, generator=gen)
        else:
            idx = torch.randint(n, (a.batch,), generator=gen)
        enc = torch.randint(n_enc, (a.batch,), generator=gen)
        codes = tokens[idx, enc]
        which = torch.randint(n_template, (a.batch,), generator=gen)
        if a.short_prob > 0:
            use_short = torch.rand(a.batch, generator=gen) < a.short_prob
            pick = torch.randint(a.short_per_shape, (a.batch,), generator=gen)
            which = torch.where(use_short, n_template + pick, which)
        if focus:
            for i in range(a.batch):
                fc = focus_caps[int(idx[i])]
                if fc:
                    which[i] = fc[int(which[i]) % len(fc)]
        drop = torch.rand(a.batch, generator=gen) < a.cond_drop
        use_box = (torch.rand(a.batch, generator=gen) < a.bbox_prob) & ~drop
        texts = ["" if drop[i] else caps[int(idx[i])][int(which[i])] for i in range(a.batch)]
        ids, mask = encode_text(texts)
        box = torch.where(use_box[:, None], bbox[idx], torch.zeros(a.batch, 3))
        logits = joint(codes, ids, mask, box)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), codes.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(joint.parameters(), 1.0)
        opt.step()
        step += 1
        loss_sum += float(loss)
        acc_sum += float((logits.argmax(-1) == codes).float().mean())
        if step % a.log_every == 0:
            now = time.time()
            rate = (step - s_log) / max(1e-6, now - t_log)
            logger.log(f"step {step} loss {loss_sum / a.log_every:.4f} token-acc "
                       f"{acc_sum / a.log_every:.4f} lr {lr:.2e} {rate:.2f} steps/s")
            logger.metrics(step=step, loss=loss_sum / a.log_every, acc=acc_sum / a.log_every, lr=lr,
                           steps_per_s=rate)
            t_log, s_log, loss_sum, acc_sum = now, step, 0.0, 0.0
        if step % a.eval_every == 0 or step == a.steps:
            joint.eval()
            with torch.no_grad():
                vi, vm = encode_text(val_caps)
                vl = joint(val_tokens, vi, vm, val_bbox)
                vloss = float(F.cross_entropy(vl.reshape(-1, vl.shape[-1]), val_tokens.reshape(-1)))
                vacc = float((vl.argmax(-1) == val_tokens).float().mean())
            joint.train()
            logger.log(f"step {step} EVAL held-out shapes: loss {vloss:.4f} token-acc {vacc:.4f}")
            logger.metrics(step=step, val_loss=vloss, val_acc=vacc)
        out_of_time = a.max_minutes > 0 and time.time() - t_start > 60 * a.max_minutes
        if time.time() - t_ckpt > 60 * a.ckpt_minutes or step == a.steps or out_of_time:
            common.save_checkpoint(ckpt_path, joint, opt, step, gen, extra)
            t_ckpt = time.time()
            logger.log(f"step {step}: checkpoint {ckpt_path}")
        if out_of_time:
            logger.log(f"--max-minutes {a.max_minutes} reached; stopping (resume by running again)")
            return 0
    with open(done_path, "w") as f:
        json.dump({"step": step, **git, "args": vars(a)}, f, indent=2)
    common.finalize_checkpoint(a.run_dir, "gpt")
    logger.log(f"done: {step} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
