"""The tessera-tiny v2 autoencoder recipe (issue 38; tools/train/README.md, "tessera-tiny v2 recipe"):
- edge and rim samples (shapes.dataset.sample_edges, from the generators' own sharp curves) lie on the
  surface next to the edges, hidden edges are dropped, families without edges give none;
- online occupancy (train/occupancy.py): labels are the SDF's, a step's points are reproducible from the
  step alone and differ from step to step (so from epoch to epoch), with the requested mix and weights;
- the lattice latent queries depend on the shape, not on the point sample (unlike farthest-point
  queries), and come in coarse-to-fine order;
- the v2 shape tokenizer (64 Fourier frequencies) exports to the same tensor names, the engine-read
  sizes differ only in num_freqs, the reference loads it strictly and decodes as training does, and the
  query mode survives the export (metadata); train_autoencoder.py trains it and resumes.
Run: /usr/bin/python3 -m unittest tools/tests/test_v2_recipe.py (repo root)."""

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from shapes import dataset as D  # noqa: E402
from shapes import sdf as S  # noqa: E402
from shapes.families import FAMILIES, make_shape  # noqa: E402
from tessera_ref import st_io  # noqa: E402
from train import common, evaluate, train_autoencoder  # noqa: E402
from train.export_tiny import shape_tokenizer_metadata  # noqa: E402
from train.occupancy import OnlineOccupancy  # noqa: E402


def dist_to_segments(p, segs):
    """Distance of points p [N,3] to the nearest of the segments [(a, b)]."""
    best = np.full(p.shape[0], np.inf)
    for a, b in segs:
        a, b = np.asarray(a, float), np.asarray(b, float)
        t = np.clip((p - a) @ (b - a) / max((b - a) @ (b - a), 1e-12), 0, 1)
        best = np.minimum(best, np.linalg.norm(p - (a + t[:, None] * (b - a)), axis=1))
    return best


def box_edges(h):
    segs = []
    for ax in range(3):
        o = [d for d in range(3) if d != ax]
        for s1 in (-1, 1):
            for s2 in (-1, 1):
                a, b = np.zeros(3), np.zeros(3)
                a[ax], b[ax] = -h[ax], h[ax]
                a[o[0]] = b[o[0]] = s1 * h[o[0]]
                a[o[1]] = b[o[1]] = s2 * h[o[1]]
                segs.append((a, b))
    return segs


class EdgeSamplesTest(unittest.TestCase):
    def test_sharp_box_edges(self):
        h = np.array([0.5, 0.2, 0.3])
        f = S.Box(h).translate((0.1, 0.0, -0.05))
        e = D.sample_edges(f, 400, np.random.default_rng(0))
        self.assertEqual(e.shape, (400, 3))
        self.assertLess(np.abs(f.eval(e)).max(), 1e-4)                  # on the surface
        d = dist_to_segments(e - np.array([0.1, 0.0, -0.05]), box_edges(h))
        self.assertLess(d.max(), 0.041)                                    # within the jitter of an edge
        surf = D.sample_surface(f, 400, np.random.default_rng(1))
        self.assertLess(np.median(d), 0.25 * np.median(dist_to_segments(surf - [0.1, 0, -0.05], box_edges(h))))

    def test_rounded_edges_and_rims(self):
        r = 0.04
        inner = np.array([0.4, 0.3, 0.2])
        f = S.Round(S.Box(inner), r)                                       # a family-style rounded box
        e = D.sample_edges(f, 300, np.random.default_rng(2))
        d = dist_to_segments(e, box_edges(inner))
        self.assertTrue(np.all(d > r - 1e-3) and np.all(d < 2.2 * r), (d.min(), d.max()))
        self.assertGreater(np.mean(np.abs(d - r) < 2e-3), 0.3)            # many exactly on the rounded edge
        cyl = S.Round(S.Cylinder(0.3, 0.2), r)                              # rims: circles r=0.3 at y=+-0.2
        e = D.sample_edges(cyl, 300, np.random.default_rng(3))
        rho = np.hypot(e[:, 0], e[:, 2])
        d = np.hypot(rho - 0.3, np.abs(e[:, 1]) - 0.2)
        self.assertTrue(np.all(d < 2.2 * r) and np.all(d > r - 1e-3), (d.min(), d.max()))

    def test_hidden_edges_are_dropped(self):
        big = np.array([0.5, 0.5, 0.5])
        f = S.Union(S.Box(big), S.Box([0.2, 0.2, 0.2]))                     # the small box is buried
        e = D.sample_edges(f, 300, np.random.default_rng(4))
        self.assertEqual(len(e), 300)
        self.assertLess(dist_to_segments(e, box_edges(big)).max(), 0.041)

    def test_families(self):
        for fi, fam in enumerate(FAMILIES):
            sh = make_shape(fam, np.random.default_rng([1, 0, fi, 0]))
            e = D.sample_edges(sh.sdf, 64, np.random.default_rng(fi))
            if fam in ("sphere", "capsule", "torus"):
                self.assertEqual(len(e), 0, fam)
            elif fam in ("box", "cylinder", "cone", "ring", "pyramid", "mug", "arch", "table", "chair",
                         "house", "lamp", "bottle"):
                self.assertEqual(len(e), 64, fam)
                self.assertLess(np.abs(sh.sdf.eval(e)).max(), 1e-4, fam)


