"""Shared pieces of the tessera-tiny training pipeline.

- Model configurations of tessera-tiny (`tiny_shape_config`, `tiny_gpt_config`, `tiny_clip_config`).
- `TrainShapeTokenizer`: the reference shape tokenizer (tools/tessera_ref, real Cube 3D key names) plus
  the training-only parts: farthest-point-sample (FPS) latent queries, the straight-through spherical VQ
  with a reserved fill code for token-prefix training, and dead-code restarts.
- `TrainGPT`: the reference Cube GPT whose shape-code embeddings are computed as the engine computes them
  at load time (wte[0:K] = shape_proj(normalized codebook)), so training and inference agree.
- A gradient-enabled forward of the tiny CLIP text model, and a CLIP-format BPE tokenizer reading a
  Hugging Face vocab.json + merges.txt.
- Data loading (the shard folders written by tools/shapes/dataset.py), cosine LR schedule, atomic
  checkpoints with RNG state, logging, dense-grid occupancy evaluation.

Encoder design (documented in the model card too): Cube 3D's encoder uses learned queries only
(`encoder.query`, [1 + L, W], row 0 a class token). Learned small-init queries plateaued in an earlier
experiment, so here latent query l is `encoder.query[1 + l] + feat_in(point_l)`, where point_l is the
l-th farthest-point sample of the input points (first point: the highest one, max y; ties -> lowest
index). FPS order is coarse-to-fine, which also suits token-prefix decoding. The checkpoint keeps the
exact real keys; only the encoder's forward differs from Cube's, and the C++ engine never runs the
encoder (it decodes token ids). The v2 recipe (issue 38, README "tessera-tiny v2 recipe") anchors the
queries on a fixed coarse-to-fine lattice scaled to the input's bounds instead (`queries="lattice"`),
so that two point samples of one shape get the same queries; the mode is recorded in the checkpoint
(extra['encoder_queries']) and in the exported shape_tokenizer.safetensors' metadata.
"""

import json
import math
import os
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TOOLS)
for _p in (TOOLS, REPO):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from tessera_ref import config as C  # noqa: E402
from tessera_ref.clip_text import ClipTextModel  # noqa: E402
from tessera_ref.cube_gpt import CubeGPT, layer_norm  # noqa: E402
from tessera_ref.shape_tokenizer import ShapeTokenizer  # noqa: E402

RUN_DIR = os.path.join(REPO, "tools/train/records", "tessera-tiny")
DATA_DIR = os.path.join(REPO, ".cache", "tessera-data")   # regenerated from the seed, never committed
BOUND = 1.05


# ---- configurations ----------------------------------------------------------------------------------

def tiny_shape_config(num_freqs=32):
    """Shape tokenizer of tessera-tiny: 64 latents of width 128, codebook 512 x 16 (code 511 = fill).
    num_freqs: Fourier frequencies per axis (32 until phase 13; the v2 recipe uses 64). The engine reads
    it from the shape of embedder.weight [3, num_freqs]."""
    return C.ShapeConfig(width=128, n_head=4, num_latents=64, embed_dim=16, num_codes=512,
                         num_freqs=int(num_freqs), point_feats=3, encoder_layers=2, encoder_cross_levels=[0],
                         with_cls_token=True, decoder_layers=4, mlp_hidden=256)


def shape_config_of_state(model_state):
    """The ShapeConfig of a shape-tokenizer state dict, read from its tensor shapes (as the engine and
    tessera_ref do): checkpoints of any recipe (32 or 64 Fourier frequencies ...) load without flags."""
    return C.shape_from_shapes({k: tuple(v.shape) for k, v in model_state.items() if k != "code_usage"})


ENCODER_QUERIES = ("fps", "lattice", "learned")


def encoder_queries_of(extra):
    """The encoder query mode a checkpoint was trained with (its extra['encoder_queries']; 'fps' for the
    runs before the v2 recipe, which did not record it)."""
    return (extra or {}).get("encoder_queries", "fps")


def shape_tokenizer_from_checkpoint(state):
    """TrainShapeTokenizer with the weights, config and encoder query mode of an ae_ckpt.pt state."""
    model = TrainShapeTokenizer(shape_config_of_state(state["model"]),
                                queries=encoder_queries_of(state.get("extra")))
    model.load_state_dict(state["model"])
    return model


