#!/usr/bin/python3
"""Training images for the tessera-tiny diffusion model: the procedural shapes (tools/shapes) rendered
at 64x64 in colour, with captions that name the shape, its colour, material and background.

Geometry: every sample is one shape of tools/shapes/families.py seen by a perspective camera 3.6 units
from the origin, 18-32 degrees above the horizon, from a 3/4 view (azimuth 35 +- 20 degrees; +Y up,
shapes as tools/shapes lays them out). Rays are sphere-traced over the shape's SDF (numpy, vectorised
over the rays that enter the shape's bounding box); normals by finite differences. One geometry is
shaded SHADINGS_PER_GEOMETRY times (the expensive part is the trace, the shading is cheap) with
independent colour / material / background draws.

Shading (sRGB values used directly, no tone mapping): hemisphere ambient + Lambert key light from the
camera's upper left; "shiny"/"glossy" adds a white Blinn-Phong highlight; "metal"/"metallic" darkens
the diffuse term and adds a colour-tinted sky reflection and a sharp highlight. Backgrounds: flat
white, grey, dark, beige, or a vertical sky-blue gradient.

Captions: [article] [material?] [colour?] [size/proportion adjectives] [noun] [on a ... background?],
where the adjectives and nouns come from tools/shapes/captions.py rules (true for the shape), e.g.
"a shiny blue tall cylinder on a grey background", "a red torus", "a render of a metal small mug".
The colour is named in 92 % of the captions, the material in ~60 % (always when not matte... see
_caption), the background in 50 %.

Dataset: sample i of family f uses np.random.default_rng([seed, 7, f, i]), so it is independent of
sharding. Output folder (default .cache/tessera-diffusion-data/, regenerated from the seed, never
committed): shard_NNN.npz (images uint8 [n,64,64,3], captions) while rendering (resumable), then
images.npy, captions.json, meta.json (families, colours, materials, backgrounds, seed, counts).

  /usr/bin/python3 tools/train/diffusion/render.py [--geometries 10000] [--seed 0] [--out DIR]
  /usr/bin/python3 tools/train/diffusion/render.py --sheet out.png --geometries 38   # contact sheet

Depth hints (the depth ControlNet, train_controlnet.py): `--depth` re-traces every geometry of the dataset
in the same order and writes .cache/tessera-diffusion-depth/depth.npy (uint8 [N, 64, 64], row k = the depth
map of images.npy row k; all shadings of a geometry share it) + meta.json. It also re-shades every sample
and checks that the images equal images.npy bit for bit (so the rows line up); images and captions are
unchanged by the depth code (the trace is the same, the depth is read off its hit points).
Convention (the one the engine renders at inference): per pixel z = view-space depth of the first hit =
distance along the camera's forward axis (ray distance x dot(ray direction, forward)); over the object's
pixels v = z_min / z (the nearest point 1, farther points darker, like MiDaS's normalised inverse depth),
background 0; stored as round(v * 255), the same value in R, G and B; networks get uint8 / 255 in [0, 1].

  /usr/bin/python3 tools/train/diffusion/render.py --depth [--depth-out DIR]
"""

import argparse
import json
import math
import os
import struct
import sys
import time
import zlib

import numpy as np

TOOLS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO = os.path.dirname(TOOLS)
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)

from shapes import captions as CAP  # noqa: E402
from shapes.families import FAMILIES, make_shape  # noqa: E402

DATA_DIR = os.path.join(REPO, ".cache", "tessera-diffusion-data")
DEPTH_DIR = os.path.join(REPO, ".cache", "tessera-diffusion-depth")
SIZE = 64
SHADINGS_PER_GEOMETRY = 3
SHARD_GEOMETRIES = 500

COLOURS = {  # sRGB albedo in [0, 1]
    "red": (0.85, 0.12, 0.10), "green": (0.15, 0.62, 0.20), "blue": (0.15, 0.30, 0.85),
    "yellow": (0.95, 0.85, 0.15), "orange": (0.96, 0.50, 0.10), "purple": (0.55, 0.20, 0.72),
    "white": (0.93, 0.93, 0.93), "black": (0.09, 0.09, 0.09), "grey": (0.50, 0.50, 0.50),
    "pink": (0.97, 0.55, 0.72), "brown": (0.50, 0.30, 0.14), "cyan": (0.12, 0.80, 0.85),
}
# material -> words that may name it (matte is often left unsaid)
MATERIALS = {"matte": ["matte"], "shiny": ["shiny", "glossy"], "metal": ["metal", "metallic"]}
BACKGROUNDS = {
    "white": ((0.96, 0.96, 0.96), (0.96, 0.96, 0.96)),
    "grey": ((0.55, 0.55, 0.55), (0.55, 0.55, 0.55)),
    "dark": ((0.10, 0.10, 0.12), (0.10, 0.10, 0.12)),
    "beige": ((0.93, 0.87, 0.74), (0.93, 0.87, 0.74)),
    "sky blue": ((0.40, 0.62, 0.95), (0.85, 0.92, 1.00)),  # top, bottom of the gradient
}


