"""Reference Cube 3D shape tokenizer ("OneDAutoEncoder") in plain fp32 PyTorch.

Parts and checkpoint keys (docs/cube3d.md):
- `embedder` (PhaseModulatedFourierEmbedder): learned weight [3, F] shared by reference with
  `encoder.embedder` and `occupancy_decoder.embedder` (three state-dict keys, one tensor), and a fixed
  carrier that is not stored: carrier_j = ((F/8) ** linspace(1,0,F)_j + linspace(0,1,F)_j) * 2 pi.
  Output [p, cos(fm)+cos(pm), sin(fm)+sin(pm)] with fm = p_d W[d,j], pm = p_d pi/2 + carrier_j:
  3 * (2F + 1) dims.
- `encoder`: point cloud + normals -> Fourier(points) ++ normals -> feat_in (MLP with SiLU) -> learned
  queries `encoder.query` ([1 + num_latents, W]: row 0 is a ViT-style class token that the bottleneck
  drops) -> cross-attention layers (c_q/c_k/c_v, at `encoder_cross_levels`) and self-attention layers
  (c_qk with bias, q/k RMSNorm) -> affine ln_f.
- `bottleneck.block` (spherical VQ): z = RMSNorm(c_in(h)) (eps 1e-5, times norm.weight); codes are the
  nearest rows (Euclidean, as the reference's cdist; equal to max dot product when all norms are equal)
  of codebook_normalized = RMSNorm(codebook * cb_weight + cb_bias) * norm.weight. `c_x` is unused.
- `decoder`: c_out(codebook_normalized[ids]) + positional_encodings -> bidirectional self-attention
  layers (pre-LN non-affine eps 1e-6, q/k RMSNorm, exact GELU MLP), no final norm -> latents.
- `occupancy_decoder`: Fourier(points) -> query_in (MLP with SiLU) -> one cross-attention layer over the
  latents -> affine ln_f -> c_head: one occupancy logit per point (surface at 0).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ShapeConfig
from .cube_gpt import RMSNorm, attend, layer_norm, merge_heads, split_heads


def fourier_carrier(num_freqs):
    c = (num_freqs / 8) ** torch.linspace(1, 0, num_freqs)
    return (c + torch.linspace(0, 1, num_freqs)) * 2 * math.pi


class FourierEmbedder(nn.Module):
    def __init__(self, num_freqs, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(3, num_freqs, device=device))
        self.register_buffer("carrier", fourier_carrier(num_freqs).to(device or "cpu"),
                             persistent=False)
        self.out_dim = 3 * (2 * num_freqs + 1)

    def forward(self, p):
        p = p.float()
        m = p.unsqueeze(-1)                                   # (..., 3, 1)
        fm = (m * self.weight).flatten(-2)                    # (..., 3F): index d*F + j
        pm = (m * 0.5 * math.pi + self.carrier).flatten(-2)
        return torch.cat([p, fm.cos() + pm.cos(), fm.sin() + pm.sin()], dim=-1)


class MLPEmbedder(nn.Module):
    def __init__(self, d_in, d, device=None):
        super().__init__()
        self.in_layer = nn.Linear(d_in, d, device=device)
        self.out_layer = nn.Linear(d, d, device=device)

    def forward(self, x):
        return self.out_layer(F.silu(self.in_layer(x)))


class GeluMLP(nn.Module):
    def __init__(self, d, hidden, device=None):
        super().__init__()
        self.up_proj = nn.Linear(d, hidden, device=device)
        self.down_proj = nn.Linear(hidden, d, device=device)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x)))  # exact (erf) GELU


class SelfAttention(nn.Module):
    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        w = cfg.width
        self.n_head = cfg.n_head
        self.c_qk = nn.Linear(w, 2 * w, device=device)
        self.c_v = nn.Linear(w, w, device=device)
        self.c_proj = nn.Linear(w, w, device=device)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.qk_norm_eps, device=device)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.qk_norm_eps, device=device)

    def forward(self, x):
        q, k = self.c_qk(x).chunk(2, dim=-1)
        q = self.q_norm(split_heads(q, self.n_head))
        k = self.k_norm(split_heads(k, self.n_head))
        v = split_heads(self.c_v(x), self.n_head)
        return self.c_proj(merge_heads(attend(q, k, v)))


class CrossAttention(nn.Module):
    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        w = cfg.width
        self.n_head = cfg.n_head
        self.c_q = nn.Linear(w, w, device=device)
        self.c_k = nn.Linear(w, w, device=device)
        self.c_v = nn.Linear(w, w, device=device)
        self.c_proj = nn.Linear(w, w, device=device)

    def forward(self, x, c):
        q = split_heads(self.c_q(x), self.n_head)
        k = split_heads(self.c_k(c), self.n_head)
        v = split_heads(self.c_v(c), self.n_head)
        return self.c_proj(merge_heads(attend(q, k, v)))


class EncoderLayer(nn.Module):
    """x += attn(ln_1(x)); x += mlp(ln_2(x)); non-affine LNs, bidirectional."""

    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        self.eps = cfg.eps
        self.attn = SelfAttention(cfg, device=device)
        self.mlp = GeluMLP(cfg.width, cfg.mlp_hidden, device=device)

    def forward(self, x):
        x = x + self.attn(layer_norm(x, self.eps))
        return x + self.mlp(layer_norm(x, self.eps))


class CrossLayer(nn.Module):
    """x += attn(ln_1(x), ln_2(c)); x += mlp(ln_f(x)); non-affine LNs."""

    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        self.eps = cfg.eps
        self.attn = CrossAttention(cfg, device=device)
        self.mlp = GeluMLP(cfg.width, cfg.mlp_hidden, device=device)

    def forward(self, x, c):
        x = x + self.attn(layer_norm(x, self.eps), layer_norm(c, self.eps))
        return x + self.mlp(layer_norm(x, self.eps))


class Encoder(nn.Module):
    def __init__(self, cfg: ShapeConfig, embedder, device=None):
        super().__init__()
        self.cfg = cfg
        self.embedder = embedder
        rows = cfg.num_latents + (1 if cfg.with_cls_token else 0)
        self.query = nn.Parameter(torch.empty(rows, cfg.width, device=device))
        self.feat_in = MLPEmbedder(embedder.out_dim + cfg.point_feats, cfg.width, device=device)
        self.blocks = nn.ModuleList([
            CrossLayer(cfg, device=device) if i in cfg.encoder_cross_levels
            else EncoderLayer(cfg, device=device) for i in range(cfg.encoder_layers)])
        self.ln_f = nn.LayerNorm(cfg.width, eps=cfg.eps, device=device)

    def forward(self, points, feats):
        """points (B,N,3), feats (B,N,point_feats) -> (B, rows, W) after ln_f."""
        data = self.embedder(points)
        if self.cfg.point_feats:
            data = torch.cat([data, feats.float()], dim=-1)
        data = self.feat_in(data)
        h = self.query.unsqueeze(0).expand(points.shape[0], -1, -1)
        for blk in self.blocks:
            h = blk(h, data) if isinstance(blk, CrossLayer) else blk(h)
        return self.ln_f(h)


class SphericalVQ(nn.Module):
    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        e, w = cfg.embed_dim, cfg.width
        self.codebook = nn.Embedding(cfg.num_codes, e, device=device)
        self.c_in = nn.Linear(w, e, device=device)
        self.c_x = nn.Linear(w, e, device=device)  # stored, unused at inference
        self.c_out = nn.Linear(e, w, device=device)
        self.norm = RMSNorm(e, cfg.vq_norm_eps, device=device)
        self.cb_weight = nn.Parameter(torch.ones(e, device=device))
        self.cb_bias = nn.Parameter(torch.zeros(e, device=device))

    def normalized_codebook(self):
        return self.norm(self.codebook.weight.float() * self.cb_weight + self.cb_bias)

    def quantize(self, h):
        """h (B,L,W) encoder latents -> (indices (B,L) int64, z_e (B,L,E) normalized projections)."""
        z = self.norm(self.c_in(h))
        cb = self.normalized_codebook()
        d = torch.cdist(z.reshape(-1, z.shape[-1]), cb)
        return torch.argmin(d, dim=1).view(z.shape[:-1]), z


class Bottleneck(nn.Module):
    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        self.block = SphericalVQ(cfg, device=device)


class Decoder(nn.Module):
    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        self.positional_encodings = nn.Parameter(torch.empty(cfg.num_latents, cfg.width,
                                                             device=device))
        self.blocks = nn.ModuleList([EncoderLayer(cfg, device=device)
                                     for _ in range(cfg.decoder_layers)])

    def forward(self, z, trace=None):
        h = z + self.positional_encodings[: z.shape[1]].unsqueeze(0)
        if trace is not None:
            trace["decoder.input"] = h
        for i, blk in enumerate(self.blocks):
            h = blk(h)
            if trace is not None:
                trace[f"decoder.blocks.{i}"] = h
        return h


class OccupancyDecoder(nn.Module):
    def __init__(self, cfg: ShapeConfig, embedder, device=None):
        super().__init__()
        self.embedder = embedder
        self.query_in = MLPEmbedder(embedder.out_dim, cfg.width, device=device)
        self.attn_out = CrossLayer(cfg, device=device)
        self.ln_f = nn.LayerNorm(cfg.width, eps=cfg.eps, device=device)
        self.c_head = nn.Linear(cfg.width, 1, device=device)

    def forward(self, points, latents):
        x = self.query_in(self.embedder(points))
        x = self.attn_out(x, latents)
        return self.c_head(self.ln_f(x)).squeeze(-1)


class ShapeTokenizer(nn.Module):
    def __init__(self, cfg: ShapeConfig, device=None):
        super().__init__()
        self.cfg = cfg
        self.embedder = FourierEmbedder(cfg.num_freqs, device=device)
        self.encoder = Encoder(cfg, self.embedder, device=device)
        self.bottleneck = Bottleneck(cfg, device=device)
        self.decoder = Decoder(cfg, device=device)
        self.occupancy_decoder = OccupancyDecoder(cfg, self.embedder, device=device)

    def normalized_codebook(self):
        return self.bottleneck.block.normalized_codebook()

    @torch.no_grad()
    def encode(self, points, normals):
        """points/normals (B,N,3) -> (indices (B,L) int64, encoder output incl. class token)."""
        h = self.encoder(points, normals)
        lat = h[:, 1:] if self.cfg.with_cls_token else h
        ids, _ = self.bottleneck.block.quantize(lat)
        return ids, h

    @torch.no_grad()
    def decode_tokens(self, ids, trace=None):
        """ids (B,L) codes in [0, num_codes) -> latents (B,L,W)."""
        vq = self.bottleneck.block
        z = vq.c_out(F.embedding(ids, vq.normalized_codebook()))
        if trace is not None:
            trace["decoder.z"] = z
        return self.decoder(z, trace)

    @torch.no_grad()
    def occupancy(self, latents, points):
        """latents (B,L,W), points (B,P,3) in [-1.05, 1.05]^3 -> occupancy logits (B,P)."""
        return self.occupancy_decoder(points, latents)