def tiny_clip_config(vocab_size, bos_id, eos_id):
    return C.ClipTextConfig(vocab_size=vocab_size, max_position=77, width=64, n_layer=2, n_head=4,
                            mlp_hidden=256, bos_id=bos_id, eos_id=eos_id)


def tiny_gpt_config(shape_cfg, text_width, sizes=None):
    """v0.5 style (bbox condition token). Codes are the tokenizer's codes, BOS/EOS/PAD after them.
    sizes: optional dict n_embd / n_layer / n_single / mlp_hidden / head_dim (train_gpt.py --n-embd
    ...); the default is the first tessera-tiny GPT (128 wide, 4 dual + 1 single block, SwiGLU 256)."""
    s = {"n_embd": 128, "n_layer": 4, "n_single": 1, "mlp_hidden": 256, "head_dim": 32, **(sizes or {})}
    if s["n_embd"] % s["head_dim"]:
        raise ValueError(f"GPT n_embd {s['n_embd']} is not a multiple of head_dim {s['head_dim']}")
    return C.GptConfig(n_embd=s["n_embd"], n_head=s["n_embd"] // s["head_dim"], n_layer=s["n_layer"],
                       n_single_layer=s["n_single"], mlp_hidden=s["mlp_hidden"],
                       codebook_size=shape_cfg.num_codes, shape_embed_dim=shape_cfg.embed_dim,
                       text_embed_dim=text_width, use_bbox=True, num_latents=shape_cfg.num_latents)


def fill_code_id(shape_cfg):
    """Token id whose codebook row is the learned 'fill' code: a prefix of k tokens followed by this id
    up to num_latents decodes to a coarse version of the shape (live preview)."""
    return shape_cfg.num_codes - 1


# ---- shape tokenizer with training parts --------------------------------------------------------------

def query_lattice(n):
    """n fixed points in [-1, 1]^3, ordered coarse to fine: the centres of a k x k x k lattice (k^3 >= n)
    in greedy farthest-point order, starting at the centre-most one (ties: lowest index). Every prefix
    covers the box as evenly as the lattice allows (the first 9 of 64: the centre-most point, then the
    corners), so a short token prefix describes the whole shape coarsely. Independent of any input."""
    k = 1
    while k ** 3 < n:
        k += 1
    c = (torch.arange(k, dtype=torch.float64) + 0.5) / k * 2 - 1
    pts = torch.stack(torch.meshgrid(c, c, c, indexing="ij"), -1).reshape(-1, 3)
    order = [int((pts ** 2).sum(-1).argmin())]
    dist = ((pts - pts[order[0]]) ** 2).sum(-1)
    for _ in range(n - 1):
        nxt = int(dist.argmax())
        order.append(nxt)
        dist = torch.minimum(dist, ((pts - pts[nxt]) ** 2).sum(-1))
    return pts[order].float()


def lattice_query_points(points, lattice):
    """points (B,N,3), lattice (L,3) in [-1,1]^3 -> query positions (B,L,3): the lattice scaled to the
    axis-aligned bounds of the points (half extents at least 0.02). Depends on the shape's extent only:
    two samples of one surface give the same bounds up to the sampling gap at the extremes."""
    lo, hi = points.min(dim=1).values, points.max(dim=1).values
    centre, half = (lo + hi) / 2, ((hi - lo) / 2).clamp_min(0.02)
    return centre[:, None] + half[:, None] * lattice[None]


def farthest_point_sample(points, k):
    """points (B,N,3) -> indices (B,k) int64; starts at the highest point (max y), deterministic."""
    b, n, _ = points.shape
    idx = torch.zeros(b, k, dtype=torch.long)
    dist = torch.full((b, n), float("inf"))
    cur = points[:, :, 1].argmax(dim=1)
    ar = torch.arange(b)
    for i in range(k):
        idx[:, i] = cur
        c = points[ar, cur]                                   # (B,3)
        dist = torch.minimum(dist, ((points - c[:, None]) ** 2).sum(-1))
        cur = dist.argmax(dim=1)
    return idx


