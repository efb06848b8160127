"""Signed distance functions (SDFs) in numpy, vectorised over point arrays.

Conventions
-----------
* A point array is float64 ``[N, 3]`` (x, y, z); every SDF maps it to ``[N]``.
  Negative values are inside the solid, positive outside, zero on the surface.
* +Y is up.  Axis-symmetric primitives (cylinder, cone, capsule, torus, ring,
  pyramid) have their axis along Y.
* Every SDF object also reports an axis-aligned bounding box ``bounds() ->
  (lo[3], hi[3])``.  It is tight for every primitive and for unions, rounding
  and translations of them (the shape families rely on this to compute their
  extents for the captions); it is conservative (too large) for subtraction,
  rotation by a non-axis-aligned angle and smooth unions.
* "Exact" primitives return the true Euclidean distance.  Union (``min``) of
  exact SDFs is exact outside the solid and a lower bound of the depth inside;
  this is what ``Round`` needs: ``Round(f, r) = f - r`` is the Minkowski sum of
  the solid with a ball of radius r (rounded edges, every part at least 2r
  thick) as long as ``f`` is exact outside.  Subtraction, intersection and
  smooth union give bounds (|f| <= true distance), which is fine for labels
  (only the sign matters) and for sphere tracing.

Several exact formulas follow Inigo Quilez's catalogue of distance functions
(iquilezles.org/articles/distfunctions), re-derived for numpy.
"""

from __future__ import annotations

import math
from typing import Callable, List, Tuple

import numpy as np

Bounds = Tuple[np.ndarray, np.ndarray]
# (length, sampler(k, rng) -> [k, 3], offset): offset is how far outside the curve the final surface
# lies (the radii of the enclosing Round nodes), so that edge sampling knows how far a projection may move.
Curve = Tuple[float, Callable[[int, np.random.Generator], np.ndarray], float]
POINT_FEATURE_LENGTH = 0.1  # sampling weight of an isolated sharp point (apex), in length units


def _segment(a, b) -> Curve:
    a, b = _vec3(a), _vec3(b)
    return float(np.linalg.norm(b - a)), lambda k, rng: a + rng.random((k, 1)) * (b - a), 0.0


def _circle(r: float, level: float, axis: str = "y") -> Curve:
    """Circle of radius r in the plane perpendicular to ``axis`` at coordinate ``level`` along it."""
    a, y, b = _axis_perm(axis)

    def sample(k, rng):
        t = rng.random(k) * 2 * math.pi
        out = np.empty((k, 3))
        out[:, a], out[:, y], out[:, b] = r * np.cos(t), level, r * np.sin(t)
        return out

    return 2 * math.pi * float(r), sample, 0.0


def _point(p) -> Curve:
    p = _vec3(p)
    return POINT_FEATURE_LENGTH, lambda k, rng: np.repeat(p[None], k, axis=0), 0.0


def _map_curves(curves: "List[Curve]", fn, scale: float = 1.0) -> "List[Curve]":
    return [(length * scale, (lambda smp: lambda k, rng: fn(smp(k, rng)))(smp), off * scale)
            for length, smp, off in curves]


def _offset_curves(curves: "List[Curve]", r: float) -> "List[Curve]":
    return [(length, smp, off + r) for length, smp, off in curves]


def sample_curves(curves: "List[Curve]", n: int, rng: np.random.Generator):
    """(points [n, 3] on the curves, uniform in total arc length; offsets [n]: each point's curve offset).
    Empty arrays without curves."""
    curves = [c for c in curves if c[0] > 0]
    if not curves or n <= 0:
        return np.zeros((0, 3)), np.zeros(0)
    w = np.array([c[0] for c in curves], dtype=np.float64)
    counts = rng.multinomial(n, w / w.sum())
    pts = [smp(int(k), rng) for (_, smp, _), k in zip(curves, counts) if k > 0]
    offs = [np.full(int(k), off) for (_, _, off), k in zip(curves, counts) if k > 0]
    return np.concatenate(pts), np.concatenate(offs)