def extra_vocabulary():
    """Words the captions add to tools/shapes' vocabulary."""
    words = set(COLOURS) | {"on", "background"}
    for ws in MATERIALS.values():
        words.update(ws)
    for b in BACKGROUNDS:
        words.update(b.split())
    return sorted(words)


# ---- camera + sphere tracing ---------------------------------------------------------------------------

def camera_rays(azimuth_deg, elevation_deg, dist=3.6, tan_half_fov=0.42, size=SIZE):
    """Ray origin [3] and unit directions [size*size, 3] (row-major, row 0 at the top)."""
    az, el = math.radians(azimuth_deg), math.radians(elevation_deg)
    eye = dist * np.array([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)])
    fwd = -eye / np.linalg.norm(eye)
    right = np.cross(fwd, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    s = (np.arange(size) + 0.5) / size * 2 - 1
    v, u = np.meshgrid(-s, s, indexing="ij")
    d = fwd + tan_half_fov * (u.reshape(-1, 1) * right + v.reshape(-1, 1) * up)
    return eye, d / np.linalg.norm(d, axis=1, keepdims=True), right, up, fwd


def trace(f, eye, dirs, lo, hi, max_iter=80, eps=2e-3):
    """Sphere tracing from eye along dirs, only over the segment inside the box [lo, hi].
    Returns hit mask [N] and hit points [N, 3] (undefined where not hit)."""
    n = dirs.shape[0]
    inv = 1.0 / np.where(np.abs(dirs) < 1e-12, 1e-12, dirs)
    t0 = (lo - 0.02 - eye) * inv
    t1 = (hi + 0.02 - eye) * inv
    tn = np.minimum(t0, t1).max(axis=1)
    tf = np.maximum(t0, t1).min(axis=1)
    tn = np.maximum(tn, 0.0)
    idx = np.nonzero(tf > tn)[0]
    t = tn[idx].copy()
    tfar = tf[idx]
    hit = np.zeros(n, dtype=bool)
    t_hit = np.zeros(n)
    for _ in range(max_iter):
        if idx.size == 0:
            break
        d = f.eval(eye + t[:, None] * dirs[idx])
        done = d < eps
        hit[idx[done]] = True
        t_hit[idx[done]] = t[done]
        t = t + np.maximum(d, eps * 0.5)
        keep = ~done & (t < tfar)
        idx, t, tfar = idx[keep], t[keep], tfar[keep]
    pts = eye + t_hit[:, None] * dirs
    return hit, pts


def normals(f, p, eps=2e-3):
    k = np.array([[1, -1, -1], [-1, -1, 1], [-1, 1, -1], [1, 1, 1]], dtype=np.float64)
    q = (p[None] + eps * k[:, None]).reshape(-1, 3)
    v = f.eval(q).reshape(4, -1)
    g = np.einsum("kn,kd->nd", v, k)
    return g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)


def render_geometry(shape, azimuth, elevation):
    """Geometry buffers of one view: hit mask [S*S], normals [S*S, 3] (0 off the object), view dirs,
    light direction, and z [S*S]: view-space depth of the hit (along the camera's forward axis; 0 off
    the object)."""
    eye, dirs, right, up, fwd = camera_rays(azimuth, elevation)
    lo, hi = shape.sdf.bounds()
    hit, pts = trace(shape.sdf, eye, dirs, lo, hi)
    nrm = np.zeros_like(dirs)
    if hit.any():
        nrm[hit] = normals(shape.sdf, pts[hit])
    light = -fwd + 0.9 * up - 0.7 * right
    light /= np.linalg.norm(light)
    z = np.where(hit, (pts - eye) @ fwd, 0.0)  # = ray distance x dot(dir, fwd)
    return {"hit": hit, "n": nrm, "dirs": dirs, "light": light, "z": z}


