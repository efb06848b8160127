"""Procedural shape families: seeded random parameters -> a centred SDF.

Every family builds its solid in "design" coordinates (+Y up, resting on
y = 0, facing +Z where that matters) as a union of exact primitives whose
dimensions were shrunk by ``ROUND``; the union is then offset by ``ROUND``
(``sdf.Round``).  That gives the requested final dimensions, rounded edges and
tips, and guarantees that every part is at least ``MIN_THICKNESS`` = 2 *
ROUND = 0.08 units thick (about 2.4 voxels of a 64^3 grid over [-1.05, 1.05]).
Parts that touch overlap by more than 2 * ROUND so the rounding never pinches
a joint.  Finally the solid is translated so that its bounding box is centred
on the origin; builders re-draw parameters until the box fits in
[-HALF_EXTENT, HALF_EXTENT]^3.

Public API: ``FAMILIES`` (ordered names), ``make_shape(family, rng) -> Shape``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import numpy as np

from . import sdf as S

ROUND = 0.04  # offset radius applied to every composite family
MIN_THICKNESS = 2 * ROUND  # guaranteed minimum thickness of any part
HALF_EXTENT = 0.95  # shapes lie in [-0.95, 0.95]^3; the model queries [-1.05, 1.05]^3


@dataclass
class Shape:
    """One sampled shape.

    family: family name (one of FAMILIES).
    params: JSON-serialisable sampled parameters (design units, before centring).
    sdf: the solid, centred on its bounding box, inside [-HALF_EXTENT, HALF_EXTENT]^3.
    extents: full bounding-box size (x, y, z) = (width, height, depth).
    tags: caption facts that are not visible in the extents (e.g. "rounded").
    """

    family: str
    params: Dict[str, object]
    sdf: S.SDF
    extents: np.ndarray
    tags: Dict[str, object] = field(default_factory=dict)


class _Retry(Exception):
    """Raised by a builder when a constraint between sampled parameters fails."""


def _r(x: float) -> float:
    return round(float(x), 5)


# Part helpers: dimensions are FINAL (after the ROUND offset); centres in design space.
def _box(c, half) -> S.SDF:
    return S.Box(np.maximum(np.asarray(half, dtype=np.float64) - ROUND, 0.0)).translate(c)


def _cyl(c, r, hh, axis="y") -> S.SDF:
    return S.Cylinder(max(r - ROUND, 0.0), max(hh - ROUND, 0.0), axis).translate(c)


def _cone(c, hh, r1, r2) -> S.SDF:
    if r1 - ROUND <= 0 and r2 - ROUND <= 0:
        raise _Retry()
    return S.CappedCone(hh - ROUND, max(r1 - ROUND, 0.0), max(r2 - ROUND, 0.0)).translate(c)


def _sph(c, r) -> S.SDF:
    return S.Sphere(max(r - ROUND, 0.0)).translate(c)


def _rounded(*parts: S.SDF) -> S.SDF:
    return S.Round(S.union(*parts), ROUND)


Built = Tuple[S.SDF, Dict[str, object], Dict[str, object]]


# ----------------------------------------------------------------------------
# Primitive families.
# ----------------------------------------------------------------------------


def _sphere(rng) -> Built:
    r = rng.uniform(0.2, 0.95)
    return S.Sphere(r), {"radius": _r(r)}, {}


def _box_family(rng) -> Built:
    big = rng.uniform(0.25, 0.95)
    half = np.array([big, big * rng.uniform(0.1, 1.0), big * rng.uniform(0.1, 1.0)])
    half = np.maximum(half, ROUND + 0.005)[rng.permutation(3)]
    rr = ROUND
    if rng.random() < 0.4:
        rr = max(ROUND, rng.uniform(0.3, 0.85) * half.min())
    shape = S.rounded_box(half, rr)
    rounded = rr >= 0.08 and rr >= 0.25 * half.min()
    return shape, {"half_extents": [_r(v) for v in half], "corner_radius": _r(rr)}, {"rounded": bool(rounded)}


def _cylinder(rng) -> Built:
    r = rng.uniform(0.05, 0.95)
    hh = rng.uniform(0.05, 0.95)
    return _rounded(_cyl((0, hh, 0), r, hh)), {"radius": _r(r), "half_height": _r(hh)}, {}


def _cone_family(rng) -> Built:
    h = rng.uniform(0.3, 1.9)
    r1 = rng.uniform(0.15, 0.95)
    truncated = rng.random() < 0.25
    r2 = r1 * rng.uniform(0.25, 0.6) if truncated else 0.0
    shape = _rounded(_cone((0, h / 2, 0), h / 2, r1, r2))
    return shape, {"height": _r(h), "bottom_radius": _r(r1), "top_radius": _r(r2)}, {"truncated": truncated}


def _capsule(rng) -> Built:
    r = rng.uniform(0.08, 0.6)
    half_len = rng.uniform(0.05, 0.9)
    axis = "y" if rng.random() < 0.7 else "x"
    return S.Capsule(half_len, r, axis), {"radius": _r(r), "half_length": _r(half_len), "axis": axis}, {}


def _torus(rng) -> Built:
    major = rng.uniform(0.25, 0.8)
    tube = max(0.045, major * rng.uniform(0.12, 0.65))
    shape = S.Torus(major, tube)
    return shape, {"major_radius": _r(major), "tube_radius": _r(tube)}, {"tube_ratio": tube / major}


def _ring(rng) -> Built:
    r_out = rng.uniform(0.3, 0.95)
    wall = rng.uniform(0.08, 0.5 * r_out)
    hh = rng.uniform(0.04, 0.9)
    if r_out - wall < 0.12:  # keep the hole open
        raise _Retry()
    shape = S.Round(S.Ring(r_out - wall + ROUND, r_out - ROUND, hh - ROUND), ROUND)
    params = {"outer_radius": _r(r_out), "wall": _r(wall), "half_height": _r(hh)}
    return shape, params, {"wall_ratio": wall / r_out}


def _pyramid(rng) -> Built:
    b = rng.uniform(0.2, 0.95)
    h = rng.uniform(0.3, 1.9)
    shape = S.Round(S.Pyramid(b - ROUND, h - 2 * ROUND), ROUND)
    return shape, {"base_half_width": _r(b), "height": _r(h)}, {}


# ----------------------------------------------------------------------------
# Composite families.
# ----------------------------------------------------------------------------


def _mug(rng) -> Built:
    ro = rng.uniform(0.3, 0.6)
    h = rng.uniform(0.5, 1.5)
    wall = rng.uniform(0.08, 0.14)
    floor = rng.uniform(0.08, 0.15)
    ra = rng.uniform(0.22, 0.4) * h
    rb = rng.uniform(0.04, min(0.07, wall / 2))
    c = rng.uniform(-0.2, 0.35)  # handle centre offset, in units of ra
    if ra + rb > h / 2 - 0.02 or ra * (1 + c) - wall / 2 - rb < 0.1:
        raise _Retry()
    cx = ro - wall / 2 + ra * c
    half_angle = math.acos(-c)  # the arc ends sit in the middle of the wall
    body = S.Ring(ro - wall + ROUND, ro - ROUND, h / 2 - ROUND).translate((0, h / 2, 0))
    bottom = _cyl((0, floor / 2, 0), ro, floor / 2)
    handle = S.ArcTube(ra, rb - ROUND, half_angle).translate((cx, h / 2, 0))
    params = {"radius": _r(ro), "height": _r(h), "wall": _r(wall), "floor": _r(floor),
              "handle_radius": _r(ra), "handle_tube": _r(rb), "handle_offset": _r(c)}
    return _rounded(body, bottom, handle), params, {}


def _snowman(rng) -> Built:
    n = 3 if rng.random() < 0.8 else 2
    radii = [rng.uniform(0.25, 0.55)]
    for _ in range(n - 1):
        radii.append(radii[-1] * rng.uniform(0.55, 0.8))
    overlap = rng.uniform(0.7, 0.85)
    ys = [radii[0]]
    for i in range(1, n):
        ys.append(ys[-1] + (radii[i - 1] + radii[i]) * overlap)
    shape: S.SDF = S.Sphere(radii[0]).translate((0, ys[0], 0))
    for r, y in zip(radii[1:], ys[1:]):
        shape = S.SmoothUnion(shape, S.Sphere(r).translate((0, y, 0)), 0.04)
    hat = rng.random() < 0.4
    params = {"radii": [_r(v) for v in radii], "overlap": _r(overlap), "hat": hat}
    if hat:
        rt = radii[-1]
        brim_y = ys[-1] + rt * 0.85
        brim_r = rt * rng.uniform(0.9, 1.2)
        crown_r = max(0.045, rt * rng.uniform(0.55, 0.75))
        crown_h = rng.uniform(0.15, 0.35)
        brim = S.Cylinder(brim_r, 0.045, "y").translate((0, brim_y, 0))
        crown = S.Cylinder(crown_r, crown_h / 2, "y").translate((0, brim_y + crown_h / 2, 0))
        shape = S.union(shape, brim, crown)
        params.update({"brim_radius": _r(brim_r), "crown_radius": _r(crown_r), "crown_height": _r(crown_h)})
    return shape, params, {}


def _dumbbell(rng) -> Built:
    bar_r = rng.uniform(0.045, 0.12)
    bar_half = rng.uniform(0.3, 0.75)
    variant = "ball" if rng.random() < 0.5 else "disc"
    parts = [_cyl((0, 0, 0), bar_r, bar_half, "x")]
    if variant == "ball":
        wr = rng.uniform(max(0.15, 1.8 * bar_r), 0.35)
        parts += [_sph((s * bar_half, 0, 0), wr) for s in (-1, 1)]
        params = {"weight_radius": _r(wr)}
    else:
        wr = rng.uniform(max(0.2, 1.8 * bar_r), 0.45)
        ww = rng.uniform(0.05, 0.2)
        parts += [_cyl((s * (bar_half - ww), 0, 0), wr, ww, "x") for s in (-1, 1)]
        params = {"weight_radius": _r(wr), "weight_half_width": _r(ww)}
    params.update({"bar_radius": _r(bar_r), "bar_half_length": _r(bar_half), "variant": variant})
    return _rounded(*parts), params, {}


def _arch(rng) -> Built:
    rc = rng.uniform(0.25, 0.65)
    t = rng.uniform(0.1, 0.35)
    leg_h = rng.uniform(0.05, 0.9)
    dz = rng.uniform(0.06, 0.5)
    if rc - t / 2 < 0.1:  # keep the opening wider than two voxels
        raise _Retry()
    profile = S.ArchProfile(rc, t - 2 * ROUND, leg_h - ROUND)
    shape = S.Round(S.Extrusion(profile, dz - ROUND, "z").translate((0, leg_h, 0)), ROUND)
    return shape, {"radius": _r(rc), "thickness": _r(t), "leg_height": _r(leg_h), "half_depth": _r(dz)}, {}


def _mushroom(rng) -> Built:
    rs = rng.uniform(0.07, 0.3)
    hs = rng.uniform(0.2, 0.9)
    taper = rng.uniform(1.0, 1.4)
    rc = rng.uniform(max(1.6 * rs, 0.25), 0.9)
    # Cut plane height relative to the cap sphere centre: at most a hemisphere,
    # so the cap never hangs below its rim and hides the stem.
    hc = rc * rng.uniform(0.0, 0.7)
    rci = rc - ROUND
    if hc >= rci - 0.02:
        raise _Retry()
    cap_w = math.sqrt(rci * rci - hc * hc)
    # The stem must be visibly wider than nothing and visibly taller than the overhang is wide.
    if cap_w < 1.4 * rs or rs < 0.2 * cap_w or hs < 0.6 * cap_w:
        raise _Retry()
    cap_height = rci - hc
    plane_y = hs
    stem = _cone((0, (plane_y + cap_height / 2) / 2, 0), (plane_y + cap_height / 2) / 2, rs * taper, rs)
    cap = S.CutSphere(rci, hc).translate((0, plane_y - hc, 0))
    params = {"stem_radius": _r(rs), "stem_height": _r(hs), "stem_taper": _r(taper),
              "cap_radius": _r(rc), "cap_cut": _r(hc)}
    return _rounded(stem, cap), params, {}


def _tree(rng) -> Built:
    rt = rng.uniform(0.05, 0.14)
    ht = rng.uniform(0.2, 0.5)
    variant = "conifer" if rng.random() < 0.65 else "round"
    params: Dict[str, object] = {"trunk_radius": _r(rt), "trunk_height": _r(ht), "variant": variant}
    if variant == "conifer":
        n = int(rng.integers(1, 4))
        r0 = rng.uniform(max(0.3, 2.5 * rt), 0.8)
        h0 = min(r0 * rng.uniform(1.0, 1.8), 1.2)  # tiers taller than wide: a conifer, not a hat
        ht = max(ht, r0 * rng.uniform(0.45, 0.7))  # trunk visible below the lowest tier
        params["trunk_height"] = _r(ht)
        parts = []
        y = ht
        for i in range(n):
            r, h = r0 * 0.75**i, h0 * 0.85**i
            parts.append(_cone((0, y + h / 2, 0), h / 2, r, 0.0))
            y += h * rng.uniform(0.4, 0.55)
        trunk_top = ht + 0.3 * h0
        params.update({"tiers": n, "canopy_radius": _r(r0), "tier_height": _r(h0)})
    else:
        rs = rng.uniform(max(0.25, 2.5 * rt), 0.6)
        parts = [_sph((0, ht + 0.8 * rs, 0), rs)]
        trunk_top = ht + 0.8 * rs
        params.update({"canopy_radius": _r(rs)})
    parts.append(_cyl((0, trunk_top / 2, 0), rt, trunk_top / 2))
    return _rounded(*parts), params, {"conifer": variant == "conifer"}


def _table(rng) -> Built:
    h = rng.uniform(0.35, 1.2)
    tt = rng.uniform(0.08, 0.15)
    variant = "rect" if rng.random() < 0.7 else "round"
    top_y = h - tt / 2
    params: Dict[str, object] = {"height": _r(h), "top_thickness": _r(tt), "variant": variant}
    if variant == "rect":
        tx = rng.uniform(0.4, 0.95)
        tz = rng.uniform(0.25, 0.95)
        lw = rng.uniform(0.04, 0.09)
        inset = rng.uniform(0.0, 0.12)
        round_legs = rng.random() < 0.4
        parts = [_box((0, top_y, 0), (tx, tt / 2, tz))]
        for sx in (-1, 1):
            for sz in (-1, 1):
                c = (sx * (tx - lw - inset), top_y / 2, sz * (tz - lw - inset))
                parts.append(_cyl(c, lw, top_y / 2) if round_legs else _box(c, (lw, top_y / 2, lw)))
        params.update({"half_width": _r(tx), "half_depth": _r(tz), "leg_half_width": _r(lw),
                       "leg_inset": _r(inset), "round_legs": round_legs})
    else:
        r = rng.uniform(0.4, 0.95)
        col = rng.uniform(0.05, 0.12)
        base_r = r * rng.uniform(0.3, 0.6)
        base_hh = rng.uniform(0.04, 0.07)
        parts = [_cyl((0, top_y, 0), r, tt / 2), _cyl((0, top_y / 2, 0), col, top_y / 2),
                 _cyl((0, base_hh, 0), base_r, base_hh)]
        params.update({"radius": _r(r), "column_radius": _r(col), "base_radius": _r(base_r)})
    return _rounded(*parts), params, {"round": variant == "round"}


def _chair(rng) -> Built:
    sx = rng.uniform(0.3, 0.55)
    sz = rng.uniform(0.3, 0.55)
    sh = rng.uniform(0.3, 0.7)
    st = rng.uniform(0.08, 0.14)
    lw = rng.uniform(0.04, 0.07)
    bh = rng.uniform(0.35, 0.9)
    bt = rng.uniform(0.08, 0.12)
    back = "solid" if rng.random() < 0.5 else "frame"
    seat_y = sh - st / 2
    parts = [_box((0, seat_y, 0), (sx, st / 2, sz))]
    for px in (-1, 1):
        for pz in (-1, 1):
            parts.append(_box((px * (sx - lw), seat_y / 2, pz * (sz - lw)), (lw, seat_y / 2, lw)))
    zb = -sz + bt / 2
    if back == "solid":
        parts.append(_box((0, (seat_y + sh + bh) / 2, zb), (sx, (sh + bh - seat_y) / 2, bt / 2)))
    else:
        post_top = sh + bh
        for px in (-1, 1):
            parts.append(_box((px * (sx - lw), (seat_y + post_top) / 2, zb), (lw, (post_top - seat_y) / 2, bt / 2)))
        rail = rng.uniform(0.05, 0.1)
        parts.append(_box((0, post_top - rail, zb), (sx, rail, bt / 2)))
        if bh > 0.5:
            parts.append(_box((0, sh + bh * 0.45, zb), (sx, 0.045, bt / 2)))
    params = {"seat_half_width": _r(sx), "seat_half_depth": _r(sz), "seat_height": _r(sh),
              "seat_thickness": _r(st), "leg_half_width": _r(lw), "back_height": _r(bh),
              "back_thickness": _r(bt), "back": back}
    return _rounded(*parts), params, {}


def _bottle(rng) -> Built:
    rb = rng.uniform(0.15, 0.45)
    hb = rng.uniform(0.35, 1.0)
    hs = rng.uniform(0.08, 0.3)
    rn = rng.uniform(0.05, max(0.06, 0.45 * rb))
    hn = rng.uniform(0.08, 0.4)
    cap = rng.random() < 0.6
    parts = [_cyl((0, hb / 2, 0), rb, hb / 2),
             _cone((0, hb + hs / 2 - 0.05, 0), hs / 2 + 0.05, rb, rn),
             _cyl((0, hb + hs + hn / 2 - 0.05, 0), rn, hn / 2 + 0.05)]
    params = {"body_radius": _r(rb), "body_height": _r(hb), "shoulder_height": _r(hs),
              "neck_radius": _r(rn), "neck_height": _r(hn), "cap": cap}
    if cap:
        cr = rn + rng.uniform(0.01, 0.03)
        ch = rng.uniform(0.08, 0.14)
        parts.append(_cyl((0, hb + hs + hn + ch / 2 - 0.06, 0), cr, ch / 2))
        params.update({"cap_radius": _r(cr), "cap_height": _r(ch)})
    return _rounded(*parts), params, {}


def _lamp(rng) -> Built:
    base_r = rng.uniform(0.2, 0.45)
    base_hh = rng.uniform(0.04, 0.07)
    pole_r = rng.uniform(0.04, 0.07)
    pole_h = rng.uniform(0.35, 1.0)
    shade_r1 = rng.uniform(0.25, 0.6)
    shade_r2 = shade_r1 * rng.uniform(0.45, 0.8)
    shade_h = rng.uniform(0.25, 0.55)
    shade_y = pole_h - 0.4 * shade_h  # bottom of the shade
    parts = [_cyl((0, base_hh, 0), base_r, base_hh),
             _cyl((0, (pole_h + 0.02) / 2, 0), pole_r, (pole_h - 0.02) / 2),
             _cone((0, shade_y + shade_h / 2, 0), shade_h / 2, shade_r1, shade_r2)]
    params = {"base_radius": _r(base_r), "pole_height": _r(pole_h), "pole_radius": _r(pole_r),
              "shade_bottom_radius": _r(shade_r1), "shade_top_radius": _r(shade_r2), "shade_height": _r(shade_h)}
    return _rounded(*parts), params, {}


def _house(rng) -> Built:
    wx = rng.uniform(0.3, 0.8)
    wz = rng.uniform(0.3, 0.7)
    wh = rng.uniform(0.35, 0.8)
    ov = rng.uniform(0.0, 0.12)
    rh = rng.uniform(0.25, 0.7)
    roof_base = wh - 0.1
    roof = S.Extrusion(S.TriangleProfile(wz + ov - ROUND, rh - 2 * ROUND), wx + ov - ROUND, "x")
    parts = [_box((0, wh / 2, 0), (wx, wh / 2, wz)), roof.translate((0, roof_base + ROUND, 0))]
    chimney = rng.random() < 0.5
    params = {"half_width": _r(wx), "half_depth": _r(wz), "wall_height": _r(wh), "overhang": _r(ov),
              "roof_height": _r(rh), "chimney": chimney}
    if chimney:
        cw = rng.uniform(0.06, 0.1)
        top = roof_base + rh * rng.uniform(0.75, 0.95)
        parts.append(_box((wx * 0.5, (roof_base + top) / 2, wz * 0.4), (cw, (top - roof_base) / 2, cw)))
    return _rounded(*parts), params, {}


_BUILDERS: Dict[str, Callable[[np.random.Generator], Built]] = {
    "sphere": _sphere,
    "box": _box_family,
    "cylinder": _cylinder,
    "cone": _cone_family,
    "capsule": _capsule,
    "torus": _torus,
    "ring": _ring,
    "pyramid": _pyramid,
    "mug": _mug,
    "snowman": _snowman,
    "dumbbell": _dumbbell,
    "arch": _arch,
    "mushroom": _mushroom,
    "tree": _tree,
    "table": _table,
    "chair": _chair,
    "bottle": _bottle,
    "lamp": _lamp,
    "house": _house,
}

FAMILIES: List[str] = list(_BUILDERS)


def make_shape(family: str, rng: np.random.Generator, max_tries: int = 200) -> Shape:
    """Samples one shape of ``family`` from ``rng`` (deterministic for a given rng state).

    Raises ValueError for an unknown family.  Parameters are re-drawn (from the
    same rng) until the constraints hold and the bounding box fits.
    """
    try:
        build = _BUILDERS[family]
    except KeyError:
        raise ValueError(f"unknown shape family {family!r}; known: {', '.join(FAMILIES)}") from None
    for _ in range(max_tries):
        try:
            shape, params, tags = build(rng)
        except _Retry:
            continue
        lo, hi = shape.bounds()
        ext = hi - lo
        if np.all(ext <= 2 * HALF_EXTENT + 1e-9):
            centred = shape.translate(-(lo + hi) / 2)
            return Shape(family, params, centred, ext, tags)
    raise RuntimeError(f"family {family!r}: no valid parameters after {max_tries} tries")