class TrainShapeTokenizer(ShapeTokenizer):
    """queries: how the encoder's latent queries are made (only the Python tools run the encoder):
    - "fps" (phases 1-13): encoder.query[1 + l] + feat_in(p_l), p_l the l-th farthest-point sample of
      the input points: depends on the point sample (code stability ~0.23, issue 38);
    - "lattice" (v2 recipe): encoder.query[1 + l] + feat_in(Fourier(q_l), normal 0), q_l the l-th point of
      a fixed coarse-to-fine lattice (query_lattice) scaled to the input's bounds: depends on the shape
      (its extent), not on which points were sampled;
    - "learned": Cube 3D's encoder.query alone (tessera_ref.shape_tokenizer.Encoder).
    None of them adds tensors: the state dict keeps the real key names.
    fourier_max > 0: the Fourier frequencies start log-spaced from fourier_min to fourier_max (per axis,
    random signs, 5 % jitter) instead of N(0, fourier_std)."""

    def __init__(self, cfg, seed=0, fourier_std=4.0, queries="fps", fourier_min=1.0, fourier_max=0.0):
        super().__init__(cfg)
        if queries not in ENCODER_QUERIES:
            raise ValueError(f"encoder queries {queries!r}: one of {ENCODER_QUERIES}")
        self.queries = queries
        self.fill_id = fill_code_id(cfg)
        self.register_buffer("query_lattice", query_lattice(cfg.num_latents), persistent=False)
        self.reset_parameters(seed, fourier_std, fourier_min, fourier_max)
        vq = self.bottleneck.block
        # Frozen so that the normalized codebook is RMSNorm(codebook): dead-code restarts can then write
        # encoder outputs straight into codebook rows. They are still saved (ones / zeros) and applied.
        for p in (vq.cb_weight, vq.cb_bias, vq.norm.weight):
            p.requires_grad_(False)
        self.register_buffer("code_usage", torch.ones(cfg.num_codes))

    def reset_parameters(self, seed, fourier_std=4.0, fourier_min=1.0, fourier_max=0.0):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in sorted(self.named_parameters()):
                leaf = name.rsplit(".", 1)[-1]
                if name == "embedder.weight" and fourier_max > 0:   # log-spaced bandwidth (v2 recipe)
                    mag = torch.logspace(math.log10(fourier_min), math.log10(fourier_max), p.shape[1],
                                         dtype=torch.float64).float()
                    sign = torch.randint(0, 2, p.shape, generator=g).float() * 2 - 1
                    jitter = torch.exp(0.05 * torch.randn(p.shape, generator=g))
                    p.copy_(mag[None] * sign * jitter)
                elif name == "embedder.weight":
                    p.copy_(torch.randn(p.shape, generator=g) * fourier_std)   # Fourier frequencies
                elif name == "encoder.query":
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                elif name == "decoder.positional_encodings":
                    p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                elif name.endswith("codebook.weight"):
                    p.copy_(torch.randn(p.shape, generator=g))
                elif leaf == "bias":
                    p.zero_()
                elif p.dim() == 1:
                    p.fill_(1.0)
                else:  # Linear weights: Xavier-ish, residual outputs scaled down
                    std = 1.0 / math.sqrt(p.shape[1])
                    if name.endswith(("c_proj.weight", "down_proj.weight")):
                        std *= 0.5
                    p.copy_(torch.randn(p.shape, generator=g) * std)
            self.occupancy_decoder.c_head.weight.mul_(0.1)

    @torch.no_grad()
    def tie_encoder_qk_(self):
        """Initialises c_k = c_q in the encoder's cross-attention layers. Queries are FPS point
        embeddings and keys the same embeddings of all points, so q.k starts as a positional
        similarity kernel: every latent attends to the points around its FPS point from step 0
        (random independent c_q / c_k give near-uniform attention, i.e. 64 copies of a global code)."""
        for blk in self.encoder.blocks:
            if blk.__class__.__name__ == "CrossLayer":
                blk.attn.c_k.weight.copy_(blk.attn.c_q.weight)
                blk.attn.c_k.bias.copy_(blk.attn.c_q.bias)

    def query_points(self, points):
        """Positions the latent queries are anchored on (B,L,3): FPS samples of the input ("fps"), the
        lattice scaled to its bounds ("lattice"); None for "learned"."""
        if self.queries == "fps":
            idx = farthest_point_sample(points, self.cfg.num_latents)
            return torch.gather(points.float(), 1, idx[..., None].expand(-1, -1, 3))
        if self.queries == "lattice":
            return lattice_query_points(points.float(), self.query_lattice)
        return None

    # -- encoder with FPS / lattice / learned queries --
    def encode_latents(self, points, normals):
        """points/normals (B,N,3) -> encoder output (B,1+L,W) after ln_f (row 0: class token)."""
        enc, cfg = self.encoder, self.cfg
        data = enc.feat_in(torch.cat([enc.embedder(points), normals.float()], dim=-1))
        h = enc.query.unsqueeze(0).expand(points.shape[0], -1, -1)
        if self.queries == "fps":
            idx = farthest_point_sample(points, cfg.num_latents)
            q_pts = torch.gather(data, 1, idx[..., None].expand(-1, -1, data.shape[-1]))
            h = torch.cat([h[:, :1], h[:, 1:] + q_pts], dim=1)
        elif self.queries == "lattice":
            qp = lattice_query_points(points.float(), self.query_lattice)
            q_feat = enc.feat_in(torch.cat([enc.embedder(qp), qp.new_zeros(qp.shape[:2] + (cfg.point_feats,))],
                                           dim=-1))
            h = torch.cat([h[:, :1], h[:, 1:] + q_feat], dim=1)
        for blk in enc.blocks:
            h = blk(h, data) if blk.__class__.__name__ == "CrossLayer" else blk(h)
        return enc.ln_f(h)

    def project(self, h):
        """Encoder output incl. class token -> z (B,L,E) on the RMS sphere."""
        vq = self.bottleneck.block
        return vq.norm(vq.c_in(h[:, 1:]))

    def codebook_vectors(self):
        return self.bottleneck.block.normalized_codebook()

    def nearest_codes(self, z, cb=None):
        """Nearest normalized code (max dot product = min Euclidean, all norms equal), fill excluded."""
        cb = self.codebook_vectors() if cb is None else cb
        sim = torch.matmul(z, cb[: self.fill_id].t())
        return sim.argmax(dim=-1)

    def forward_train(self, points, normals, qpts, keep=None, vq_on=True, noise=None):
        """Training forward. keep (B,) int: latents at positions >= keep[b] are replaced by the fill code.
        noise: None or (mask (B,L) bool, ids (B,L) int): where mask is set the decoder gets code ids[b, l]
        instead of the shape's own (before the fill tail; VQ must be on).
        Returns (occupancy logits (B,P), dict of auxiliary tensors)."""
        vq = self.bottleneck.block
        h = self.encode_latents(points, normals)
        z = self.project(h)
        cb = self.codebook_vectors()
        aux = {}
        if vq_on:
            ids = self.nearest_codes(z.detach(), cb)
            c = F.embedding(ids, cb)
            aux["commit"] = F.mse_loss(z, c.detach())
            aux["codebook"] = F.mse_loss(c, z.detach())
            aux["ids"] = ids
            zq = z + (c - z).detach()
        else:
            zq = z
        if noise is not None:
            if not vq_on:
                raise ValueError("code noise needs the codebook (VQ on)")
            mask, noise_ids = noise
            zq = torch.where(mask.unsqueeze(-1), F.embedding(noise_ids, cb), zq)
        if keep is not None:
            pos = torch.arange(zq.shape[1])[None, :]
            tail = (pos >= keep[:, None]).unsqueeze(-1)
            zq = torch.where(tail, cb[self.fill_id].view(1, 1, -1).expand_as(zq), zq)
        lat = self.decoder(vq.c_out(zq))
        aux["z"] = z
        return self.occupancy_decoder(qpts, lat), aux

    @torch.no_grad()
    def reconstruct_latents(self, points, normals, keep, quantize=True):
        """Decoder latents of an encode/decode round trip; the first `keep` tokens kept, the rest fill.
        quantize=False decodes the continuous projections (used before the codebook exists)."""
        vq = self.bottleneck.block
        cb = self.codebook_vectors()
        z = self.project(self.encode_latents(points, normals))
        if quantize:
            z = F.embedding(self.nearest_codes(z, cb), cb)
        z = z.clone()
        z[:, keep:] = cb[self.fill_id]
        return self.decoder(vq.c_out(z))

    @torch.no_grad()
    def encode_ids(self, points, normals):
        return self.nearest_codes(self.project(self.encode_latents(points, normals)))

    @torch.no_grad()
    def decode_ids(self, ids):
        return self.decode_tokens(ids)

    @torch.no_grad()
    def restart_dead_codes(self, z, gen, min_usage=0.02):
        """Codes whose usage EMA fell below min_usage are set to random encoder outputs of the batch."""
        dead = (self.code_usage[: self.fill_id] < min_usage).nonzero().view(-1)
        if dead.numel() == 0:
            return 0
        flat = z.reshape(-1, z.shape[-1])
        pick = torch.randint(flat.shape[0], (dead.numel(),), generator=gen)
        self.bottleneck.block.codebook.weight[dead] = flat[pick] + 0.01 * torch.randn(
            dead.numel(), flat.shape[1], generator=gen)
        self.code_usage[dead] = 1.0
        return int(dead.numel())

    @torch.no_grad()
    def update_usage(self, ids, decay=0.99):
        counts = torch.bincount(ids.reshape(-1), minlength=self.cfg.num_codes).float()
        expected = ids.numel() / (self.cfg.num_codes - 1)
        self.code_usage.mul_(decay).add_((1 - decay) * counts / expected)

    @torch.no_grad()
    def kmeans_init_codebook(self, z, gen, iters=12):
        """Spherical k-means of encoder outputs z (M,E) into the non-fill codes (end of warm-up)."""
        k = self.fill_id
        z = z.reshape(-1, z.shape[-1])
        cent = z[torch.randperm(z.shape[0], generator=gen)[:k]].clone()
        scale = math.sqrt(z.shape[1])
        for _ in range(iters):
            a = torch.matmul(z, cent.t()).argmax(dim=1)
            s = torch.zeros_like(cent).index_add_(0, a, z)
            cnt = torch.bincount(a, minlength=k)
            empty = cnt == 0
            s = s / s.norm(dim=1, keepdim=True).clamp_min(1e-8) * scale
            s[empty] = z[torch.randint(z.shape[0], (int(empty.sum()),), generator=gen)]
            cent = s
        self.bottleneck.block.codebook.weight[:k] = cent
        self.code_usage.fill_(1.0)