def depth_map(geo):
    """uint8 [S, S] depth hint of one geometry: v = z_min / z over the object's pixels (nearest = 255),
    0 on the background (module docstring, "Depth hints")."""
    hit, z = geo["hit"], geo["z"]
    v = np.zeros(hit.shape)
    if hit.any():
        v[hit] = z[hit].min() / z[hit]
    return (v * 255 + 0.5).astype(np.uint8).reshape(SIZE, SIZE)


def shade(geo, colour, material, background):
    """uint8 [S, S, 3] image of one geometry with an albedo colour [3], material name and background."""
    hit, n, dirs, light = geo["hit"], geo["n"], geo["dirs"], geo["light"]
    top, bottom = (np.asarray(c) for c in BACKGROUNDS[background])
    rows = np.linspace(0.0, 1.0, SIZE)[:, None, None]
    img = np.broadcast_to(top * (1 - rows) + bottom * rows, (SIZE, SIZE, 3)).reshape(-1, 3).copy()
    if hit.any():
        nh, v = n[hit], -dirs[hit]
        albedo = np.asarray(colour)
        ndl = np.clip(nh @ light, 0.0, 1.0)[:, None]
        amb = (0.22 + 0.13 * nh[:, 1:2])  # hemisphere ambient: brighter on upward faces
        h = light + v
        h /= np.linalg.norm(h, axis=1, keepdims=True)
        ndh = np.clip(np.einsum("nd,nd->n", nh, h), 0.0, 1.0)[:, None]
        if material == "metal":
            r = 2 * np.einsum("nd,nd->n", nh, v)[:, None] * nh - v  # reflected view direction
            sky = 0.35 + 0.65 * np.clip(0.5 + 0.5 * r[:, 1:2], 0, 1)
            col = albedo * (0.35 * (amb + 0.8 * ndl) + 0.75 * sky * (0.4 + 0.6 * ndl))
            col = col + (0.5 * albedo + 0.5) * 0.9 * ndh ** 60
        else:
            col = albedo * (amb + 0.85 * ndl)
            if material == "shiny":
                col = col + 0.65 * ndh ** 35
        img[hit] = col
    return (np.clip(img, 0.0, 1.0) * 255 + 0.5).astype(np.uint8).reshape(SIZE, SIZE, 3)


# ---- captions ------------------------------------------------------------------------------------------

def _caption(shape, colour, material, background, rng):
    m = CAP.metrics(shape)
    nouns = CAP.true_nouns(shape)
    noun = nouns[int(rng.integers(len(nouns)))]
    groups = []
    for _g, words in CAP.adjective_groups(shape.family):
        ok = [w for w, cond in words if CAP.holds(cond, m)]
        if ok:
            groups.append(ok)
    n_adj = min(int(rng.choice(3, p=[0.45, 0.4, 0.15])), len(groups))
    chosen = sorted(rng.choice(len(groups), size=n_adj, replace=False)) if n_adj else []
    words = [groups[i][int(rng.integers(len(groups[i])))] for i in chosen] + [noun]
    if rng.random() < 0.92:
        words = [colour] + words
    say_material = rng.random() < (0.35 if material == "matte" else 0.85)
    if say_material:
        options = MATERIALS[material]
        words = [options[int(rng.integers(len(options)))]] + words
    text = CAP.article(words[0]) + " " + " ".join(words)
    if rng.random() < 0.5:
        text += f" on a {background} background"
    if rng.random() < 0.15:
        text = ("a render of " if rng.random() < 0.5 else "a model of ") + text
    return text


def sample(seed, family_index, i, with_depth=False):
    """Geometry of sample (family_index, i) and SHADINGS_PER_GEOMETRY (image, caption, labels); with
    with_depth, (that list, the geometry's depth_map)."""
    rng = np.random.default_rng([seed, 7, family_index, i])
    fam = FAMILIES[family_index]
    shape = make_shape(fam, rng)
    geo = render_geometry(shape, 35.0 + rng.uniform(-20, 20), rng.uniform(18, 32))
    out = []
    names = list(COLOURS)
    bgs = list(BACKGROUNDS)
    for _ in range(SHADINGS_PER_GEOMETRY):
        colour = names[int(rng.integers(len(names)))]
        material = ["matte", "shiny", "metal"][int(rng.choice(3, p=[0.45, 0.35, 0.2]))]
        bg = bgs[int(rng.integers(len(bgs)))]
        while bg == colour or (bg == "dark" and colour == "black"):
            bg = bgs[int(rng.integers(len(bgs)))]
        albedo = np.clip(np.asarray(COLOURS[colour]) + rng.uniform(-0.04, 0.04, 3), 0, 1)
        img = shade(geo, albedo, material, bg)
        out.append((img, _caption(shape, colour, material, bg, rng),
                    {"family": fam, "colour": colour, "material": material, "background": bg}))
    return (out, depth_map(geo)) if with_depth else out