def toy_data():
    out = {"family_names": list(FAMILIES), "manifest": {"seed": 5}}
    rows = [("box", 0), ("sphere", 1), ("chair", 2)]
    out["family_ids"] = np.array([FAMILIES.index(f) for f, _ in rows], np.int32)
    out["indices"] = np.array([i for _, i in rows], np.int32)
    surf = []
    for (fam, i) in rows:
        sh = make_shape(fam, np.random.default_rng([5, D.SPLITS["train"], FAMILIES.index(fam), i]))
        surf.append(D.sample_surface(sh.sdf, 256, np.random.default_rng(i)).astype(np.float32))
    out["surface_points"] = np.stack(surf)
    return out


class OnlineOccupancyTest(unittest.TestCase):
    def test_labels_resampling_and_mix(self):
        data = toy_data()
        occ = OnlineOccupancy(data, "train", seed=7, mix=(0.2, 0.5, 0.3), edge_weight=3.0, edges_per_shape=128)
        p1, l1, w1 = occ.batch([0, 1, 2], 200, step=10)
        p1b, l1b, _ = occ.batch([0, 1, 2], 200, step=10)
        p2, _, _ = occ.batch([0, 1, 2], 200, step=11)
        self.assertTrue(torch.equal(p1, p1b) and torch.equal(l1, l1b))   # a resume draws the same points
        self.assertFalse(torch.equal(p1, p2))                              # the next step draws new ones
        self.assertGreater(float((p1 - p2).abs().mean()), 0.05)
        self.assertLessEqual(float(p1.abs().max()), D.BOUND)
        for b, row in enumerate([0, 1, 2]):
            sdf = occ.sdfs[row].eval(p1[b].double().numpy())
            self.assertTrue(np.array_equal(l1[b].numpy() == 1, sdf < 0))
        # box and chair: 30 % edge samples weighted 3; the sphere has no edges: band instead
        self.assertEqual(int((w1[0] == 3).sum()), 60)
        self.assertEqual(int((w1[1] == 3).sum()), 0)
        self.assertEqual(int((w1[2] == 3).sum()), 60)
        # near-surface samples: both labels occur, and the edge group sits at the edges
        pts, lab, _, group = occ.sample_shape(0, 400, np.random.default_rng(0))
        d = np.abs(occ.sdfs[0].eval(pts.astype(np.float64)))
        self.assertLess(np.median(d[group == 2]), 0.02)
        self.assertLess(np.median(d[group == 1]), 0.02)
        self.assertGreater(np.median(d[group == 0]), 0.1)
        self.assertTrue(0 < lab[group > 0].mean() < 1)


class LatticeQueriesTest(unittest.TestCase):
    def test_lattice_is_fixed_and_coarse_to_fine(self):
        lat = common.query_lattice(64)
        self.assertEqual(tuple(lat.shape), (64, 3))
        self.assertTrue(torch.equal(lat, common.query_lattice(64)))
        self.assertEqual(len({tuple(v) for v in lat.tolist()}), 64)
        # coarse to fine: the covering radius of each prefix does not grow
        grid = torch.rand(4000, 3, generator=torch.Generator().manual_seed(0)) * 2 - 1
        cover = [float(torch.cdist(grid, lat[:k]).min(dim=1).values.max()) for k in (1, 9, 27, 64)]
        self.assertEqual(cover, sorted(cover, reverse=True))
        self.assertTrue(np.allclose(sorted(np.abs(lat[1:9]).flatten().tolist()), [0.75] * 24))  # corners

    def test_queries_depend_on_the_shape_not_the_sample(self):
        sh = make_shape("box", np.random.default_rng([1, 0, 1, 3]))
        pts = D.sample_surface(sh.sdf, 2048, np.random.default_rng(0)).astype(np.float32)
        a, b = torch.from_numpy(pts[None, :512]), torch.from_numpy(pts[None, 512:1024])
        cfg = common.tiny_shape_config(64)
        lattice = common.TrainShapeTokenizer(cfg, queries="lattice")
        fps = common.TrainShapeTokenizer(cfg, queries="fps")
        dl = (lattice.query_points(a) - lattice.query_points(b)).norm(dim=-1)
        df = (fps.query_points(a) - fps.query_points(b)).norm(dim=-1)
        self.assertLess(float(dl.max()), 0.02)     # the box's bounds: the same from either sample
        self.assertGreater(float(df.mean()), 0.05)  # FPS anchors move with the sample
        # and the queries do not depend on the order of the points either
        perm = torch.randperm(512, generator=torch.Generator().manual_seed(1))
        self.assertTrue(torch.equal(lattice.query_points(a), lattice.query_points(a[:, perm])))
        self.assertIsNone(common.TrainShapeTokenizer(cfg, queries="learned").query_points(a))