def strip_training_buffers(state_dict):
    """The shipped shape_tokenizer.safetensors holds only the real Cube 3D keys."""
    return {k: v for k, v in state_dict.items() if k != "code_usage"}


# ---- GPT with load-time code embeddings ----------------------------------------------------------------

class TrainGPT(CubeGPT):
    """CubeGPT whose code rows of wte are shape_proj(codebook) (the engine's load-time step), live."""

    def __init__(self, cfg, codebook_normalized, seed=0):
        super().__init__(cfg)
        self.register_buffer("codebook_normalized", codebook_normalized.clone().float())
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in sorted(self.named_parameters()):
                leaf = name.rsplit(".", 1)[-1]
                if leaf == "bias":
                    p.zero_()
                elif p.dim() == 1:
                    p.fill_(1.0)
                elif name == "transformer.wte.weight":
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
                else:
                    std = 1.0 / math.sqrt(p.shape[1])
                    if name.endswith(("c_proj.weight", "down_proj.weight")):
                        std *= 0.5
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def embed(self, ids):
        k = self.cfg.codebook_size
        table = torch.cat([self.shape_proj(self.codebook_normalized), self.transformer.wte.weight[k:]])
        return F.embedding(ids, table)

    def export_state_dict(self):
        """Real Cube keys only; wte[0:K] holds shape_proj(codebook) (the engine recomputes it anyway)."""
        sd = {k: v.detach().clone() for k, v in self.state_dict().items() if k != "codebook_normalized"}
        with torch.no_grad():
            sd["transformer.wte.weight"][: self.cfg.codebook_size] = self.shape_proj(
                self.codebook_normalized)
        return sd