def geometry_order(n_geometries):
    """(family_index, i) of the first n_geometries samples, families interleaved."""
    nf = len(FAMILIES)
    return [(k % nf, k // nf) for k in range(n_geometries)]


# ---- files ---------------------------------------------------------------------------------------------

def write_png(path, img):
    """uint8 [H, W, 3] RGB -> PNG (zlib, standard library)."""
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + np.ascontiguousarray(img[y]).tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(png)
    os.replace(tmp, path)


def grid(images, cols, pad=2, fill=255):
    """[N, H, W, 3] -> one contact sheet image."""
    n, h, w, _ = images.shape
    rows = (n + cols - 1) // cols
    out = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad, 3), fill, np.uint8)
    for k in range(n):
        r, c = divmod(k, cols)
        out[pad + r * (h + pad):pad + r * (h + pad) + h, pad + c * (w + pad):pad + c * (w + pad) + w] = images[k]
    return out


def load_dataset(folder=DATA_DIR):
    """images uint8 [N,64,64,3], captions [N], meta dict; FileNotFoundError when not rendered yet."""
    meta_path = os.path.join(folder, "meta.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{meta_path}: dataset not rendered (run tools/train/diffusion/render.py)")
    with open(meta_path) as f:
        meta = json.load(f)
    with open(os.path.join(folder, "captions.json")) as f:
        caps = json.load(f)
    return np.load(os.path.join(folder, "images.npy"), mmap_mode="r"), caps, meta