class ExportTest(unittest.TestCase):
    def test_v2_exports_the_same_tensors(self):
        old = common.TrainShapeTokenizer(common.tiny_shape_config())
        new = common.TrainShapeTokenizer(common.tiny_shape_config(64), seed=3, queries="lattice", fourier_max=96)
        w = new.embedder.weight.abs()
        self.assertAlmostEqual(float(w.min()), 1.0, delta=0.2)
        self.assertAlmostEqual(float(w.max()), 96.0, delta=96 * 0.2)
        with tempfile.TemporaryDirectory() as tmp:
            paths = {}
            for name, m in (("old", old), ("new", new)):
                paths[name] = os.path.join(tmp, f"{name}.safetensors")
                st_io.save_torch_state_dict(paths[name], common.strip_training_buffers(m.state_dict()),
                                            shape_tokenizer_metadata(m, {"format": "pt"}))
            so, sn = st_io.shapes(paths["old"]), st_io.shapes(paths["new"])
            self.assertEqual(set(so), set(sn))
            co, cn = (common.C.as_dict(common.C.shape_from_shapes(s)) for s in (so, sn))
            self.assertEqual({k for k in co if co[k] != cn[k]}, {"num_freqs"})
            self.assertEqual(cn["num_freqs"], 64)
            self.assertEqual(sn["occupancy_decoder.query_in.in_layer.weight"], (128, 3 + 6 * 64))
            shape, enc = evaluate.load_shape_tokenizer_file(paths["new"])
            self.assertEqual(enc.queries, "lattice")
            self.assertEqual(evaluate.load_shape_tokenizer_file(paths["old"])[1].queries, "fps")
        ids = torch.randint(0, 511, (1, 64), generator=torch.Generator().manual_seed(0))
        q = torch.rand(1, 100, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1
        with torch.no_grad():
            ref = shape.occupancy(shape.decode_tokens(ids), q)
            train = new.eval().occupancy_decoder(q, new.decode_ids(ids))
        self.assertTrue(torch.allclose(ref, train, atol=1e-5))


class TrainTest(unittest.TestCase):
    def test_train_and_resume_v2(self):
        tmp = tempfile.mkdtemp(prefix="tessera-v2-test-")
        try:
            data = os.path.join(tmp, "data")
            for split in ("train", "val"):
                subprocess.run([sys.executable, "-m", "tools.shapes.dataset", "generate", "--out",
                                os.path.join(data, split), "--per-family", "2", "--seed", "3", "--split", split,
                                "--families", "box,torus", "--n-surface", "1024", "--n-occ", "256"],
                               check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            run = os.path.join(tmp, "run")
            args = ["--run-dir", run, "--data", data, "--batch", "2", "--warmup", "1", "--vq-start", "1",
                    "--eval-every", "1000", "--n-points", "256", "--n-query", "128", "--encoder-queries",
                    "lattice", "--num-freqs", "64", "--fourier-max", "96", "--online-occupancy",
                    "--consistency", "0.5"]
            with contextlib.redirect_stdout(io.StringIO()):
                train_autoencoder.main(args + ["--steps", "2"])
                os.remove(os.path.join(run, "ae_done.json"))
                train_autoencoder.main(args + ["--steps", "3"])
            st = torch.load(os.path.join(run, "ae_ckpt.pt"))
            self.assertEqual(st["step"], 3)
            self.assertEqual(st["extra"]["encoder_queries"], "lattice")
            m = common.shape_tokenizer_from_checkpoint(st)
            self.assertEqual((m.queries, m.cfg.num_freqs), ("lattice", 64))
            with self.assertRaises(SystemExit):   # a resume cannot switch the encoder's queries
                with contextlib.redirect_stdout(io.StringIO()):
                    os.remove(os.path.join(run, "ae_done.json"))
                    train_autoencoder.main(args[:-9] + ["--encoder-queries", "fps", "--steps", "4"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