def clip_hidden(clip: ClipTextModel, ids, mask):
    """Gradient-enabled CLIP text forward (the reference's forward is no_grad): causal + padded-key
    mask, last hidden state after final_layer_norm. ids/mask (B,T)."""
    tm = clip.text_model
    t = ids.shape[1]
    m = torch.ones(t, t, dtype=torch.bool).tril()[None, None] & mask.bool()[:, None, None, :]
    x = tm.embeddings(ids)
    for layer in tm.encoder.layers:
        x = layer(x, m)
    return tm.final_layer_norm(x)


def init_clip_(clip, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(clip.named_parameters()):
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias":
                p.zero_()
            elif "layer_norm" in name:
                p.fill_(1.0)
            elif "embedding" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    return clip


# ---- CLIP-format BPE tokenizer over vocab.json + merges.txt ------------------------------------------

class BpeTokenizer:
    """CLIP's tokenizer rules for the tiny vocabulary: lower-case, whitespace-collapsed text split into
    letter runs / single digits / other-symbol runs, byte-level unicode mapping, BPE with '</w>' on the
    last symbol of each word. <|startoftext|> / <|endoftext|> are BOS / EOS."""

    PAT = re.compile(r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|[^\s\w]+|_+",
                     re.IGNORECASE)

    def __init__(self, vocab_path, merges_path):
        with open(vocab_path, encoding="utf-8") as f:
            encoder = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        merges = [tuple(line.split()) for line in lines
                  if line and not line.startswith("#version") and len(line.split()) == 2]
        self._setup(encoder, merges, vocab_path)

    @classmethod
    def from_data(cls, encoder, merges, name="<vocabulary>"):
        """From a token -> id dict and a list of (left, right) merges in rank order."""
        tok = cls.__new__(cls)
        tok._setup(dict(encoder), list(merges), name)
        return tok

    def _setup(self, encoder, merges, vocab_path):
        self.encoder = encoder
        self.ranks = {m: i for i, m in enumerate(merges)}
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
            list(range(ord("®"), ord("ÿ") + 1))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.byte_encoder = dict(zip(bs, [chr(c) for c in cs]))
        for tok in ("<|startoftext|>", "<|endoftext|>"):
            if tok not in self.encoder:
                raise ValueError(f"{vocab_path}: missing special token {tok}")
        self.bos_id = self.encoder["<|startoftext|>"]
        self.eos_id = self.encoder["<|endoftext|>"]
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = list(token[:-1]) + [token[-1] + "</w>"]
        while len(word) > 1:
            pairs = [(self.ranks.get((word[i], word[i + 1]), 1 << 30), i) for i in range(len(word) - 1)]
            rank, a = min(pairs)
            if rank == 1 << 30:
                break
            first, second = word[a], word[a + 1]
            out, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        self.cache[token] = word
        return word

    def encode(self, text):
        text = re.sub(r"\s+", " ", text).strip().lower()
        ids = []
        for tok in self.PAT.findall(text):
            tok = "".join(self.byte_encoder[b] for b in tok.encode("utf-8"))
            for piece in self.bpe(tok):
                if piece not in self.encoder:
                    raise ValueError(f"token piece {piece!r} of {text!r} is not in the vocabulary")
                ids.append(self.encoder[piece])
        return ids

    ARTICLES = ("a</w>", "an</w>", "the</w>")
    image_only_ids = ()  # the diffusion extension's ids (evaluate.load_exported sets them)

    def shape_body(self, text, drop=()):
        """encode(text) without the ids in `drop` (the diffusion extension's image-only words) and the
        articles they leave at the end: the C++ ShapePipeline::shape_prompt_ids rule."""
        body = self.encode(text)
        if not drop:
            return body
        drop = set(drop)
        arts = {self.encoder[a] for a in self.ARTICLES if a in self.encoder}
        kept = [i for i in body if i not in drop]
        if len(kept) == len(body):  # no image-only word: passed on untouched
            return body
        body = kept
        while body and body[-1] in arts:
            body.pop()
        return body

    def pad77(self, text, length=77, drop=()):
        """[BOS] body [EOS] padded with EOS to length, and the attention mask (1 up to the first EOS).
        drop: token ids left out (shape_body)."""
        body = self.shape_body(text, drop)[: length - 2]
        seq = [self.bos_id] + body + [self.eos_id]
        mask = [1] * len(seq) + [0] * (length - len(seq))
        seq += [self.eos_id] * (length - len(seq))
        return seq, mask

    def batch(self, texts, length=77, drop=()):
        ids, masks = zip(*[self.pad77(t, length, drop) for t in texts])
        return torch.tensor(ids, dtype=torch.long), torch.tensor(masks, dtype=torch.long)


# ---- data --------------------------------------------------------------------------------------------

def load_split(folder):
    """Concatenates the shards of a dataset folder (tools/shapes/dataset.py output, manifest.json)."""
    man_path = os.path.join(folder, "manifest.json")
    if not os.path.exists(man_path):
        raise FileNotFoundError(f"{man_path}: no dataset manifest (generate the dataset first)")
    with open(man_path) as f:
        man = json.load(f)
    parts = [np.load(os.path.join(folder, s)) for s in man["shards"]]
    out = {}
    for key in ("surface_points", "surface_normals", "occ_points", "occ_labels", "extents",
                "captions", "families", "family_ids", "indices"):
        out[key] = np.concatenate([p[key] for p in parts])
    out["family_names"] = [str(s) for s in parts[0]["family_names"]]
    out["manifest"] = man
    return out


# ---- schedules, checkpoints, logging ------------------------------------------------------------------

def cosine_lr(step, total, peak, warmup, floor_frac=0.02):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_frac + (1 - floor_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.dim() >= 2 and "codebook" not in name and "query" not in name and \
                "positional" not in name and "embedder" not in name and "embedding" not in name:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def _compact_optimizer_state(opt_sd):
    """Adam moments stored as bf16 (halves the resume checkpoint; restored as fp32)."""
    out = {"param_groups": opt_sd["param_groups"], "state": {}}
    for k, st in opt_sd["state"].items():
        out["state"][k] = {n: (v.to(torch.bfloat16) if torch.is_tensor(v) and v.dim() > 0 else v)
                           for n, v in st.items()}
    return out


def _expand_optimizer_state(opt_sd):
    for st in opt_sd["state"].values():
        for n, v in list(st.items()):
            if torch.is_tensor(v) and v.dtype == torch.bfloat16:
                st[n] = v.float()
    return opt_sd


def save_checkpoint(path, model, opt, step, gen, extra):
    state = {"model": model.state_dict(), "opt": _compact_optimizer_state(opt.state_dict()),
             "step": step, "gen": gen.get_state(), "torch_rng": torch.get_rng_state(),
             "extra": extra}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def finalize_checkpoint(run_dir, stage):
    """Once a stage is done its optimizer state is dropped from `<stage>_ckpt.pt` (keeps the run folder
    small on disk). Extending the run later restarts Adam's moments from zero."""
    path = os.path.join(run_dir, f"{stage}_ckpt.pt")
    if not os.path.exists(os.path.join(run_dir, f"{stage}_done.json")) or not os.path.exists(path):
        return
    state = torch.load(path, map_location="cpu")
    if state.get("opt") is None:
        return
    state["opt"] = None
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, model, opt, gen, state=None):
    """Restores model / optimizer / RNGs from `path`, or from its already loaded `state`."""
    state = torch.load(path, map_location="cpu") if state is None else state
    model.load_state_dict(state["model"])
    if opt is not None and state.get("opt") is not None:
        opt.load_state_dict(_expand_optimizer_state(state["opt"]))
    gen.set_state(state["gen"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["extra"]


def acquire_lock(path, logger=None):
    """Blocking exclusive lock (held until the process exits): a second instance of a stage waits for
    the first one and then finds its results (or resumes its checkpoint) instead of racing it."""
    import fcntl
    f = open(path, "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        if logger:
            logger.log(f"{path} is held by another run of this stage; waiting for it")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


class Logger:
    """Lines to stdout (redirected to the stage's .log) and metrics as JSON lines."""

    def __init__(self, jsonl_path):
        self.jsonl_path = jsonl_path
        self.t0 = time.time()

    def log(self, msg):
        print(time.strftime("%Y-%m-%d %H:%M:%S ") + msg, flush=True)

    def metrics(self, **kv):
        kv["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(self.jsonl_path, "a") as f:
            f.write(json.dumps(kv, sort_keys=True) + "\n")


# ---- evaluation helpers --------------------------------------------------------------------------------

def grid_points(res, bound=BOUND):
    t = torch.linspace(-bound, bound, res)
    return torch.stack(torch.meshgrid(t, t, t, indexing="ij"), -1).reshape(-1, 3)


@torch.no_grad()
def occupancy_grid_from_latents(model, latents, res, chunk=65536):
    """latents (1,L,W) -> bool grid [res,res,res] (logit > 0), 'ij' order over [-1.05,1.05]^3."""
    pts = grid_points(res)
    out = []
    for i in range(0, pts.shape[0], chunk):
        out.append(model.occupancy_decoder(pts[i:i + chunk][None], latents)[0] > 0)
    return torch.cat(out).view(res, res, res).numpy()


def sdf_grid(shape_sdf, res):
    pts = grid_points(res).double().numpy()
    return (shape_sdf(pts) < 0).reshape(res, res, res)


def iou(a, b):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    u = np.count_nonzero(a | b)
    return 1.0 if u == 0 else np.count_nonzero(a & b) / u


def set_threads(n):
    # Flushing subnormals matters: small-init weights and softmax tails produce them, and subnormal
    # arithmetic made whole training steps ~6x slower on this CPU.
    torch.set_flush_denormal(True)
    torch.set_num_threads(max(1, int(n)))
    # A second call in one process (tests run several stages in one interpreter) must not set the
    # interop threads again: torch 1.13 then aborts the process instead of raising.
    global _INTEROP_SET
    if not _INTEROP_SET:
        _INTEROP_SET = True
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass


_INTEROP_SET = False


# ---- fast attention for training on CPU ---------------------------------------------------------------
# torch 1.13's CPU bmm falls back to a naive kernel for the transposed/strided operands that attention
# produces (measured here: ~0.3 GFLOP/s, 40x slower than BLAS), and so does mm with a transposed view.
# This autograd function runs attention as per-(batch, head) 2-D matmuls on contiguous tensors
# (transposes are materialised once per call) and is
# patched into the tessera_ref modules for training. Same math as tessera_ref.cube_gpt.attend.

class _LoopAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        n = q.shape[0]
        kt = k.transpose(1, 2).contiguous()
        s = torch.stack([torch.mm(q[i], kt[i]) for i in range(n)]) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.stack([torch.mm(p[i], v[i]) for i in range(n)])
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, go):
        q, k, v, p = ctx.saved_tensors
        go = go.contiguous()
        n = q.shape[0]
        vt = v.transpose(1, 2).contiguous()
        pt = p.transpose(1, 2).contiguous()
        gp = torch.stack([torch.mm(go[i], vt[i]) for i in range(n)])
        gv = torch.stack([torch.mm(pt[i], go[i]) for i in range(n)])
        gs = p * (gp - (gp * p).sum(-1, keepdim=True)) * ctx.scale
        gst = gs.transpose(1, 2).contiguous()
        gq = torch.stack([torch.mm(gs[i], k[i]) for i in range(n)])
        gk = torch.stack([torch.mm(gst[i], q[i]) for i in range(n)])
        return gq, gk, gv, None, None


def fast_attend(q, k, v, mask=None):
    """Drop-in for tessera_ref attend: q (B,H,Lq,d), k/v (B,H,Lk,d), mask bool broadcastable to
    (B,H,Lq,Lk), True = may attend."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    if mask is not None:
        mask = mask.expand(b, h, lq, lk).reshape(b * h, lq, lk)
    o = _LoopAttention.apply(q.reshape(b * h, lq, d).contiguous(), k.reshape(b * h, lk, d).contiguous(),
                             v.reshape(b * h, lk, d).contiguous(), mask, 1.0 / math.sqrt(d))
    return o.view(b, h, lq, d)


def install_fast_attention():
    import tessera_ref.clip_text as _ct
    import tessera_ref.cube_gpt as _cg
    import tessera_ref.shape_tokenizer as _st
    for mod in (_ct, _cg, _st):
        mod.attend = fast_attend


install_fast_attention()
