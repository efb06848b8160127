#!/usr/bin/python3
"""Diagnostics of a tessera-tiny shape tokenizer's codes (why the GPT's token accuracy is low):

1. stability: the same held-out shape encoded from two disjoint point samples (--points each) gets the
   same token at how many positions (overall and for the first positions); the GPT cannot predict a
   shape's tokens better than its own encoder agrees with itself, and a shape whose codes depend on the
   point sample is a mixture the GPT must spread its probability over;
2. robustness: held-out IoU when a fraction of the positions get uniformly random codes instead (how
   badly a GPT's wrong token hurts the decoded shape), and when positions are mixed between the two
   samples' encodings.

  /usr/bin/python3 tools/train/code_stability.py [--model-dir assets/models/tessera-tiny] [--shapes 50]
  /usr/bin/python3 tools/train/code_stability.py --ae-ckpt tools/train/records/RUN/ae_ckpt.pt   (no export needed)

Session 9 on the shipped phase-5 model (--shapes 30, 1024 points): token agreement 0.253 (0.80 / 0.77
at positions 0 / 1, 0.22 from position 8 on); IoU 0.813 clean, 0.811 with half the positions from the
other sample, 0.554 / 0.477 / 0.389 with 10 / 25 / 50 % random codes. The codes are unstable beyond the
first few positions, yet interchangeable (mixing two samples' codes decodes as well), while a random code
costs a lot: the GPT's targets are noisy, its mistakes expensive.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common  # noqa: E402
from train import evaluate as ev  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=os.path.join(common.REPO, "assets", "models", "tessera-tiny"))
    p.add_argument("--ae-ckpt", default="",
                   help="measure this autoencoder checkpoint (ae_ckpt.pt, loaded through the export path: "
                        "evaluate.load_ae_checkpoint) instead of an exported --model-dir, e.g. the v2 pilot "
                        "which has no GPT; the encoder's query mode comes from the checkpoint")
    p.add_argument("--data", default=common.DATA_DIR)
    p.add_argument("--shapes", type=int, default=50, help="held-out shapes (spread over the families)")
    p.add_argument("--points", type=int, default=1024, help="encoder points per sample (two disjoint)")
    p.add_argument("--res", type=int, default=32, help="IoU grid resolution")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    common.set_threads(a.threads)
    from shapes.dataset import SPLITS
    from shapes.families import make_shape
    if a.ae_ckpt:
        shape, enc, step = ev.load_ae_checkpoint(a.ae_ckpt)
        what = f"{a.ae_ckpt} (step {step}, encoder queries {enc.queries})"
    else:
        shape, enc, _, _, _, _ = ev.load_exported(a.model_dir)
        what = f"{a.model_dir} (encoder queries {enc.queries})"
    val = common.load_split(os.path.join(a.data, "val"))
    n_pts = val["surface_points"].shape[1]
    if 2 * a.points > n_pts:
        raise SystemExit(f"--points {a.points}: the dataset has {n_pts} surface points per shape "
                         f"(two disjoint samples need {2 * a.points})")
    fams, seed = val["family_names"], int(val["manifest"]["seed"])
    n = val["surface_points"].shape[0]
    rows = np.linspace(0, n - 1, min(a.shapes, n)).astype(int)
    gen = torch.Generator().manual_seed(a.seed)
    agree, ious = [], {}
    with torch.no_grad():
        for r in rows:
            fi = int(val["family_ids"][r])
            sh = make_shape(fams[fi], np.random.default_rng([seed, SPLITS["val"], fi, int(val["indices"][r])]))
            gt = common.sdf_grid(sh.sdf, a.res)
            pts = torch.from_numpy(val["surface_points"][r:r + 1])
            nrm = torch.from_numpy(val["surface_normals"][r:r + 1])
            ids_a = enc.encode_ids(pts[:, :a.points], nrm[:, :a.points])
            ids_b = enc.encode_ids(pts[:, a.points:2 * a.points], nrm[:, a.points:2 * a.points])
            agree.append((ids_a == ids_b).float().numpy()[0])
            variants = {"clean": ids_a}
            for frac in (0.5,):
                variants[f"mixed {frac:.0%} from the other sample"] = torch.where(
                    torch.rand(ids_a.shape, generator=gen) < frac, ids_b, ids_a)
            for frac in (0.1, 0.25, 0.5):
                variants[f"{frac:.0%} random codes"] = torch.where(
                    torch.rand(ids_a.shape, generator=gen) < frac,
                    torch.randint(enc.fill_id, ids_a.shape, generator=gen), ids_a)
            for name, ids in variants.items():
                grid = common.occupancy_grid_from_latents(shape, shape.decode_tokens(ids), a.res)
                ious.setdefault(name, []).append(common.iou(grid, gt))
    agree = np.stack(agree)
    per_pos = agree.mean(0)
    print(f"{what}: {len(rows)} held-out shapes, two disjoint {a.points}-point samples each")
    print(f"token agreement {agree.mean():.3f}; positions 0-7: "
          + " ".join(f"{v:.2f}" for v in per_pos[:8]) + f"; positions 8+: {per_pos[8:].mean():.3f}")
    for name, v in ious.items():
        print(f"IoU ({name}): {np.mean(v):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