def _vec3(v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if a.size == 1:
        a = np.repeat(a, 3)
    if a.size != 3:
        raise ValueError(f"expected a 3-vector, got {v!r}")
    return a


def _len2(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.sqrt(x * x + y * y)


class SDF:
    """Base class: callable on ``[N, 3]`` points, with composition helpers."""

    def __call__(self, p) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        if p.ndim != 2 or p.shape[1] != 3:
            raise ValueError(f"points must have shape [N, 3], got {p.shape}")
        return self.eval(p)

    def eval(self, p: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def bounds(self) -> Bounds:  # pragma: no cover - abstract
        raise NotImplementedError

    # Composition helpers (each returns a new SDF; objects are immutable).
    def __or__(self, other: "SDF") -> "SDF":
        return Union(self, other)

    def __sub__(self, other: "SDF") -> "SDF":
        return Subtraction(self, other)

    def __and__(self, other: "SDF") -> "SDF":
        return Intersection(self, other)

    def translate(self, t) -> "SDF":
        return Translate(self, t)

    def rotate(self, axis: str, angle: float) -> "SDF":
        return Rotate(self, rotation_matrix(axis, angle))

    def scale(self, s: float) -> "SDF":
        return Scale(self, s)

    def round(self, r: float) -> "SDF":
        return Round(self, r)

    def shell(self, t: float) -> "SDF":
        return Shell(self, t)

    # Sharp features ("edges and rims"): the curves where a primitive's surface normal jumps (box edges,
    # cylinder and ring rims, cone rims and apex, pyramid edges, extruded profiles' corners). Each entry is
    # (length, sampler) with sampler(k, rng) -> [k, 3] points on the curve, uniform in arc length; a
    # point feature (a cone's apex) gets the nominal length POINT_FEATURE_LENGTH. Composites pass their
    # children's curves on (transformed); ``Round`` keeps them (the rounded edge lies ``r`` outside), so
    # the curves can be inside the final solid (hidden by another part): ``dataset.sample_edges``
    # projects them onto the final surface and drops the ones that moved too far.
    def edge_curves(self) -> "List[Curve]":
        return []


# ----------------------------------------------------------------------------
# Primitives (all centred on their bounding box unless stated otherwise).
# ----------------------------------------------------------------------------


class Sphere(SDF):
    """Sphere of radius r at the origin (exact)."""

    def __init__(self, r: float):
        self.r = float(r)

    def eval(self, p):
        return np.sqrt(np.einsum("ij,ij->i", p, p)) - self.r

    def bounds(self):
        return -np.full(3, self.r), np.full(3, self.r)


class Box(SDF):
    """Axis-aligned box with half extents ``half`` (exact)."""

    def __init__(self, half):
        self.half = _vec3(half)
        if np.any(self.half < 0):
            raise ValueError(f"box half extents must be >= 0, got {self.half}")

    def eval(self, p):
        q = np.abs(p) - self.half
        outside = np.sqrt(np.einsum("ij,ij->i", np.maximum(q, 0), np.maximum(q, 0)))
        inside = np.minimum(q.max(axis=1), 0.0)
        return outside + inside

    def bounds(self):
        return -self.half.copy(), self.half.copy()

    def edge_curves(self):
        h, out = self.half, []
        for ax in range(3):
            o1, o2 = [d for d in range(3) if d != ax]
            for s1 in (-1, 1):
                for s2 in (-1, 1):
                    a, b = np.zeros(3), np.zeros(3)
                    a[ax], b[ax] = -h[ax], h[ax]
                    a[o1] = b[o1] = s1 * h[o1]
                    a[o2] = b[o2] = s2 * h[o2]
                    out.append(_segment(a, b))
        return out


def rounded_box(half, radius: float) -> SDF:
    """Box with half extents ``half`` whose edges are rounded with ``radius`` (exact)."""
    half = _vec3(half)
    radius = float(radius)
    if radius < 0 or np.any(half < radius):
        raise ValueError(f"rounded box: radius {radius} must be in [0, min(half)={half.min()}]")
    return Round(Box(half - radius), radius)


def _axis_perm(axis: str):
    # Returns column indices (radial_a, axial, radial_b) for an axis name.
    try:
        return {"x": (1, 0, 2), "y": (0, 1, 2), "z": (0, 2, 1)}[axis]
    except KeyError:
        raise ValueError(f"axis must be 'x', 'y' or 'z', got {axis!r}") from None


def _axial_bounds(axis: str, radial: float, axial: float) -> Bounds:
    hi = np.full(3, float(radial))
    hi["xyz".index(axis)] = axial
    return -hi, hi


class Cylinder(SDF):
    """Capped cylinder, radius r, half height hh along ``axis`` (exact)."""

    def __init__(self, r: float, hh: float, axis: str = "y"):
        self.r, self.hh, self.axis = float(r), float(hh), axis
        self._perm = _axis_perm(axis)

    def eval(self, p):
        a, y, b = self._perm
        dx = _len2(p[:, a], p[:, b]) - self.r
        dy = np.abs(p[:, y]) - self.hh
        return np.minimum(np.maximum(dx, dy), 0.0) + _len2(np.maximum(dx, 0), np.maximum(dy, 0))

    def bounds(self):
        return _axial_bounds(self.axis, self.r, self.hh)

    def edge_curves(self):
        return [_circle(self.r, s * self.hh, self.axis) for s in (-1, 1)] if self.r > 0 else \
            [_segment(*_axial_bounds(self.axis, 0.0, self.hh))]


class CappedCone(SDF):
    """Cone frustum along Y: radius r1 at y=-hh, r2 at y=+hh (r2 = 0: a cone) (exact)."""

    def __init__(self, hh: float, r1: float, r2: float):
        self.hh, self.r1, self.r2 = float(hh), float(r1), float(r2)
        if self.hh <= 0 or self.r1 < 0 or self.r2 < 0 or self.r1 + self.r2 <= 0:
            raise ValueError(f"capped cone: bad dimensions hh={hh} r1={r1} r2={r2}")

    def eval(self, p):
        h, r1, r2 = self.hh, self.r1, self.r2
        qx = _len2(p[:, 0], p[:, 2])
        qy = p[:, 1]
        k1x, k1y = r2, h
        k2x, k2y = r2 - r1, 2.0 * h
        cax = qx - np.minimum(qx, np.where(qy < 0.0, r1, r2))
        cay = np.abs(qy) - h
        t = np.clip(((k1x - qx) * k2x + (k1y - qy) * k2y) / (k2x * k2x + k2y * k2y), 0.0, 1.0)
        cbx = qx - k1x + k2x * t
        cby = qy - k1y + k2y * t
        s = np.where((cbx < 0.0) & (cay < 0.0), -1.0, 1.0)
        return s * np.sqrt(np.minimum(cax * cax + cay * cay, cbx * cbx + cby * cby))

    def bounds(self):
        r = max(self.r1, self.r2)
        return np.array([-r, -self.hh, -r]), np.array([r, self.hh, r])

    def edge_curves(self):
        out = []
        for r, y in ((self.r1, -self.hh), (self.r2, self.hh)):
            out.append(_circle(r, y) if r > 0 else _point((0.0, y, 0.0)))
        return out


class Capsule(SDF):
    """Segment from -half_len to +half_len along ``axis``, inflated by radius r (exact)."""

    def __init__(self, half_len: float, r: float, axis: str = "y"):
        self.half_len, self.r, self.axis = float(half_len), float(r), axis
        self._perm = _axis_perm(axis)

    def eval(self, p):
        a, y, b = self._perm
        dy = p[:, y] - np.clip(p[:, y], -self.half_len, self.half_len)
        return np.sqrt(p[:, a] ** 2 + dy * dy + p[:, b] ** 2) - self.r

    def bounds(self):
        return _axial_bounds(self.axis, self.r, self.half_len + self.r)


class Torus(SDF):
    """Torus in the XZ plane: major radius R (centre of the tube), tube radius r (exact)."""

    def __init__(self, R: float, r: float):
        self.R, self.r = float(R), float(r)

    def eval(self, p):
        q = _len2(p[:, 0], p[:, 2]) - self.R
        return _len2(q, p[:, 1]) - self.r

    def bounds(self):
        o = self.R + self.r
        return np.array([-o, -self.r, -o]), np.array([o, self.r, o])


class Ring(SDF):
    """Annulus cylinder (washer / tube): radii r_in..r_out, half height hh, axis Y (exact).

    It is the revolution of an exact 2-D rectangle in (radius, y), hence exact.
    """

    def __init__(self, r_in: float, r_out: float, hh: float):
        self.r_in, self.r_out, self.hh = float(r_in), float(r_out), float(hh)
        if not 0 <= self.r_in <= self.r_out:
            raise ValueError(f"ring: need 0 <= r_in <= r_out, got {r_in}, {r_out}")

    def eval(self, p):
        rho = _len2(p[:, 0], p[:, 2])
        mid, half = 0.5 * (self.r_in + self.r_out), 0.5 * (self.r_out - self.r_in)
        return _rect2d(rho - mid, p[:, 1], half, self.hh)

    def bounds(self):
        o = self.r_out
        return np.array([-o, -self.hh, -o]), np.array([o, self.hh, o])

    def edge_curves(self):
        return [_circle(r, s * self.hh) for r in (self.r_in, self.r_out) if r > 0 for s in (-1, 1)]


class Pyramid(SDF):
    """Square pyramid along Y: base half width b at y=-h/2, apex at y=+h/2 (exact)."""

    def __init__(self, b: float, h: float):
        self.b, self.h = float(b), float(h)
        if self.b <= 0 or self.h <= 0:
            raise ValueError(f"pyramid: bad dimensions b={b} h={h}")

    def eval(self, p):
        # Unit-base formulation (base side 1 at y=0, apex at height hn), scaled.
        s = 2.0 * self.b
        hn = self.h / s
        x = np.abs(p[:, 0]) / s
        z = np.abs(p[:, 2]) / s
        y = (p[:, 1] + 0.5 * self.h) / s
        swap = z > x
        x, z = np.where(swap, z, x), np.where(swap, x, z)
        x = x - 0.5
        z = z - 0.5
        m2 = hn * hn + 0.25
        qx = z
        qy = hn * y - 0.5 * x
        qz = hn * x + 0.5 * y
        sv = np.maximum(-qx, 0.0)
        t = np.clip((qy - 0.5 * z) / (m2 + 0.25), 0.0, 1.0)
        a = m2 * (qx + sv) ** 2 + qy * qy
        bb = m2 * (qx + 0.5 * t) ** 2 + (qy - m2 * t) ** 2
        d2 = np.where(np.minimum(qy, -qx * m2 - qy * 0.5) > 0.0, 0.0, np.minimum(a, bb))
        d = np.sqrt((d2 + qz * qz) / m2) * np.sign(np.maximum(qz, -y)) * s
        # The formula ignores the base inside the solid; intersecting with the
        # base half-space makes the interior exact too (outside is unchanged:
        # the plane distance is a lower bound there).
        return np.maximum(d, -(p[:, 1] + 0.5 * self.h))

    def bounds(self):
        return np.array([-self.b, -0.5 * self.h, -self.b]), np.array([self.b, 0.5 * self.h, self.b])

    def edge_curves(self):
        b, y0 = self.b, -0.5 * self.h
        corners = [(-b, y0, -b), (b, y0, -b), (b, y0, b), (-b, y0, b)]
        apex = (0.0, 0.5 * self.h, 0.0)
        return [_segment(corners[i], corners[(i + 1) % 4]) for i in range(4)] + \
            [_segment(c, apex) for c in corners] + [_point(apex)]


class CutSphere(SDF):
    """Sphere of radius r at the origin keeping the part with y >= h, -r < h < r (exact).

    Not centred: bounds are y in [h, r] and radius sqrt(r^2-h^2) (h >= 0) or r.
    """

    def __init__(self, r: float, h: float):
        self.r, self.h = float(r), float(h)
        if not -self.r < self.h < self.r:
            raise ValueError(f"cut sphere: need -r < h < r, got r={r} h={h}")

    def eval(self, p):
        r, h = self.r, self.h
        w = math.sqrt(r * r - h * h)
        qx = _len2(p[:, 0], p[:, 2])
        qy = p[:, 1]
        s = np.maximum((h - r) * qx * qx + w * w * (h + r - 2.0 * qy), h * qx - w * qy)
        return np.where(
            s < 0.0,
            _len2(qx, qy) - r,
            np.where(qx < w, h - qy, _len2(qx - w, qy - h)),
        )

    def bounds(self):
        rad = math.sqrt(self.r**2 - self.h**2) if self.h >= 0 else self.r
        return np.array([-rad, self.h, -rad]), np.array([rad, self.r, rad])

    def edge_curves(self):
        return [_circle(math.sqrt(self.r**2 - self.h**2), self.h)]


class ArcTube(SDF):
    """Tube of radius rb along a circular arc of radius ra in the XY plane (exact).

    The arc is centred at the origin, symmetric about +X, and spans the angles
    [-half_angle, +half_angle] measured from +X (a mug handle opening towards -X).
    """

    def __init__(self, ra: float, rb: float, half_angle: float):
        self.ra, self.rb, self.half_angle = float(ra), float(rb), float(half_angle)
        if not 0 < self.half_angle <= math.pi:
            raise ValueError(f"arc tube: half angle must be in (0, pi], got {half_angle}")

    def eval(self, p):
        # Local frame: symmetry axis is local +y = world +x.  (A reflection;
        # distances are unchanged.)
        lx = np.abs(p[:, 1])
        ly = p[:, 0]
        sn, cs = math.sin(self.half_angle), math.cos(self.half_angle)
        k = np.where(cs * lx > sn * ly, lx * sn + ly * cs, _len2(lx, ly))
        d2 = np.einsum("ij,ij->i", p, p) + self.ra**2 - 2.0 * self.ra * k
        return np.sqrt(np.maximum(d2, 0.0)) - self.rb

    def bounds(self):
        phi = np.linspace(-self.half_angle, self.half_angle, 2049)
        xs, ys = self.ra * np.cos(phi), self.ra * np.sin(phi)
        lo = np.array([xs.min(), ys.min(), 0.0]) - self.rb
        hi = np.array([xs.max(), ys.max(), 0.0]) + self.rb
        return lo, hi


def _rect2d(x, y, hx, hy):
    """Exact 2-D SDF of the rectangle |x| <= hx, |y| <= hy."""
    dx = np.abs(x) - hx
    dy = np.abs(y) - hy
    return np.minimum(np.maximum(dx, dy), 0.0) + _len2(np.maximum(dx, 0), np.maximum(dy, 0))


class Profile2D:
    """A 2-D SDF over coordinates (u, v) with bounds ((ulo, vlo), (uhi, vhi))."""

    def eval2(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def bounds2(self):  # pragma: no cover
        raise NotImplementedError

    def corners2(self):
        """Sharp corners [(u, v)] of the profile (extruded into edges along the extrusion axis)."""
        return []

    def boundary2(self):
        """The profile's outline as [(length, sampler(k, rng) -> (u [k], v [k]))] (the extrusion's cap
        edges)."""
        return []


def _seg2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)

    def sample(k, rng):
        t = rng.random(k)
        return a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])

    return float(np.linalg.norm(b - a)), sample


def _arc2(r, t0, t1):
    def sample(k, rng):
        t = t0 + rng.random(k) * (t1 - t0)
        return r * np.cos(t), r * np.sin(t)

    return abs(t1 - t0) * float(r), sample


class ArchProfile(Profile2D):
    """Inverted U: a half annulus (centre radius rc, thickness t) on two legs.

    The half annulus is centred at (0, 0) in (u, v) and occupies v >= 0; the
    legs are rectangles of width t centred at u = +-rc from v = -leg_h to 0.
    Exact outside (union of exact pieces; see the module docstring).
    """

    def __init__(self, rc: float, t: float, leg_h: float):
        self.rc, self.t, self.leg_h = float(rc), float(t), float(leg_h)
        if self.t > 2 * self.rc:
            raise ValueError("arch: thickness larger than the opening")

    def eval2(self, u, v):
        ann = np.where(v >= 0.0, np.abs(_len2(u, v) - self.rc) - 0.5 * self.t, np.inf)
        legs = _rect2d(np.abs(u) - self.rc, v + 0.5 * self.leg_h, 0.5 * self.t, 0.5 * self.leg_h)
        return np.minimum(ann, legs)

    def bounds2(self):
        o = self.rc + 0.5 * self.t
        return (-o, -self.leg_h), (o, o)

    def corners2(self):
        ri, ro = self.rc - 0.5 * self.t, self.rc + 0.5 * self.t
        return [(s * r, -self.leg_h) for s in (-1, 1) for r in (ri, ro)]

    def boundary2(self):
        ri, ro, lh = self.rc - 0.5 * self.t, self.rc + 0.5 * self.t, self.leg_h
        out = [_arc2(ro, 0.0, math.pi)] + ([_arc2(ri, 0.0, math.pi)] if ri > 0 else [])
        for s in (-1, 1):
            out += [_seg2((s * ro, -lh), (s * ro, 0.0)), _seg2((s * ri, -lh), (s * ri, 0.0)),
                    _seg2((s * ri, -lh), (s * ro, -lh))]
        return out


class TriangleProfile(Profile2D):
    """Isosceles triangle with base half width w on v = 0 and apex at (0, height) (exact)."""

    def __init__(self, w: float, height: float):
        self.w, self.height = float(w), float(height)

    def eval2(self, u, v):
        # Apex at origin, base at y = qy below it in the usual formulation.
        qx, qy = self.w, self.height
        px = np.abs(u)
        py = self.height - v
        t = np.clip((px * qx + py * qy) / (qx * qx + qy * qy), 0.0, 1.0)
        ax, ay = px - qx * t, py - qy * t
        bx, by = px - qx * np.clip(px / qx, 0.0, 1.0), py - qy
        s = -1.0
        dx = np.minimum(ax * ax + ay * ay, bx * bx + by * by)
        dy = np.minimum(s * (px * qy - py * qx), s * (py - qy))
        return -np.sqrt(dx) * np.sign(dy)

    def bounds2(self):
        return (-self.w, 0.0), (self.w, self.height)

    def corners2(self):
        return [(-self.w, 0.0), (self.w, 0.0), (0.0, self.height)]

    def boundary2(self):
        a, b, c = self.corners2()
        return [_seg2(a, b), _seg2(b, c), _seg2(c, a)]


class Extrusion(SDF):
    """Extrudes a 2-D profile symmetrically by half_len along ``axis`` (exact if the profile is).

    For axis 'z' the profile coordinates are (u, v) = (x, y); for axis 'x' they
    are (z, y).
    """

    def __init__(self, profile: Profile2D, half_len: float, axis: str = "z"):
        if axis not in ("x", "z"):
            raise ValueError(f"extrusion axis must be 'x' or 'z', got {axis!r}")
        self.profile, self.half_len, self.axis = profile, float(half_len), axis

    def eval(self, p):
        if self.axis == "z":
            d2 = self.profile.eval2(p[:, 0], p[:, 1])
            w = np.abs(p[:, 2]) - self.half_len
        else:
            d2 = self.profile.eval2(p[:, 2], p[:, 1])
            w = np.abs(p[:, 0]) - self.half_len
        return np.minimum(np.maximum(d2, w), 0.0) + _len2(np.maximum(d2, 0), np.maximum(w, 0))

    def bounds(self):
        (ulo, vlo), (uhi, vhi) = self.profile.bounds2()
        if self.axis == "z":
            return np.array([ulo, vlo, -self.half_len]), np.array([uhi, vhi, self.half_len])
        return np.array([-self.half_len, vlo, ulo]), np.array([self.half_len, vhi, uhi])

    def _place(self, u, v, w):
        u, v, w = np.broadcast_arrays(u, v, w)
        return np.stack([u, v, w] if self.axis == "z" else [w, v, u], axis=-1).astype(np.float64)

    def edge_curves(self):
        hl, out = self.half_len, []
        for u, v in self.profile.corners2():   # corners extruded along the axis
            out.append(_segment(self._place(u, v, -hl), self._place(u, v, hl)))
        for length, smp in self.profile.boundary2():   # the outline on both caps
            for s in (-1, 1):
                out.append((length, (lambda smp, s: lambda k, rng: self._place(*smp(k, rng), s * hl))(smp, s),
                            0.0))
        return out


# ----------------------------------------------------------------------------
# Operations.
# ----------------------------------------------------------------------------


class Union(SDF):
    def __init__(self, *children: SDF):
        if not children:
            raise ValueError("union of nothing")
        self.children = children

    def eval(self, p):
        out = self.children[0].eval(p)
        for c in self.children[1:]:
            out = np.minimum(out, c.eval(p))
        return out

    def bounds(self):
        bs = [c.bounds() for c in self.children]
        return np.min([b[0] for b in bs], axis=0), np.max([b[1] for b in bs], axis=0)

    def edge_curves(self):
        return [c for ch in self.children for c in ch.edge_curves()]


def union(*children: SDF) -> SDF:
    return children[0] if len(children) == 1 else Union(*children)


class SmoothUnion(SDF):
    """Polynomial smooth minimum with blend width k (a bound; bounds are approximate)."""

    def __init__(self, a: SDF, b: SDF, k: float):
        self.a, self.b, self.k = a, b, float(k)

    def eval(self, p):
        da, db = self.a.eval(p), self.b.eval(p)
        h = np.clip(0.5 + 0.5 * (db - da) / self.k, 0.0, 1.0)
        return db * (1 - h) + da * h - self.k * h * (1.0 - h)

    def bounds(self):
        return Union(self.a, self.b).bounds()

    def edge_curves(self):
        return self.a.edge_curves() + self.b.edge_curves()


class Subtraction(SDF):
    """a minus b (a bound; bounds are those of a)."""

    def __init__(self, a: SDF, b: SDF):
        self.a, self.b = a, b

    def eval(self, p):
        return np.maximum(self.a.eval(p), -self.b.eval(p))

    def bounds(self):
        return self.a.bounds()

    def edge_curves(self):
        return self.a.edge_curves() + self.b.edge_curves()


class Intersection(SDF):
    """a and b (a bound; bounds are the intersection of both boxes)."""

    def __init__(self, a: SDF, b: SDF):
        self.a, self.b = a, b

    def eval(self, p):
        return np.maximum(self.a.eval(p), self.b.eval(p))

    def bounds(self):
        (alo, ahi), (blo, bhi) = self.a.bounds(), self.b.bounds()
        return np.maximum(alo, blo), np.minimum(ahi, bhi)

    def edge_curves(self):
        return self.a.edge_curves() + self.b.edge_curves()


class Translate(SDF):
    def __init__(self, child: SDF, t):
        self.child, self.t = child, _vec3(t)

    def eval(self, p):
        return self.child.eval(p - self.t)

    def bounds(self):
        lo, hi = self.child.bounds()
        return lo + self.t, hi + self.t

    def edge_curves(self):
        return _map_curves(self.child.edge_curves(), lambda x: x + self.t)


def rotation_matrix(axis: str, angle: float) -> np.ndarray:
    """Right-handed rotation by ``angle`` radians about the x, y or z axis."""
    c, s = math.cos(angle), math.sin(angle)
    if axis == "x":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=np.float64)
    if axis == "y":
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=np.float64)
    if axis == "z":
        return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=np.float64)
    raise ValueError(f"axis must be 'x', 'y' or 'z', got {axis!r}")