def render_dataset(out, n_geometries, seed, log=print):
    os.makedirs(out, exist_ok=True)
    meta_path = os.path.join(out, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("seed") == seed and meta.get("geometries") == n_geometries:
            log(f"dataset already rendered in {out} ({meta['images']} images)")
            return meta
        raise SystemExit(f"{meta_path}: rendered with other settings (seed {meta.get('seed')}, "
                         f"{meta.get('geometries')} geometries); delete the folder to re-render")
    order = geometry_order(n_geometries)
    shards = [order[k:k + SHARD_GEOMETRIES] for k in range(0, len(order), SHARD_GEOMETRIES)]
    t0 = time.time()
    for si, part in enumerate(shards):
        path = os.path.join(out, f"shard_{si:03d}_s{seed}.npz")
        if os.path.exists(path):
            continue
        ts = time.time()
        imgs, caps, labels = [], [], []
        for fi, i in part:
            for img, cap, lab in sample(seed, fi, i):
                imgs.append(img)
                caps.append(cap)
                labels.append(lab)
        tmp = path + ".tmp.npz"
        np.savez(tmp, images=np.stack(imgs), captions=np.array(caps),
                 labels=np.array([json.dumps(x) for x in labels]))
        os.replace(tmp, path)
        log(f"shard {si + 1}/{len(shards)}: {len(part)} geometries in {time.time() - ts:.1f} s "
            f"({(time.time() - ts) / len(part) * 1000:.0f} ms each)")
    imgs, caps, labels = [], [], []
    for si in range(len(shards)):
        z = np.load(os.path.join(out, f"shard_{si:03d}_s{seed}.npz"))
        imgs.append(z["images"])
        caps += [str(c) for c in z["captions"]]
        labels += [json.loads(str(x)) for x in z["labels"]]
    images = np.concatenate(imgs)
    np.save(os.path.join(out, "images.npy.tmp.npy"), images)
    os.replace(os.path.join(out, "images.npy.tmp.npy"), os.path.join(out, "images.npy"))
    with open(os.path.join(out, "captions.json"), "w") as f:
        json.dump(caps, f)
    with open(os.path.join(out, "labels.json"), "w") as f:
        json.dump(labels, f)
    meta = {"seed": seed, "geometries": n_geometries, "images": int(images.shape[0]),
            "shadings_per_geometry": SHADINGS_PER_GEOMETRY, "size": SIZE, "families": FAMILIES,
            "colours": list(COLOURS), "materials": list(MATERIALS), "backgrounds": list(BACKGROUNDS),
            "render_seconds": round(time.time() - t0, 1),
            "rng": "np.random.default_rng([seed, 7, family_index, i]); families interleaved"}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(meta_path + ".tmp", meta_path)
    for si in range(len(shards)):
        os.remove(os.path.join(out, f"shard_{si:03d}_s{seed}.npz"))
    write_png(os.path.join(out, "contact_sheet.png"), grid(images[:120 * SHADINGS_PER_GEOMETRY:SHADINGS_PER_GEOMETRY], 12))
    log(f"rendered {images.shape[0]} images ({n_geometries} geometries) in {time.time() - t0:.0f} s -> {out}")
    return meta


def load_depth(folder=DEPTH_DIR):
    """uint8 [N, 64, 64] depth hints, row k for images.npy row k; FileNotFoundError when not built."""
    path = os.path.join(folder, "depth.npy")
    if not os.path.exists(os.path.join(folder, "meta.json")):
        raise FileNotFoundError(f"{path}: depth hints not built (run tools/train/diffusion/render.py --depth)")
    return np.load(path, mmap_mode="r")


def render_depth(data, out, log=print):
    """depth.npy for the dataset in `data` (same seed, geometries and order), every re-shaded image
    checked against images.npy."""
    images, _, meta = load_dataset(data)
    meta_path = os.path.join(out, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            dmeta = json.load(f)
        if dmeta.get("seed") == meta["seed"] and dmeta.get("geometries") == meta["geometries"]:
            log(f"depth hints already built in {out}")
            return dmeta
        raise SystemExit(f"{meta_path}: built for another dataset; delete the folder to rebuild")
    os.makedirs(out, exist_ok=True)
    spg = meta["shadings_per_geometry"]
    if spg != SHADINGS_PER_GEOMETRY or images.shape[0] != meta["geometries"] * spg:
        raise SystemExit(f"{data}: {images.shape[0]} images, {spg} shadings per geometry: not this render.py's")
    depth = np.zeros((images.shape[0], SIZE, SIZE), np.uint8)
    t0 = time.time()
    order = geometry_order(meta["geometries"])
    for g, (fi, i) in enumerate(order):
        shaded, d = sample(meta["seed"], fi, i, with_depth=True)
        for k, (img, _cap, _lab) in enumerate(shaded):
            if not np.array_equal(img, images[g * spg + k]):
                raise SystemExit(f"geometry {g} shading {k}: re-rendered image differs from images.npy "
                                 "(render.py changed since the dataset was rendered?)")
        depth[g * spg:(g + 1) * spg] = d
        if (g + 1) % 1000 == 0:
            log(f"depth {g + 1}/{len(order)} geometries ({time.time() - t0:.0f} s)")
    np.save(os.path.join(out, "depth.npy.tmp.npy"), depth)
    os.replace(os.path.join(out, "depth.npy.tmp.npy"), os.path.join(out, "depth.npy"))
    dmeta = {"seed": meta["seed"], "geometries": meta["geometries"], "images": int(depth.shape[0]),
             "data": os.path.relpath(data, REPO), "checked_images": int(depth.shape[0]),
             "seconds": round(time.time() - t0, 1),
             "convention": "z = view-space depth (along the camera's forward axis); v = z_min / z over the "
                           "object's pixels, 0 on the background; uint8 round(v * 255); row k = images.npy row k"}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(dmeta, f, indent=1)
    os.replace(meta_path + ".tmp", meta_path)
    log(f"depth hints of {depth.shape[0]} images ({meta['geometries']} geometries; every image re-shaded "
        f"equal to images.npy) in {time.time() - t0:.0f} s -> {out}")
    return dmeta


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=DATA_DIR)
    p.add_argument("--geometries", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sheet", default="", help="only write a contact sheet of the first --geometries")
    p.add_argument("--depth", action="store_true", help="build the depth hints of the dataset in --out")
    p.add_argument("--depth-out", default=DEPTH_DIR)
    a = p.parse_args(argv)
    if a.depth:
        render_depth(a.out, a.depth_out,
                     log=lambda m: print(time.strftime("%Y-%m-%d %H:%M:%S ") + m, flush=True))
        return 0
    if a.sheet:
        t0 = time.time()
        imgs, caps = [], []
        for fi, i in geometry_order(a.geometries):
            for img, cap, _ in sample(a.seed, fi, i)[:2]:
                imgs.append(img)
                caps.append(cap)
        write_png(a.sheet, grid(np.stack(imgs), 8))
        for k, c in enumerate(caps):
            print(k, c)
        print(f"{a.geometries} geometries in {time.time() - t0:.1f} s -> {a.sheet}")
        return 0
    render_dataset(a.out, a.geometries, a.seed,
                   log=lambda m: print(time.strftime("%Y-%m-%d %H:%M:%S ") + m, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
