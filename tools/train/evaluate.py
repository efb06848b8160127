#!/usr/bin/python3
"""Stage 4 of tessera-tiny: metrics for the model card, computed on the EXPORTED model folder.

The folder is loaded into the plain PyTorch reference (tools/tessera_ref: configs inferred from the
tensor shapes, strict state-dict loading, wte[0:K] installed from the codebook), which is what the C++
engine mirrors. Only encoding shapes uses the training encoder (FPS queries, see common.py).

Metrics (written to RUN_DIR/eval.json and into model.json's "metrics"):
1. recogniser: a small 3-D CNN over 32^3 occupancy grids (cropped to the shape's bounding box and
   resampled to 16^3) plus scalar features (extents, proportions, fill ratio, Euler characteristic),
   trained on ground-truth grids of training shapes; its accuracy on held-out ground-truth shapes is
   reported first (it must be trustworthy before it judges generated shapes).
2. autoencoder reconstruction IoU on held-out shapes (grid --res over [-1.05, 1.05]^3), overall and per
   family, and the recogniser's accuracy on those reconstructions;
3. prefix-decode IoU: the first k tokens followed by the fill token, for several k;
4. prompt -> shape: greedy decoding with classifier-free guidance (scale 3; --guidance) for a fixed list of
   held-out prompts (template "a sculpture of ...", never seen in training); the recognised family must
   match the prompt's, and property checks must hold (torus / mug have a hole, a tall cylinder is tall, a
   flat box is flat). A contact sheet (front / side / top depth views) goes to RUN_DIR/prompts.png.

  /usr/bin/python3 tools/train/evaluate.py [--per-family 8] [--res 40] [--threads 1]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common  # noqa: E402
from tessera_ref import st_io  # noqa: E402
from tessera_ref.clip_text import ClipTextModel  # noqa: E402
from tessera_ref.cube_gpt import CubeGPT  # noqa: E402
from tessera_ref.shape_tokenizer import ShapeTokenizer  # noqa: E402

REC_RES = 32
REC_CROP = 16

# (family, prompt, property check or None). The template "a sculpture of" is held out of GPT training.
PROMPTS = []
_SIZE2 = {"sphere": "ball", "box": "cube", "cylinder": "pillar", "cone": "cone", "capsule": "pill",
          "torus": "donut", "ring": "washer", "pyramid": "pyramid", "mug": "coffee mug",
          "snowman": "snowman", "dumbbell": "dumbbell", "arch": "archway", "mushroom": "toadstool",
          "tree": "pine tree", "table": "round table", "chair": "chair", "bottle": "bottle",
          "lamp": "desk lamp", "house": "cottage"}
_CHECKS = {("torus", 0): "hole", ("torus", 1): "hole", ("mug", 0): "hole", ("cylinder", 2): "tall",
           ("box", 2): "flat", ("ring", 0): "hole"}
_THIRD = {"cylinder": "a sculpture of a tall cylinder", "box": "a sculpture of a flat box",
          "torus": "a sculpture of a thick torus", "cone": "a sculpture of a tall cone",
          "pyramid": "a sculpture of a wide pyramid", "ring": "a sculpture of a flat ring"}


def _prompt_list(families):
    from shapes.captions import article
    out = []
    for fam in families:
        third = _THIRD.get(fam, f"a sculpture of a small {fam}")
        texts = [f"a sculpture of {article(fam)} {fam}", f"a sculpture of a big {_SIZE2.get(fam, fam)}",
                 third]
        for i, t in enumerate(texts):
            out.append((fam, t, _CHECKS.get((fam, i))))
    return out


# ---- occupancy-grid features and the recogniser ---------------------------------------------------

def euler_characteristic(g):
    """Euler characteristic of the union of closed voxels (cubical complex): V - E + F - C. A solid ball
    gives 1, a solid torus 0, a solid with two handles -1."""
    g = np.pad(np.asarray(g, bool), 1)
    c = np.count_nonzero(g)
    fx = np.count_nonzero(g[1:, :, :] | g[:-1, :, :])
    fy = np.count_nonzero(g[:, 1:, :] | g[:, :-1, :])
    fz = np.count_nonzero(g[:, :, 1:] | g[:, :, :-1])
    ex = np.count_nonzero(g[:, 1:, 1:] | g[:, :-1, 1:] | g[:, 1:, :-1] | g[:, :-1, :-1])
    ey = np.count_nonzero(g[1:, :, 1:] | g[:-1, :, 1:] | g[1:, :, :-1] | g[:-1, :, :-1])
    ez = np.count_nonzero(g[1:, 1:, :] | g[:-1, 1:, :] | g[1:, :-1, :] | g[:-1, :-1, :])
    v = np.count_nonzero(g[1:, 1:, 1:] | g[:-1, 1:, 1:] | g[1:, :-1, 1:] | g[1:, 1:, :-1] |
                         g[:-1, :-1, 1:] | g[:-1, 1:, :-1] | g[1:, :-1, :-1] | g[:-1, :-1, :-1])
    return int(v - (ex + ey + ez) + (fx + fy + fz) - c)


def grid_features(g):
    """bool [R,R,R] ('ij': x, y, z) -> (crop float [16,16,16], scalars float [9], info dict)."""
    g = np.asarray(g, bool)
    r = g.shape[0]
    vox = 2 * common.BOUND / (r - 1)
    if not g.any():
        return np.zeros((REC_CROP,) * 3, np.float32), np.zeros(9, np.float32), \
            {"extents": [0.0, 0.0, 0.0], "euler": 0, "empty": True}
    nz = np.nonzero(g)
    lo = np.array([a.min() for a in nz])
    hi = np.array([a.max() for a in nz]) + 1
    size = hi - lo
    axes = [np.clip((lo[d] + (np.arange(REC_CROP) + 0.5) * size[d] / REC_CROP).astype(int), 0, r - 1)
            for d in range(3)]
    crop = g[np.ix_(axes[0], axes[1], axes[2])].astype(np.float32)
    ext = size * vox
    chi = euler_characteristic(g)
    fill = np.count_nonzero(g) / max(1, int(np.prod(size)))
    scal = np.array([*ext, *(ext / ext.max()), fill, np.clip(chi, -3, 3) / 3.0,
                     float(chi <= 0)], np.float32)
    return crop, scal, {"extents": [round(float(e), 3) for e in ext], "euler": chi, "empty": False}


class Recogniser(nn.Module):
    def __init__(self, n_classes, n_scalar=9):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2),
                                  nn.Conv3d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2))
        self.head = nn.Sequential(nn.Linear(16 * 4 ** 3 + n_scalar, 64), nn.ReLU(), nn.Linear(64, n_classes))

    def forward(self, crop, scal):
        return self.head(torch.cat([self.conv(crop[:, None]).flatten(1), scal], dim=1))


def _morph(g, op):
    t = torch.from_numpy(g.astype(np.float32))[None, None]
    if op == "dilate":
        t = F.max_pool3d(t, 3, 1, 1)
    else:
        t = -F.max_pool3d(-t, 3, 1, 1)
    return t[0, 0].numpy() > 0.5


def gt_grids(split, families, per_family, seed, res=REC_RES, start=0):
    from shapes.dataset import SPLITS
    from shapes.families import make_shape
    grids, labels = [], []
    for fi, fam in enumerate(families):
        for i in range(start, start + per_family):
            shape = make_shape(fam, np.random.default_rng([seed, SPLITS[split], fi, i]))
            grids.append(common.sdf_grid(shape.sdf, res))
            labels.append(fi)
    return grids, np.array(labels)


def save_recogniser(path, rec, families, accuracy, per_family):
    """The recogniser as safetensors (its weights; families and accuracies in the metadata): no
    pickle, the product's rule for every stored model."""
    st_io.save_torch_state_dict(path, rec.state_dict(), metadata={
        "families": json.dumps(list(families)), "val_accuracy": repr(float(accuracy)),
        "val_accuracy_family": json.dumps(per_family)})


