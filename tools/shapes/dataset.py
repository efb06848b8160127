"""Dataset generation: per-sample surface points + normals, occupancy samples, captions.

CLI (run from the repository root):

  /usr/bin/python3 -m tools.shapes.dataset generate --out /tmp/shapes_train.npz \\
      --per-family 100 --seed 1 --split train
  /usr/bin/python3 -m tools.shapes.dataset generate --out /tmp/shapes_dir/ --shard-size 500 ...
  /usr/bin/python3 -m tools.shapes.dataset preview --out /tmp/preview.png --per-family 4

Sample i of family f in split s with seed k is drawn from
``np.random.default_rng([k, SPLITS[s], family_index, i])``: it does not depend
on the other samples, the shard size or the family list order.  The held-out
split ("val") uses a different stream from the same seed; ``--seed`` changes both.

Arrays in an .npz (S samples; see README.md for the full layout):
  surface_points  float32 [S, n_surface, 3]  points on the zero level set
  surface_normals float32 [S, n_surface, 3]  unit outward normals
  occ_points      float32 [S, n_occ, 3]      in [-1.05, 1.05]^3
  occ_labels      uint8   [S, n_occ]         1 = inside (SDF < 0)
  captions, families, params_json: unicode [S]; family_ids, indices: int32 [S]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib
import struct
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import sdf as S
from .captions import make_caption
from .families import FAMILIES, make_shape

BOUND = 1.05  # the model's query cube is [-BOUND, BOUND]^3
SPLITS = {"train": 0, "val": 1}


# ----------------------------------------------------------------------------
# Surface and occupancy sampling.
# ----------------------------------------------------------------------------


def sample_surface(
    f: S.SDF,
    n: int,
    rng: np.random.Generator,
    grid_res: int = 40,
    band: float = 0.02,
    tol: float = 1e-4,
) -> np.ndarray:
    """Returns n points [n, 3] on the zero level set of f, approximately area-uniform.

    Method: evaluate f on a coarse grid, keep the cells the surface may cross
    (|f(centre)| <= half the cell diagonal + band, valid because |grad f| <= 1),
    draw uniform points in those cells, keep the ones in the thin shell
    |f| < band (uniform in a thin shell = area-uniform after projection), then
    project them onto f = 0 with Newton steps along the gradient.
    """
    h = 2 * BOUND / grid_res
    centres_1d = -BOUND + h * (np.arange(grid_res) + 0.5)
    g = np.stack(np.meshgrid(centres_1d, centres_1d, centres_1d, indexing="ij"), -1).reshape(-1, 3)
    near = g[np.abs(f.eval(g)) <= 0.5 * math.sqrt(3) * h + band]
    if near.shape[0] == 0:
        raise ValueError("sample_surface: the SDF has no surface inside the query cube")
    out: List[np.ndarray] = []
    have = 0
    batch = max(4 * n, 4096)
    for _ in range(64):
        cand = near[rng.integers(near.shape[0], size=batch)] + rng.uniform(-h / 2, h / 2, size=(batch, 3))
        d = f.eval(cand)
        cand = cand[np.abs(d) < band]
        for _it in range(4):
            d = f.eval(cand)
            gr = S.gradient(f, cand)
            g2 = np.maximum(np.einsum("ij,ij->i", gr, gr), 1e-12)
            cand = cand - (d / g2)[:, None] * gr
        d = f.eval(cand)
        cand = cand[(np.abs(d) < tol) & np.all(np.abs(cand) <= BOUND, axis=1)]
        out.append(cand)
        have += cand.shape[0]
        if have >= n:
            break
    pts = np.concatenate(out)
    if pts.shape[0] < n:
        raise RuntimeError(f"sample_surface: only {pts.shape[0]} of {n} points converged")
    return pts[rng.permutation(pts.shape[0])[:n]]


def sample_edges(
    f: S.SDF,
    n: int,
    rng: np.random.Generator,
    jitter: float = 0.04,
    max_shift: float = 0.06,
    tol: float = 1e-4,
    tries: int = 4,
) -> np.ndarray:
    """Up to n points [m, 3] (m <= n; 0 for shapes without sharp features) on the surface of f next to
    its edges and rims, spread along them by length.

    The generator knows where they are: every primitive lists its sharp curves (``SDF.edge_curves``:
    box edges, cylinder / ring / cone / cut-sphere rims, pyramid edges and apex, extruded profiles'
    corners and outlines), carried through translations, rotations and unions. A point on such a curve,
    moved by up to ``jitter`` in a random direction, is projected onto the final surface with Newton
    steps; from outside a rounded part (``Round``, radius 0.04 in the families) it lands on the rounded
    edge itself. Curves hidden inside another part (a table leg's top under the table top) project
    farther than ``max_shift`` beyond their rounding offset and are dropped.
    """
    curves = f.edge_curves()
    if not curves or n <= 0:
        return np.zeros((0, 3))
    out: List[np.ndarray] = []
    have = 0
    for _ in range(tries):
        raw, off = S.sample_curves(curves, 2 * n, rng)
        u = rng.normal(size=raw.shape)
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
        cand = raw + jitter * rng.random((raw.shape[0], 1)) * u
        for _it in range(6):
            d = f.eval(cand)
            gr = S.gradient(f, cand)
            g2 = np.maximum(np.einsum("ij,ij->i", gr, gr), 1e-12)
            cand = cand - (d / g2)[:, None] * gr
        ok = (np.abs(f.eval(cand)) < tol) & np.all(np.abs(cand) <= BOUND, axis=1) & \
            (np.linalg.norm(cand - raw, axis=1) <= off + max_shift)
        out.append(cand[ok])
        have += int(ok.sum())
        if have >= n:
            break
    pts = np.concatenate(out)
    return pts[rng.permutation(pts.shape[0])[:n]]


def occupancy_samples(
    f: S.SDF,
    surface: np.ndarray,
    n: int,
    rng: np.random.Generator,
    near_fraction: float = 0.5,
    sigmas: Sequence[float] = (0.01, 0.04),
):
    """Returns (points [n, 3], labels uint8 [n]): near-surface jitter plus uniform points.

    ``near_fraction`` of the points are ``surface`` points (cycled) plus
    Gaussian noise whose sigma is drawn per point from ``sigmas``; the rest are
    uniform in [-BOUND, BOUND]^3.  Labels are 1 where f < 0 (inside).
    """
    n_near = int(round(n * near_fraction))
    idx = rng.integers(surface.shape[0], size=n_near)
    sig = np.asarray(sigmas, dtype=np.float64)[rng.integers(len(sigmas), size=n_near)]
    near = surface[idx] + rng.normal(size=(n_near, 3)) * sig[:, None]
    uni = rng.uniform(-BOUND, BOUND, size=(n - n_near, 3))
    pts = np.clip(np.concatenate([near, uni]), -BOUND, BOUND)
    pts = pts[rng.permutation(n)]
    return pts, (f.eval(pts) < 0).astype(np.uint8)


def generate_sample(
    family: str,
    index: int,
    seed: int,
    split: str = "train",
    n_surface: int = 2048,
    n_occ: int = 4096,
    near_fraction: float = 0.5,
    sigmas: Sequence[float] = (0.01, 0.04),
) -> Dict[str, object]:
    """One sample as a dict (see the module docstring for the fields)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    fam_id = FAMILIES.index(family) if family in FAMILIES else -1
    if fam_id < 0:
        raise ValueError(f"unknown family {family!r}")
    rng = np.random.default_rng([int(seed), SPLITS[split], fam_id, int(index)])
    shape = make_shape(family, rng)
    caption = make_caption(shape, rng)
    n_near = int(round(n_occ * near_fraction))
    surf = sample_surface(shape.sdf, n_surface + n_near, rng)
    enc, near_src = surf[:n_surface], surf[n_surface:]
    nrm = S.normals(shape.sdf, enc)
    occ_pts, occ_lab = occupancy_samples(shape.sdf, near_src if n_near else enc, n_occ, rng, near_fraction, sigmas)
    return {
        "family": family,
        "family_id": fam_id,
        "index": int(index),
        "caption": caption,
        "params": shape.params,
        "extents": shape.extents.astype(np.float32),
        "surface_points": enc.astype(np.float32),
        "surface_normals": nrm.astype(np.float32),
        "occ_points": occ_pts.astype(np.float32),
        "occ_labels": occ_lab,
        "shape": shape,
    }


def generate(
    per_family: int,
    seed: int,
    split: str = "train",
    families: Optional[Sequence[str]] = None,
    start: int = 0,
    progress: Optional[Callable[[int, int], None]] = None,
    **kw,
) -> Dict[str, np.ndarray]:
    """Samples ``per_family`` shapes (indices start..start+per_family-1) of each family, stacked."""
    families = list(families or FAMILIES)
    samples = []
    total = per_family * len(families)
    for i in range(start, start + per_family):
        for fam in families:
            samples.append(generate_sample(fam, i, seed, split, **kw))
            if progress:
                progress(len(samples), total)
    return stack(samples, seed, split)


def select_indices(family: str, seed: int, split: str, noun: str, count: int, start: int = 0,
                   limit: int = 1_000_000) -> List[int]:
    """The first ``count`` indices >= ``start`` of ``family`` whose shape may be called ``noun`` (one of
    its true nouns, captions.NOUN_RULES): e.g. the rare near-cubic boxes ("cube", ratio <= 1.15, ~1 % of
    boxes). Only the shapes' parameters are drawn (cheap); the samples keep their own indices, so they
    are the same shapes as in a full generation of that range."""
    from .captions import true_nouns
    fam_id = FAMILIES.index(family)
    out = []
    for i in range(start, start + limit):
        if len(out) >= count:
            break
        if noun in true_nouns(make_shape(family, np.random.default_rng([int(seed), SPLITS[split], fam_id, i]))):
            out.append(i)
    return out


def stack(samples: List[Dict[str, object]], seed: int, split: str) -> Dict[str, np.ndarray]:
    return {
        "surface_points": np.stack([s["surface_points"] for s in samples]),
        "surface_normals": np.stack([s["surface_normals"] for s in samples]),
        "occ_points": np.stack([s["occ_points"] for s in samples]),
        "occ_labels": np.stack([s["occ_labels"] for s in samples]),
        "extents": np.stack([s["extents"] for s in samples]),
        "captions": np.array([s["caption"] for s in samples], dtype=str),
        "families": np.array([s["family"] for s in samples], dtype=str),
        "family_ids": np.array([s["family_id"] for s in samples], dtype=np.int32),
        "indices": np.array([s["index"] for s in samples], dtype=np.int32),
        "params_json": np.array([json.dumps(s["params"], sort_keys=True) for s in samples], dtype=str),
        "family_names": np.array(FAMILIES, dtype=str),
        "seed": np.array(seed, dtype=np.int64),
        "split": np.array(split),
    }


# ----------------------------------------------------------------------------
# Dense grids and IoU (used by training / evaluation).
# ----------------------------------------------------------------------------


def dense_grid(res: int, bound: float = BOUND) -> np.ndarray:
    """Points [res^3, 3] of a res^3 grid over [-bound, bound]^3 (inclusive, x-major 'ij' order)."""
    if res < 2:
        raise ValueError(f"grid resolution must be >= 2, got {res}")
    t = np.linspace(-bound, bound, res)
    return np.stack(np.meshgrid(t, t, t, indexing="ij"), -1).reshape(-1, 3)


def occupancy_grid(
    inside: Callable[[np.ndarray], np.ndarray], res: int = 64, bound: float = BOUND, chunk: int = 262144
) -> np.ndarray:
    """bool [res, res, res]: inside(points [N, 3]) -> bool [N], evaluated in chunks on dense_grid.

    For an SDF pass ``lambda p: f(p) < 0``; for a model logit ``lambda p: logit(p) > 0``.
    """
    pts = dense_grid(res, bound)
    out = np.empty(pts.shape[0], dtype=bool)
    for i in range(0, pts.shape[0], chunk):
        out[i : i + chunk] = np.asarray(inside(pts[i : i + chunk])).reshape(-1).astype(bool)
    return out.reshape(res, res, res)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two boolean occupancy grids of equal shape (1.0 if both empty)."""
    a = np.asarray(a, dtype=bool)
    b = np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"iou: shapes differ {a.shape} vs {b.shape}")
    union = np.count_nonzero(a | b)
    return 1.0 if union == 0 else np.count_nonzero(a & b) / union


def iou_functions(inside_a, inside_b, res: int = 64, bound: float = BOUND) -> float:
    """IoU of two occupancy functions (points -> bool) on a res^3 dense grid."""
    return iou(occupancy_grid(inside_a, res, bound), occupancy_grid(inside_b, res, bound))


# ----------------------------------------------------------------------------
# Preview rendering (sphere tracing, orthographic, Lambert shading).
# ----------------------------------------------------------------------------


def render(f: S.SDF, size: int = 128, azimuth: float = 35.0, elevation: float = 25.0) -> np.ndarray:
    """Grey-scale uint8 [size, size] orthographic view of f from (azimuth, elevation) degrees."""
    az, el = math.radians(azimuth), math.radians(elevation)
    view = -np.array([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)])
    right = np.cross(view, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, view)
    t = np.linspace(1.3, -1.3, size)
    v, u = np.meshgrid(t, -t, indexing="ij")
    origins = u.reshape(-1, 1) * right + v.reshape(-1, 1) * up - 3.0 * view
    dist = np.zeros(origins.shape[0])
    active = np.ones(origins.shape[0], dtype=bool)
    hit = np.zeros(origins.shape[0], dtype=bool)
    for _ in range(160):
        idx = np.nonzero(active)[0]
        if idx.size == 0:
            break
        d = f.eval(origins[idx] + dist[idx, None] * view)
        done = d < 1e-3
        hit[idx[done]] = True
        dist[idx] += np.maximum(d, 1e-3) * 0.9
        active[idx[done | (dist[idx] > 6.0)]] = False
    img = np.full(origins.shape[0], 255, dtype=np.uint8)
    if hit.any():
        p = origins[hit] + dist[hit, None] * view
        n = S.normals(f, p)
        light = -view + np.array([0.3, 0.8, 0.0])
        light /= np.linalg.norm(light)
        shade = 0.25 + 0.75 * np.clip(n @ light, 0, 1)
        img[hit] = (shade * 230).astype(np.uint8)
    return img.reshape(size, size)


def write_png(path: str, img: np.ndarray) -> None:
    """Writes a grey-scale uint8 [H, W] image as PNG (standard library only)."""
    h, w = img.shape
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    with open(path, "wb") as fh:
        fh.write(png)


# ----------------------------------------------------------------------------
# CLI.
# ----------------------------------------------------------------------------


def _save_npz(path: str, arrays: Dict[str, np.ndarray]) -> None:
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _cmd_generate(a) -> int:
    families = a.families.split(",") if a.families else FAMILIES
    for fam in families:
        if fam not in FAMILIES:
            print(f"error: --families: unknown family {fam!r} (known: {', '.join(FAMILIES)})", file=sys.stderr)
            return 2
    sigmas = [float(s) for s in a.sigmas.split(",")]
    kw = dict(n_surface=a.n_surface, n_occ=a.n_occ, near_fraction=a.near_fraction, sigmas=sigmas)
    t0 = time.time()
    total = a.per_family * len(families)
    if a.select_noun:
        # Only the shapes a noun fits (e.g. --families box --select-noun cube --start 300): extra
        # training shapes for a rare word, from indices past the main set's.
        if a.out.endswith(".npz"):
            print("error: --select-noun writes a directory (no .npz)", file=sys.stderr)
            return 2
        os.makedirs(a.out, exist_ok=True)
        picked = {fam: select_indices(fam, a.seed, a.split, a.select_noun, a.per_family, a.start)
                  for fam in families}
        samples = [generate_sample(fam, i, a.seed, a.split, **kw) for fam in families for i in picked[fam]]
        total = len(samples)
        files = [f"{a.split}_00000.npz"]
        _save_npz(os.path.join(a.out, files[0]), stack(samples, a.seed, a.split))
        manifest = {"seed": a.seed, "split": a.split, "families": families, "per_family": a.per_family,
                    "samples": total, "shards": files, "select_noun": a.select_noun, "start": a.start,
                    "indices": {f: v for f, v in picked.items()}, **kw}
        with open(os.path.join(a.out, "manifest.json"), "w") as fh:
            json.dump(manifest, fh, indent=2)
    elif a.out.endswith(".npz"):
        arrays = generate(a.per_family, a.seed, a.split, families, **kw)
        _save_npz(a.out, arrays)
        files = [os.path.basename(a.out)]
    else:
        os.makedirs(a.out, exist_ok=True)
        per_shard = max(1, a.shard_size // len(families))
        files = []
        for start in range(0, a.per_family, per_shard):
            count = min(per_shard, a.per_family - start)
            arrays = generate(count, a.seed, a.split, families, start=start, **kw)
            name = f"{a.split}_{len(files):05d}.npz"
            _save_npz(os.path.join(a.out, name), arrays)
            files.append(name)
        manifest = {"seed": a.seed, "split": a.split, "families": families, "per_family": a.per_family,
                    "samples": total, "shards": files, **kw}
        with open(os.path.join(a.out, "manifest.json"), "w") as fh:
            json.dump(manifest, fh, indent=2)
    dt = time.time() - t0
    print(f"wrote {total} samples ({len(files)} file(s)) to {a.out} in {dt:.1f} s "
          f"({1000 * dt / max(total, 1):.1f} ms/sample)")
    return 0


def _cmd_preview(a) -> int:
    families = a.families.split(",") if a.families else FAMILIES
    rows = []
    for fam in families:
        row = []
        for i in range(a.per_family):
            fam_id = FAMILIES.index(fam)
            rng = np.random.default_rng([a.seed, SPLITS[a.split], fam_id, i])
            shape = make_shape(fam, rng)
            print(f"{fam:9s} #{i}: {make_caption(shape, rng)}")
            row.append(render(shape.sdf, a.size))
        rows.append(np.concatenate(row, axis=1))
    write_png(a.out, np.concatenate(rows, axis=0))
    print(f"wrote {a.out}: rows = {', '.join(families)}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate samples into an .npz or a directory of shards")
    g.add_argument("--out", required=True, help="path ending in .npz, or a directory for shards + manifest.json")
    g.add_argument("--per-family", type=int, default=100)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--split", choices=sorted(SPLITS), default="train")
    g.add_argument("--families", default="", help="comma-separated subset (default: all)")
    g.add_argument("--n-surface", type=int, default=2048)
    g.add_argument("--n-occ", type=int, default=4096)
    g.add_argument("--near-fraction", type=float, default=0.5)
    g.add_argument("--sigmas", default="0.01,0.04", help="near-surface jitter sigmas, comma-separated")
    g.add_argument("--shard-size", type=int, default=1000, help="samples per shard (directory output)")
    g.add_argument("--select-noun", default="",
                   help="keep only shapes this noun fits (e.g. cube): --per-family of them per family, "
                        "scanning indices from --start; one shard (directory output)")
    g.add_argument("--start", type=int, default=0, help="first index scanned by --select-noun")
    g.set_defaults(fn=_cmd_generate)
    v = sub.add_parser("preview", help="render a contact sheet PNG (rows = families)")
    v.add_argument("--out", required=True)
    v.add_argument("--per-family", type=int, default=4)
    v.add_argument("--seed", type=int, default=1)
    v.add_argument("--split", choices=sorted(SPLITS), default="train")
    v.add_argument("--families", default="")
    v.add_argument("--size", type=int, default=96)
    v.set_defaults(fn=_cmd_preview)
    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
