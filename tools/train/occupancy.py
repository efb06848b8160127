"""Occupancy samples drawn afresh at every training step (tessera-tiny v2 recipe, issue 38).

Phase 1-13 trained on the dataset's `occ_points`: 4096 points per shape fixed at generation and reused
every epoch, the near-surface half spread by area (flat faces get as many as edges, edges and rims none
in particular). `OnlineOccupancy` keeps the shapes themselves instead (re-made from the dataset's seed:
`families.make_shape` with the sample's own generator, as evaluate.py does) and labels new points with
their SDFs at every step:

- `uniform`: uniform in the query cube [-1.05, 1.05]^3 (the far field and the empty margin);
- `band`: a thin band around the surface: a dataset surface point + isotropic Gaussian noise with sigma
  drawn per point from `band_sigmas` (default 0.003 / 0.01 / 0.03; the old data used 0.01 / 0.04);
- `edge`: the same around points next to the shape's edges and rims (`dataset.sample_edges`: the
  generators list their sharp curves), sigma from `edge_sigmas`; shapes without edges (sphere,
  capsule, torus, most snowmen) give this share to the band.

Each sample gets a loss weight (`edge_weight` for the edge group, 1 otherwise). The points of step s come
from `np.random.default_rng([seed, 38, s])`, so a resumed run draws exactly what an uninterrupted one
would, and no two steps (no two epochs) see the same points. The edge pool (`edges_per_shape` points per
shape, from the sample's own stream) is built once at start (~4 ms per shape).
"""

import time

import numpy as np
import torch

from shapes import dataset as D
from shapes.families import make_shape

BOUND = D.BOUND


class OnlineOccupancy:
    def __init__(self, data, split="train", seed=0, mix=(0.3, 0.45, 0.25), band_sigmas=(0.003, 0.01, 0.03),
                 edge_sigmas=(0.004, 0.015), edge_weight=2.0, edges_per_shape=512, logger=None):
        if len(mix) != 3 or min(mix) < 0 or abs(sum(mix) - 1.0) > 1e-6:
            raise ValueError(f"occupancy mix {mix}: three non-negative fractions (uniform, band, edge) "
                             "summing to 1")
        self.seed = int(seed)
        self.mix = tuple(float(m) for m in mix)
        self.band_sigmas = np.asarray(band_sigmas, np.float64)
        self.edge_sigmas = np.asarray(edge_sigmas, np.float64)
        self.edge_weight = float(edge_weight)
        self.surface = data["surface_points"]
        names = data["family_names"]
        data_seed = int(data["manifest"]["seed"])
        t0 = time.time()
        self.sdfs, self.edges = [], []
        for fid, idx in zip(data["family_ids"], data["indices"]):
            fid, idx = int(fid), int(idx)
            shape = make_shape(names[fid], np.random.default_rng([data_seed, D.SPLITS[split], fid, idx]))
            self.sdfs.append(shape.sdf)
            self.edges.append(D.sample_edges(shape.sdf, edges_per_shape,
                                             np.random.default_rng([data_seed, 38, D.SPLITS[split], fid, idx]))
                              .astype(np.float32))
        with_edges = sum(1 for e in self.edges if len(e))
        if logger:
            logger.log(f"online occupancy: {len(self.sdfs)} shapes re-made from seed {data_seed}, edge pools "
                       f"for {with_edges} ({time.time() - t0:.0f} s); mix uniform/band/edge {self.mix}, band "
                       f"sigmas {tuple(self.band_sigmas)}, edge sigmas {tuple(self.edge_sigmas)}, edge "
                       f"weight {self.edge_weight}")

    def counts(self, n, has_edges):
        n_uni = int(round(n * self.mix[0]))
        n_edge = int(round(n * self.mix[2])) if has_edges else 0
        return n_uni, n - n_uni - n_edge, n_edge

    def sample_shape(self, row, n, rng):
        """(points [n, 3] float32, labels [n] float32 (1 = inside), weights [n] float32, group [n] int8:
        0 uniform, 1 band, 2 edge) for training shape `row`."""
        edges = self.edges[row]
        n_uni, n_band, n_edge = self.counts(n, len(edges) > 0)
        surf = self.surface[row]
        parts = [rng.uniform(-BOUND, BOUND, size=(n_uni, 3))]
        sig = self.band_sigmas[rng.integers(len(self.band_sigmas), size=n_band)]
        parts.append(surf[rng.integers(surf.shape[0], size=n_band)] + rng.normal(size=(n_band, 3)) * sig[:, None])
        if n_edge:
            sig = self.edge_sigmas[rng.integers(len(self.edge_sigmas), size=n_edge)]
            parts.append(edges[rng.integers(edges.shape[0], size=n_edge)] +
                         rng.normal(size=(n_edge, 3)) * sig[:, None])
        pts = np.clip(np.concatenate(parts), -BOUND, BOUND)
        group = np.repeat(np.array([0, 1, 2], np.int8), [n_uni, n_band, n_edge])
        labels = (self.sdfs[row].eval(pts) < 0).astype(np.float32)
        weights = np.where(group == 2, self.edge_weight, 1.0).astype(np.float32)
        return pts.astype(np.float32), labels, weights, group

    def batch(self, rows, n, step):
        """Tensors (points (B,n,3), labels (B,n), weights (B,n)) for the shapes `rows` at `step`."""
        rng = np.random.default_rng([self.seed, 38, int(step)])
        out = [self.sample_shape(int(r), n, rng) for r in rows]
        return (torch.from_numpy(np.stack([o[0] for o in out])), torch.from_numpy(np.stack([o[1] for o in out])),
                torch.from_numpy(np.stack([o[2] for o in out])))