class Rotate(SDF):
    """Rotates the child by the orthonormal matrix R (world = R @ local)."""

    def __init__(self, child: SDF, R):
        self.child = child
        self.R = np.asarray(R, dtype=np.float64)
        if self.R.shape != (3, 3) or not np.allclose(self.R @ self.R.T, np.eye(3), atol=1e-9):
            raise ValueError("rotation must be an orthonormal 3x3 matrix")

    def eval(self, p):
        # local = R^T world; with row vectors: p @ R.
        return self.child.eval(p @ self.R)

    def bounds(self):
        lo, hi = self.child.bounds()
        corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
        w = corners @ self.R.T
        return w.min(axis=0), w.max(axis=0)

    def edge_curves(self):
        return _map_curves(self.child.edge_curves(), lambda x: x @ self.R.T)


class Scale(SDF):
    """Uniform scale by s > 0 (preserves exactness)."""

    def __init__(self, child: SDF, s: float):
        if s <= 0:
            raise ValueError(f"scale must be > 0, got {s}")
        self.child, self.s = child, float(s)

    def eval(self, p):
        return self.child.eval(p / self.s) * self.s

    def bounds(self):
        lo, hi = self.child.bounds()
        return lo * self.s, hi * self.s

    def edge_curves(self):
        return _map_curves(self.child.edge_curves(), lambda x: x * self.s, self.s)


