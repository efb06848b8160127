"""Tests for tools/shapes and tools/build_bpe_vocab.py.

Run from the repository root:  /usr/bin/python3 -m unittest tools/tests/test_shapes.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if os.path.join(ROOT, "tools") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tools"))

import build_bpe_vocab as bpe  # noqa: E402
from tools.shapes import captions as C  # noqa: E402
from tools.shapes import dataset as D  # noqa: E402
from tools.shapes import sdf as S  # noqa: E402
from tools.shapes.families import FAMILIES, HALF_EXTENT, MIN_THICKNESS, make_shape  # noqa: E402

SEEDS = 3  # samples per family in the geometric tests


def _measured_bounds(f, surf):
    """Bounding box of the surface: the extreme sampled points, refined by walking along the
    surface towards each axis direction (tangential steps + Newton projection)."""
    lo, hi = surf.min(axis=0), surf.max(axis=0)
    for axis in range(3):
        for sign in (-1.0, 1.0):
            e = np.zeros(3)
            e[axis] = sign
            p = surf[np.argsort(-(surf @ e))[:24]].copy()
            for _ in range(12):
                n = S.normals(f, p)
                step = e - (n @ e)[:, None] * n
                p = p + 0.02 * step
                for _ in range(2):
                    g = S.gradient(f, p)
                    p = p - (f(p) / np.maximum(np.einsum("ij,ij->i", g, g), 1e-12))[:, None] * g
            p = p[np.abs(f(p)) < 1e-4]
            if len(p):
                if sign > 0:
                    hi[axis] = max(hi[axis], p[:, axis].max())
                else:
                    lo[axis] = min(lo[axis], p[:, axis].min())
    return lo, hi


def _shape(fam, i, seed=7):
    rng = np.random.default_rng([seed, 0, FAMILIES.index(fam), i])
    shape = make_shape(fam, rng)
    return shape, C.make_caption(shape, rng)


class PrimitiveTest(unittest.TestCase):
    def test_exact_primitives_are_eikonal_and_signed_right(self):
        rng = np.random.default_rng(0)
        p = rng.uniform(-1.1, 1.1, (40000, 3))

        def pyr_in(q, b=0.6, h=0.9):
            y = q[:, 1] + h / 2
            w = b * (1 - y / h)
            return (y >= 0) & (y <= h) & (np.abs(q[:, 0]) <= w) & (np.abs(q[:, 2]) <= w)

        def cone_in(q, hh=0.5, r1=0.7, r2=0.2):
            t = (q[:, 1] + hh) / (2 * hh)
            return (np.abs(q[:, 1]) <= hh) & (np.hypot(q[:, 0], q[:, 2]) <= r1 + (r2 - r1) * t)

        def roof_in(q, w=0.7, h=0.5, half=0.4):
            v = q[:, 1]
            return (v >= 0) & (v <= h) & (np.abs(q[:, 2]) <= w * (1 - v / h)) & (np.abs(q[:, 0]) <= half)

        cases = [
            (S.Sphere(0.5), lambda q: np.linalg.norm(q, axis=1) <= 0.5),
            (S.Box([0.5, 0.2, 0.3]), lambda q: np.all(np.abs(q) <= [0.5, 0.2, 0.3], axis=1)),
            (S.Cylinder(0.4, 0.6, "x"), lambda q: (np.abs(q[:, 0]) <= 0.6) & (np.hypot(q[:, 1], q[:, 2]) <= 0.4)),
            (S.Pyramid(0.6, 0.9), pyr_in),
            (S.CappedCone(0.5, 0.7, 0.2), cone_in),
            (S.CutSphere(0.8, 0.3), lambda q: (np.linalg.norm(q, axis=1) <= 0.8) & (q[:, 1] >= 0.3)),
            (S.Extrusion(S.TriangleProfile(0.7, 0.5), 0.4, "x"), roof_in),
            (S.Ring(0.3, 0.6, 0.2), lambda q: (np.abs(q[:, 1]) <= 0.2) & (np.abs(np.hypot(q[:, 0], q[:, 2]) - 0.45) <= 0.15)),
            (S.Torus(0.6, 0.2), None),
            (S.Capsule(0.4, 0.2), None),
            (S.ArcTube(0.4, 0.05, 1.8), None),
            (S.Extrusion(S.ArchProfile(0.5, 0.2, 0.4), 0.3, "z"), None),
        ]
        for f, inside in cases:
            with self.subTest(f=type(f).__name__):
                d = f(p)
                g = np.linalg.norm(S.gradient(f, p, 1e-5), axis=1)
                out = d > 1e-3
                self.assertTrue(out.any() and (d < 0).any())
                # Exact outside: |grad| = 1 (a bound would be < 1 somewhere).
                self.assertLess(np.abs(g[out] - 1).max(), 1e-3)
                if inside is not None:
                    self.assertEqual(int(np.count_nonzero((d < 0) != inside(p))), 0)
                lo, hi = f.bounds()
                occ = p[d < 0]
                self.assertTrue(np.all(occ >= lo - 1e-9) and np.all(occ <= hi + 1e-9))

    def test_operations(self):
        a, b = S.Sphere(0.5), S.Box([0.3, 0.3, 0.3]).translate([0.4, 0, 0])
        p = np.random.default_rng(1).uniform(-1, 1, (5000, 3))
        np.testing.assert_allclose((a | b)(p), np.minimum(a(p), b(p)))
        np.testing.assert_allclose((a - b)(p), np.maximum(a(p), -b(p)))
        np.testing.assert_allclose((a & b)(p), np.maximum(a(p), b(p)))
        sm = S.SmoothUnion(a, b, 0.1)(p)
        self.assertTrue(np.all(sm <= np.minimum(a(p), b(p)) + 1e-12))
        np.testing.assert_allclose(S.Scale(a, 2.0)(p), np.linalg.norm(p, axis=1) - 1.0)
        r = S.Box([0.5, 0.1, 0.1]).rotate("z", np.pi / 2)  # long axis now along y
        self.assertLess(r(np.array([[0.0, 0.45, 0.0]]))[0], 0)
        self.assertGreater(r(np.array([[0.45, 0.0, 0.0]]))[0], 0)
        with self.assertRaises(ValueError):
            S.Box([0.1, 0.1, 0.1])(np.zeros((3, 2)))


class FamilyTest(unittest.TestCase):
    def test_at_least_fourteen_families(self):
        self.assertGreaterEqual(len(FAMILIES), 14)
        with self.assertRaises(ValueError):
            make_shape("teapot", np.random.default_rng(0))

    def test_interior_corners_bounds_and_extents(self):
        grid = D.dense_grid(44)
        edge = np.abs(grid).max(axis=1) > HALF_EXTENT + 0.01
        corners = np.array([[x, y, z] for x in (-1.05, 1.05) for y in (-1.05, 1.05) for z in (-1.05, 1.05)])
        for fam in FAMILIES:
            for i in range(SEEDS):
                shape, _ = _shape(fam, i)
                with self.subTest(family=fam, i=i):
                    f = shape.sdf
                    self.assertTrue(np.all(f(corners) > 0), "corners of the query cube must be outside")
                    self.assertTrue(np.all(f(grid[edge]) > 0), "solid leaves [-0.95, 0.95]^3")
                    rng = np.random.default_rng(i)
                    surf = D.sample_surface(f, 1500, rng)
                    n = S.normals(f, surf)
                    # Interior points: just below the surface.
                    self.assertTrue(np.all(f(surf - 0.02 * n) < 0))
                    # Analytic extents (used for captions) match the measured surface.
                    lo, hi = _measured_bounds(f, surf)
                    np.testing.assert_allclose(hi - lo, shape.extents, atol=0.01)
                    np.testing.assert_allclose((hi + lo) / 2, 0, atol=0.01)

    def test_minimum_thickness(self):
        # From every surface point the inward ray stays inside for MIN_THICKNESS
        # (>= 0.07 = 2 voxels of a 64^3 grid over [-1.05, 1.05]).
        self.assertGreaterEqual(MIN_THICKNESS, 0.07)
        steps = np.arange(0.004, 0.0701, 0.004)
        for fam in FAMILIES:
            for i in range(3):
                shape, _ = _shape(fam, i + 100)
                with self.subTest(family=fam, i=i):
                    f = shape.sdf
                    surf = D.sample_surface(f, 800, np.random.default_rng(i))
                    n = S.normals(f, surf)
                    ray = (surf[None] - steps[:, None, None] * n[None]).reshape(-1, 3)
                    d = f(ray).reshape(len(steps), -1)
                    thin = np.count_nonzero(d.max(axis=0) >= 0)
                    self.assertEqual(thin, 0, f"{thin} surface points with local thickness < 0.07")

    def test_thin_parts_would_be_caught(self):
        # The thickness probe itself must fail on a thin plate.
        f = S.Box([0.5, 0.02, 0.5])
        surf = D.sample_surface(f, 200, np.random.default_rng(0))
        n = S.normals(f, surf)
        d = f(surf - 0.05 * n)
        self.assertTrue(np.any(d >= 0))


def _parse_caption(caption, family):
    for t, _ in sorted(C.TEMPLATES, key=lambda tw: -len(tw[0])):
        prefix = t.replace("{np}", "")
        if caption.startswith(prefix):
            np_text = caption[len(prefix):]
            break
    words = np_text.split()
    nouns = sorted((n for n, _, _ in C.NOUN_RULES[family]), key=lambda n: -len(n.split()))
    for noun in nouns:
        k = len(noun.split())
        if words[-k:] == noun.split():
            return words[0], words[1:-k], noun
    raise AssertionError(f"no noun of {family} in {caption!r}")


class CaptionTest(unittest.TestCase):
    def test_captions_are_true_to_the_measured_shape(self):
        seen_adj = set()
        for fam in FAMILIES:
            for i in range(10):
                shape, cap = _shape(fam, i + 200)
                with self.subTest(family=fam, caption=cap):
                    self.assertRegex(cap, r"^[a-z]+( [a-z]+)*$")
                    art, adjs, noun = _parse_caption(cap, fam)
                    self.assertEqual(art, C.article((adjs + [noun])[0]))
                    surf = D.sample_surface(shape.sdf, 600, np.random.default_rng(i))
                    ext = surf.max(axis=0) - surf.min(axis=0)
                    tags = dict(shape.tags)
                    if fam == "torus":  # tube/major radius from the extents: H = 2r, W = 2(R + r)
                        tags["tube_ratio"] = ext[1] / (max(ext[0], ext[2]) - ext[1])
                    m = C.metrics_from_extents(ext, tags)
                    groups = dict(C.adjective_groups(fam))
                    used_groups = []
                    for a in adjs:
                        g = [gname for gname, ws in groups.items() if a in dict(ws)]
                        self.assertTrue(g, f"adjective {a!r} not allowed for {fam}")
                        self.assertTrue(C.holds(dict(groups[g[0]])[a], m, slack=0.06), f"{a!r} false: {m}")
                        used_groups.append(g[0])
                        seen_adj.add(a)
                    self.assertEqual(len(used_groups), len(set(used_groups)), "two words of one group")
                    rules = {n: (cond, tag) for n, cond, tag in C.NOUN_RULES[fam]}
                    cond, tag = rules[noun]
                    self.assertTrue(C.holds(cond, m, slack=0.06), f"noun {noun!r} false: {m}")
                    if tag is not None:
                        self.assertEqual(bool(shape.tags.get(tag[0], False)), tag[1])
        # The generator does use the proportion words.
        self.assertTrue({"tall", "high"} & seen_adj and {"flat", "low", "short"} & seen_adj)

    def test_short_captions_are_true_and_template_free(self):
        # make_short_caption (train_gpt.py --short-prob): the noun alone, "a" + noun or "a" + one true
        # adjective + noun; no template word, so "a sculpture of ..." stays held out.
        forms = set()
        for fam in FAMILIES:
            for i in range(6):
                shape, _ = _shape(fam, i + 300)
                m = C.metrics(shape)
                nouns = C.true_nouns(shape)
                adjs = {w for _g, ws in C.adjective_groups(fam) for w, cond in ws if C.holds(cond, m)}
                cap = C.make_short_caption(shape, np.random.default_rng(i))
                with self.subTest(family=fam, caption=cap):
                    self.assertRegex(cap, r"^[a-z]+( [a-z]+)*$")
                    self.assertNotIn("sculpture", cap)
                    noun = next((n for n in sorted(nouns, key=lambda n: -len(n.split()))
                                 if cap == n or cap.endswith(" " + n)), None)
                    self.assertIsNotNone(noun, f"no true noun of {fam} ends {cap!r}")
                    rest = cap[: len(cap) - len(noun)].split()
                    if not rest:
                        forms.add("bare")
                    else:
                        self.assertEqual(rest[0], C.article((rest[1:] + [noun])[0]))
                        self.assertLessEqual(len(rest), 2)
                        if len(rest) == 2:
                            self.assertIn(rest[1], adjs)
                        forms.add("a" if len(rest) == 1 else "adj")
        self.assertEqual(forms, {"bare", "a", "adj"})

    def test_caption_rules_reject_false_adjectives(self):
        tall_thin = C.metrics_from_extents([0.3, 1.8, 0.3])
        self.assertTrue(C.holds(C.ADJECTIVES["height"]["tall"], tall_thin))
        self.assertTrue(C.holds(C.ADJECTIVES["width"]["thin"], tall_thin))
        self.assertFalse(C.holds(C.ADJECTIVES["height"]["flat"], tall_thin))
        self.assertFalse(C.holds(C.ADJECTIVES["size"]["small"], tall_thin))
        self.assertTrue(C.holds(C.ADJECTIVES["size"]["big"], tall_thin))


class DatasetTest(unittest.TestCase):
    def test_sample_contents_and_determinism(self):
        a = D.generate_sample("mug", 3, seed=5, n_surface=512, n_occ=1024)
        b = D.generate_sample("mug", 3, seed=5, n_surface=512, n_occ=1024)
        c = D.generate_sample("mug", 3, seed=5, split="val", n_surface=512, n_occ=1024)
        for k in ("surface_points", "surface_normals", "occ_points", "occ_labels"):
            np.testing.assert_array_equal(a[k], b[k])
        self.assertEqual(a["caption"], b["caption"])
        self.assertEqual(a["params"], b["params"])
        self.assertNotEqual(a["params"], c["params"])
        self.assertEqual(a["surface_points"].shape, (512, 3))
        self.assertEqual(a["occ_points"].shape, (1024, 3))
        self.assertEqual(a["occ_labels"].dtype, np.uint8)
        f = a["shape"].sdf
        self.assertLess(np.abs(f(a["surface_points"].astype(np.float64))).max(), 2e-3)
        np.testing.assert_allclose(np.linalg.norm(a["surface_normals"], axis=1), 1, atol=1e-4)
        np.testing.assert_array_equal(a["occ_labels"], (f(a["occ_points"].astype(np.float64)) < 0).astype(np.uint8))
        self.assertTrue(np.all(np.abs(a["occ_points"]) <= D.BOUND))
        self.assertTrue(0.05 < a["occ_labels"].mean() < 0.95)
        json.dumps(a["params"])

    def test_sphere_surface_is_uniform_with_true_normals(self):
        f = S.Sphere(0.6)
        p = D.sample_surface(f, 4000, np.random.default_rng(3))
        np.testing.assert_allclose(np.linalg.norm(p, axis=1), 0.6, atol=1e-4)
        np.testing.assert_allclose(S.normals(f, p), p / 0.6, atol=1e-3)
        # Area-uniform on a sphere: each coordinate is uniform in [-r, r] (Archimedes).
        hist = np.histogram(p[:, 1], bins=8, range=(-0.6, 0.6))[0] / len(p)
        np.testing.assert_allclose(hist, 1 / 8, atol=0.025)

    def test_iou_helpers(self):
        a = D.occupancy_grid(lambda q: S.Sphere(0.5)(q) < 0, 48)
        self.assertEqual(D.iou(a, a), 1.0)
        v = D.iou_functions(lambda q: S.Sphere(0.5)(q) < 0, lambda q: S.Sphere(0.4)(q) < 0, 48)
        self.assertAlmostEqual(v, 0.8**3, delta=0.04)
        self.assertEqual(D.iou(np.zeros((4, 4, 4), bool), np.zeros((4, 4, 4), bool)), 1.0)
        with self.assertRaises(ValueError):
            D.iou(np.zeros((4, 4, 4), bool), np.zeros((4, 4, 3), bool))

    def test_cli_writes_npz_and_shards(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "s.npz")
            rc = D.main(["generate", "--out", out, "--per-family", "1", "--families", "sphere,chair",
                         "--n-surface", "64", "--n-occ", "128"])
            self.assertEqual(rc, 0)
            z = np.load(out)
            self.assertEqual(z["surface_points"].shape, (2, 64, 3))
            self.assertEqual(list(z["families"]), ["sphere", "chair"])
            shard_dir = os.path.join(tmp, "shards")
            rc = D.main(["generate", "--out", shard_dir, "--per-family", "3", "--families", "torus",
                         "--n-surface", "32", "--n-occ", "32", "--shard-size", "2"])
            self.assertEqual(rc, 0)
            with open(os.path.join(shard_dir, "manifest.json")) as fh:
                manifest = json.load(fh)
            self.assertEqual(manifest["shards"], ["train_00000.npz", "train_00001.npz"])
            idx = np.concatenate([np.load(os.path.join(shard_dir, s))["indices"] for s in manifest["shards"]])
            self.assertEqual(list(idx), [0, 1, 2])
            # Sharding does not change samples.
            one = D.generate_sample("torus", 2, seed=1, n_surface=32, n_occ=32)
            last = np.load(os.path.join(shard_dir, "train_00001.npz"))
            np.testing.assert_array_equal(last["surface_points"][0], one["surface_points"])
            self.assertEqual(D.main(["generate", "--out", out, "--families", "teapot"]), 2)


class BpeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.captions = bpe.caption_corpus(15, seed=3)
        counts = bpe.corpus_words(cls.captions)
        cls.merges = bpe.learn_merges(counts, 1000)
        bpe.write_files(cls.tmp.name, cls.merges)
        cls.enc = bpe.Encoder(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_clip_layout(self):
        with open(os.path.join(self.tmp.name, "vocab.json"), encoding="utf-8") as fh:
            vocab = json.load(fh)
        sym = list(bpe.bytes_to_unicode().values())
        self.assertEqual(len(set(sym)), 256)
        self.assertEqual([vocab[s] for s in sym], list(range(256)))
        self.assertEqual([vocab[s + "</w>"] for s in sym], list(range(256, 512)))
        self.assertEqual(vocab["!"], 0)  # CLIP's first byte symbol
        self.assertEqual(vocab["<|startoftext|>"], len(vocab) - 2)
        self.assertEqual(vocab["<|endoftext|>"], len(vocab) - 1)
        self.assertEqual(sorted(vocab.values()), list(range(len(vocab))))
        with open(os.path.join(self.tmp.name, "merges.txt"), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        self.assertEqual(lines[0], "#version: 0.2")
        self.assertEqual(len(lines) - 1, len(self.merges))
        for k, line in enumerate(lines[1:]):
            a, b = line.split(" ")
            self.assertEqual(vocab[a + b], 512 + k)

    def test_round_trip_and_single_tokens(self):
        for cap in self.captions + ["A Tall  THIN cylinder"]:
            self.assertEqual(self.enc.decode(self.enc.encode(cap)), " ".join(cap.lower().split()))
        # As CLIP: pre-token boundaries become spaces when decoding.
        self.assertEqual(self.enc.decode(self.enc.encode("a chair's leg, 3d!")), "a chair 's leg , 3 d !")
        for w in C.vocabulary_words():
            for part in w.split():
                self.assertEqual(len(self.enc.encode(part)), 1, part)
        self.assertEqual(len(self.enc.encode("a tall thin cylinder")), 4)
        # An unseen word still encodes (byte fallback) and round-trips.
        self.assertEqual(self.enc.decode(self.enc.encode("zyxwv")), "zyxwv")
        self.assertGreater(len(self.enc.encode("zyxwv")), 1)

    @unittest.skipUnless(os.path.exists(os.path.join(ROOT, "tools", "clip_tokenizer_ref.py")), "no CLIP oracle")
    def test_matches_clip_reference_tokenizer(self):
        # tools/clip_tokenizer_ref.py re-implements openai/CLIP's SimpleTokenizer, which builds its
        # vocabulary from the merges alone: it must agree with our vocab.json and encodings.
        import gzip

        import clip_tokenizer_ref as ref_mod

        with open(os.path.join(self.tmp.name, "merges.txt"), encoding="utf-8") as fh:
            merges_text = fh.read().rstrip("\n")
        gz = os.path.join(self.tmp.name, "bpe.txt.gz")
        with gzip.open(gz, "wb") as fh:
            fh.write(merges_text.encode("utf-8"))
        ref = ref_mod.SimpleTokenizer(gz)
        self.assertEqual(ref.encoder, self.enc.encoder)
        for cap in self.captions[::5] + ["A Tall  THIN cylinder!!", "a chair's leg, 3d", "zyxwv"]:
            self.assertEqual(ref.encode(cap), self.enc.encode(cap), cap)

    def test_deterministic(self):
        again = bpe.learn_merges(bpe.corpus_words(self.captions), 1000)
        self.assertEqual(again, self.merges)
        capped = bpe.learn_merges(bpe.corpus_words(self.captions), 10)
        self.assertEqual(capped, self.merges[:10])


if __name__ == "__main__":
    unittest.main()