def load_recogniser(path):
    """(recogniser in eval mode, its families, its held-out accuracy) from save_recogniser's file."""
    tensors, meta = st_io.load(path)
    families = json.loads(meta["families"])
    rec = Recogniser(len(families))
    rec.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()})
    return rec.eval(), families, float(meta["val_accuracy"])


def train_recogniser(families, path, logger, per_family=60, epochs=40, seed=0):
    if os.path.exists(path):
        rec, known, accuracy = load_recogniser(path)
        if known == list(families):
            return rec, accuracy
    logger.log(f"training the recogniser on {per_family} ground-truth shapes per family")
    grids, labels = gt_grids("train", families, per_family, seed=1)
    rng = np.random.default_rng(seed)
    crops, scals, ys = [], [], []
    for g, y in zip(grids, labels):
        variants = [g, _morph(g, "dilate"), _morph(g, "erode")]
        for v in variants:
            if v.any():
                c, s, _ = grid_features(v)
                crops.append(c)
                scals.append(s)
                ys.append(y)
    crops, scals, ys = torch.tensor(np.stack(crops)), torch.tensor(np.stack(scals)), torch.tensor(ys)
    torch.manual_seed(seed)
    rec = Recogniser(len(families))
    opt = torch.optim.Adam(rec.parameters(), 2e-3)
    n = len(ys)
    for ep in range(epochs):
        perm = torch.from_numpy(rng.permutation(n))
        for i in range(0, n, 64):
            b = perm[i:i + 64]
            c = crops[b]
            if rng.random() < 0.5:
                c = c.flip(1)      # mirror x
            if rng.random() < 0.5:
                c = c.flip(3)      # mirror z
            loss = F.cross_entropy(rec(c, scals[b]), ys[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    rec.eval()
    vg, vl = gt_grids("val", families, 16, seed=1)
    pred = recognise(rec, vg)
    acc = float(np.mean(pred == vl))
    per_fam = {f: float(np.mean(pred[vl == i] == i)) for i, f in enumerate(families)}
    logger.log(f"recogniser accuracy on held-out ground-truth shapes: {acc:.3f} {per_fam}")
    save_recogniser(path, rec, families, acc, per_fam)
    return rec, acc


@torch.no_grad()
def recognise(rec, grids):
    feats = [grid_features(g) for g in grids]
    c = torch.tensor(np.stack([f[0] for f in feats]))
    s = torch.tensor(np.stack([f[1] for f in feats]))
    return rec(c, s).argmax(1).numpy()


# ---- loading the exported folder into the reference -------------------------------------------------

def load_shape_tokenizer_file(path):
    """shape_tokenizer.safetensors -> (reference ShapeTokenizer (what the engine mirrors: config from the
    tensor shapes, strict keys), training TrainShapeTokenizer with the encoder query mode recorded in
    the file's metadata (absent: fps, the runs before the v2 recipe))."""
    arrays, meta = st_io.load(path)
    s_sd = {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}
    s_cfg = common.C.shape_from_shapes({k: tuple(v.shape) for k, v in s_sd.items()})
    shape = ShapeTokenizer(s_cfg)
    shape.load_state_dict(s_sd, strict=True)
    enc = common.TrainShapeTokenizer(s_cfg, queries=(meta or {}).get("encoder_queries", "fps"))
    missing, unexpected = enc.load_state_dict(s_sd, strict=False)
    if unexpected or [m for m in missing if m != "code_usage"]:
        raise RuntimeError(f"shape tokenizer keys: missing {missing} unexpected {unexpected}")
    return shape.eval(), enc.eval()


def load_ae_checkpoint(path):
    """An autoencoder checkpoint (ae_ckpt.pt) through the export path: its shape tokenizer written as
    export_tiny.py writes it into a temporary shape_tokenizer.safetensors and loaded back by
    load_shape_tokenizer_file, so what is measured is what would ship. Returns (shape, enc, step)."""
    import tempfile
    from train.export_tiny import shape_tokenizer_metadata
    state = torch.load(path, map_location="cpu")
    model = common.shape_tokenizer_from_checkpoint(state)
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "shape_tokenizer.safetensors")
        st_io.save_torch_state_dict(f, common.strip_training_buffers(model.state_dict()),
                                    shape_tokenizer_metadata(model, {"format": "pt", "model": "tessera-tiny"}))
        shape, enc = load_shape_tokenizer_file(f)
    return shape, enc, int(state["step"])


def load_exported(model_dir):
    def st(path):
        arrays, _ = st_io.load(path)
        return {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}

    shape, enc = load_shape_tokenizer_file(os.path.join(model_dir, "shape_tokenizer.safetensors"))
    s_cfg = shape.cfg
    g_sd = st(os.path.join(model_dir, "shape_gpt.safetensors"))
    g_cfg = common.C.gpt_from_shapes({k: tuple(v.shape) for k, v in g_sd.items()}, s_cfg.num_latents)
    gpt = CubeGPT(g_cfg)
    gpt.load_state_dict(g_sd, strict=True)
    gpt.install_codebook(shape.normalized_codebook().detach())
    c_sd = st(os.path.join(model_dir, "text_encoder", "model.safetensors"))
    c_cfg = common.C.clip_from_shapes({k: tuple(v.shape) for k, v in c_sd.items()},
                                      os.path.join(model_dir, "text_encoder", "config.json"))
    clip = ClipTextModel(c_cfg)
    clip.load_state_dict(c_sd, strict=True)
    tok = common.BpeTokenizer(os.path.join(model_dir, "vocab.json"), os.path.join(model_dir, "merges.txt"))
    # The diffusion extension's words are image-only: the shape GPT is conditioned without them (as the
    # C++ ShapePipeline does).
    ext_path = os.path.join(model_dir, "text_encoder", "extension.json")
    if os.path.exists(ext_path):
        with open(ext_path) as f:
            tok.image_only_ids = tuple(int(v) for v in json.load(f)["words"].values())
    with open(os.path.join(model_dir, "model.json")) as f:
        card = json.load(f)
    return shape.eval(), enc.eval(), gpt.eval(), clip.eval(), tok, card


@torch.no_grad()
def generate(gpt, clip, tok, prompts, guidance=3.0):
    ids, mask = tok.batch(prompts, drop=tok.image_only_ids)
    cond = gpt.encode_condition(clip(ids, mask))
    e_ids, e_mask = tok.batch([""] * len(prompts))
    uncond = gpt.encode_condition(clip(e_ids, e_mask))
    return gpt.generate(cond, uncond, guidance_scale=guidance)


# ---- rendering -------------------------------------------------------------------------------------

def depth_views(g, scale=3):
    """Front (from +z), side (from +x) and top (from +y) depth images of a bool grid, side by side."""
    g = np.asarray(g, bool)
    r = g.shape[0]

    def view(a):  # a: [rows(up->down), cols, depth(near first)]
        hit = a.any(axis=2)
        first = np.argmax(a, axis=2)
        img = np.where(hit, 40 + (215 * (1 - first / r)).astype(int), 255).astype(np.uint8)
        return img

    front = view(np.transpose(g, (1, 0, 2))[::-1, :, ::-1])      # rows y (top first), cols x, from +z
    side = view(np.transpose(g, (1, 2, 0))[::-1, ::-1, ::-1])   # rows y, cols -z, from +x
    top = view(np.transpose(g, (2, 0, 1))[:, :, ::-1])           # rows z, cols x, from +y
    sep = np.full((r, 2), 128, np.uint8)
    img = np.concatenate([front, sep, side, sep, top], axis=1)
    return np.kron(img, np.ones((scale, scale), np.uint8))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=os.path.join(common.REPO, "assets", "models", "tessera-tiny"))
    p.add_argument("--run-dir", default=common.RUN_DIR)
    p.add_argument("--data", default=common.DATA_DIR)
    p.add_argument("--per-family", type=int, default=8, help="held-out shapes per family for IoU")
    p.add_argument("--res", type=int, default=40, help="IoU grid resolution over [-1.05, 1.05]^3")
    p.add_argument("--prefixes", default="4,8,16,32,64")
    p.add_argument("--prefix-per-family", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-card", action="store_true", help="do not update model.json")
    p.add_argument("--guidance", type=float, default=3.0,
                   help="classifier-free guidance of the prompt -> shape generations (the studio's default 3)")
    p.add_argument("--ae-ckpt", default="",
                   help="evaluate only the autoencoder of this ae_ckpt.pt (through the export path, see "
                        "load_ae_checkpoint): metrics 1-3 (the same held-out shapes, grid and recogniser as "
                        "a full evaluation), written to RUN_DIR/ae_eval.json; no GPT, no model card. For an "
                        "autoencoder run without a GPT (the v2 pilot)")
    a = p.parse_args(argv)
    common.set_threads(a.threads)
    logger = common.Logger(os.path.join(a.run_dir, "eval_metrics.jsonl"))
    t0 = time.time()
    if a.ae_ckpt:
        shape, enc, ae_step = load_ae_checkpoint(a.ae_ckpt)
        gpt = clip = tok = card = None
        fill_id = common.fill_code_id(shape.cfg)
        logger.log(f"autoencoder only: {a.ae_ckpt} (step {ae_step}, encoder queries {enc.queries}, "
                   f"{shape.cfg.num_freqs} Fourier frequencies)")
    else:
        shape, enc, gpt, clip, tok, card = load_exported(a.model_dir)
        fill_id = int(card["tokens"]["fill_token_id"])
    val = common.load_split(os.path.join(a.data, "val"))
    families = val["family_names"]
    rec, rec_acc = train_recogniser(families, os.path.join(a.run_dir, "recogniser.safetensors"), logger)
    metrics = {"recogniser_accuracy_ground_truth": round(rec_acc, 4), "iou_grid_resolution": a.res}

    # -- autoencoder reconstruction IoU and prefix decodes --
    from shapes.dataset import SPLITS
    from shapes.families import make_shape
    rows = [int(r) for fi in range(len(families))
            for r in np.nonzero(val["family_ids"] == fi)[0][:a.per_family]]
    ious, fam_of, rec_grids, gts = [], [], [], []
    prefixes = [int(k) for k in a.prefixes.split(",")]
    prefix_ious = {k: [] for k in prefixes}
    seed = int(val["manifest"]["seed"])
    for n_done, r in enumerate(rows):
        fi, fam = int(val["family_ids"][r]), families[int(val["family_ids"][r])]
        sh = make_shape(fam, np.random.default_rng([seed, SPLITS["val"], fi, int(val["indices"][r])]))
        gt = common.sdf_grid(sh.sdf, a.res)
        ids = enc.encode_ids(torch.from_numpy(val["surface_points"][r:r + 1, :512]),
                             torch.from_numpy(val["surface_normals"][r:r + 1, :512]))
        grid = common.occupancy_grid_from_latents(shape, shape.decode_tokens(ids), a.res)
        ious.append(common.iou(grid, gt))
        fam_of.append(fam)
        rec_grids.append(common.occupancy_grid_from_latents(shape, shape.decode_tokens(ids), REC_RES))
        if n_done % a.per_family < a.prefix_per_family:
            for k in prefixes:
                t = ids.clone()
                t[:, k:] = fill_id
                prefix_ious[k].append(common.iou(
                    common.occupancy_grid_from_latents(shape, shape.decode_tokens(t), a.res), gt))
    fam_iou = {f: round(float(np.mean([v for v, g in zip(ious, fam_of) if g == f])), 4) for f in families}
    pred = recognise(rec, rec_grids)
    truth = np.array([families.index(f) for f in fam_of])
    metrics.update({
        "autoencoder_iou_heldout": round(float(np.mean(ious)), 4),
        "autoencoder_iou_heldout_min_family": min(fam_iou.values()),
        "autoencoder_iou_heldout_family": fam_iou,
        "autoencoder_heldout_shapes": len(rows),
        "recogniser_accuracy_on_reconstructions": round(float(np.mean(pred == truth)), 4),
        "prefix_decode_iou": {str(k): round(float(np.mean(v)), 4) for k, v in prefix_ious.items()},
    })
    logger.log(f"autoencoder IoU {metrics['autoencoder_iou_heldout']:.4f} per family {fam_iou}; "
               f"prefix IoU {metrics['prefix_decode_iou']}")
    if a.ae_ckpt:
        metrics.update({"ae_ckpt": os.path.relpath(os.path.abspath(a.ae_ckpt), common.REPO), "ae_step": ae_step,
                        "encoder_queries": enc.queries, "num_freqs": shape.cfg.num_freqs,
                        "evaluated": time.strftime("%Y-%m-%dT%H:%M:%S")})
        with open(os.path.join(a.run_dir, "ae_eval.json"), "w") as f:
            json.dump({"metrics": metrics}, f, indent=2, sort_keys=True)
        logger.metrics(**{k: v for k, v in metrics.items() if not isinstance(v, dict)})
        logger.log(f"autoencoder evaluation done in {time.time() - t0:.0f} s: {a.run_dir}/ae_eval.json")
        return 0

    # -- prompts -> shapes --
    plist = _prompt_list(families)
    codes = generate(gpt, clip, tok, [t for _, t, _ in plist], guidance=a.guidance)
    grids = [common.occupancy_grid_from_latents(shape, shape.decode_tokens(codes[i:i + 1]), REC_RES)
             for i in range(len(plist))]
    pred = recognise(rec, grids)
    results, checks_ok = [], []
    for (fam, text, check), g, pr in zip(plist, grids, pred):
        _, _, info = grid_features(g)
        ok_check = None
        if check == "hole":
            ok_check = info["euler"] <= 0
        elif check in ("tall", "flat") and not info["empty"]:
            w, h, d = info["extents"]
            ratio = h / max(w, d, 1e-6)
            ok_check = ratio >= 1.6 if check == "tall" else ratio <= 0.4
        elif check:
            ok_check = False
        if ok_check is not None:
            checks_ok.append(bool(ok_check))
        results.append({"prompt": text, "family": fam, "recognised": families[int(pr)],
                        "match": families[int(pr)] == fam, "check": check, "check_ok": ok_check, **info})
    rate = float(np.mean([r["match"] for r in results]))
    metrics.update({"prompt_family_match_rate": round(rate, 4), "prompt_count": len(results),
                    "prompt_property_checks_passed": f"{sum(checks_ok)}/{len(checks_ok)}",
                    "guidance_scale": a.guidance, "decoding": "greedy"})
    logger.log(f"prompt -> family match {rate:.3f} over {len(results)} held-out prompts; "
               f"property checks {sum(checks_ok)}/{len(checks_ok)}")
    for r in results:
        logger.log(f"  {r['prompt']!r}: {r['recognised']}{'' if r['match'] else ' (MISMATCH)'} "
                   f"extents {r['extents']} euler {r['euler']}"
                   + (f" check {r['check']}: {r['check_ok']}" if r["check"] else ""))

    # -- contact sheet --
    from shapes.dataset import write_png
    tiles = [depth_views(g) for g in grids]
    cols = 3
    h, w = tiles[0].shape
    rows_img = []
    for i in range(0, len(tiles), cols):
        row = tiles[i:i + cols] + [np.full((h, w), 255, np.uint8)] * (cols - len(tiles[i:i + cols]))
        rows_img.append(np.concatenate([np.pad(t, 4, constant_values=200) for t in row], axis=1))
    sheet = os.path.join(a.run_dir, "prompts.png")
    write_png(sheet, np.concatenate(rows_img, axis=0))
    metrics["contact_sheet"] = os.path.relpath(sheet, common.REPO)
    metrics["evaluated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    out = {"metrics": metrics, "prompts": results}
    with open(os.path.join(a.run_dir, "eval.json"), "w") as f:
        json.dump(out, f, indent=2, sort_keys=True)
    logger.metrics(**{k: v for k, v in metrics.items() if not isinstance(v, dict)})
    if not a.no_card:
        card["metrics"] = metrics
        card["metrics"]["prompts"] = [{k: r[k] for k in ("prompt", "recognised", "match")} for r in results]
        with open(os.path.join(a.model_dir, "model.json"), "w") as f:
            json.dump(card, f, indent=2, sort_keys=True)
            f.write("\n")
    logger.log(f"evaluation done in {time.time() - t0:.0f} s; sheet {sheet} (3 prompts per row: front / "
               "side / top depth views)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