class Round(SDF):
    """Offsets the surface outwards by r: Minkowski sum with a ball if the child is exact outside."""

    def __init__(self, child: SDF, r: float):
        if r < 0:
            raise ValueError(f"rounding radius must be >= 0, got {r}")
        self.child, self.r = child, float(r)

    def eval(self, p):
        return self.child.eval(p) - self.r

    def bounds(self):
        lo, hi = self.child.bounds()
        return lo - self.r, hi + self.r

    def edge_curves(self):
        return _offset_curves(self.child.edge_curves(), self.r)


class Shell(SDF):
    """Hollow shell of half thickness t around the child's surface (onion)."""

    def __init__(self, child: SDF, t: float):
        self.child, self.t = child, float(t)

    def eval(self, p):
        return np.abs(self.child.eval(p)) - self.t

    def bounds(self):
        lo, hi = self.child.bounds()
        return lo - self.t, hi + self.t

    def edge_curves(self):
        return self.child.edge_curves()


def gradient(f: SDF, p: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Finite-difference gradient of f at points p [N, 3] (tetrahedral stencil, 4 evaluations)."""
    k = np.array([[1, -1, -1], [-1, -1, 1], [-1, 1, -1], [1, 1, 1]], dtype=np.float64)
    n = p.shape[0]
    q = (p[None, :, :] + eps * k[:, None, :]).reshape(-1, 3)
    v = f.eval(q).reshape(4, n)
    return np.einsum("kn,kd->nd", v, k) / (4.0 * eps)


def normals(f: SDF, p: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Unit outward normals (normalised SDF gradient) at points p [N, 3]."""
    g = gradient(f, p, eps)
    return g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
