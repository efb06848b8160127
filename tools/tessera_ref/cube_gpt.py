"""Reference Cube 3D GPT ("DualStreamRoformer") in plain fp32 PyTorch: the oracle for the C++ engine.

Module names reproduce the checkpoint keys exactly (transformer.dual_blocks.N.attn.pre_x.c_qk.weight,
...). Semantics (docs/cube3d.md):
- dual-stream blocks: non-affine LayerNorms (eps 1e-6), per-stream c_qk (no bias) / c_v, per-head RMSNorm
  on q and k (eps 1e-5, learned scale), interleaved-pair RoPE (theta 10000) with condition positions 0 and
  shape positions 0..L-1, ONE causal attention over [cond ; shape], per-stream c_proj + SwiGLU MLP;
- the last dual block is "condition pre only": the condition gives keys/values (c_k with bias, k_norm, c_v)
  and no queries; the condition stream ends there;
- single-stream blocks: causal self-attention over shape tokens, then ln_f and lm_head.
- wte rows 0..codebook_size-1 are replaced by shape_proj(normalized codebook) at load
  (`install_codebook`).

The KV-cache path is the correct one (every decode step attends causally to the whole cache); the
reference implementation's single-block defect (decode attends only to the BOS slot) is NOT reproduced.
"""

import math
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GptConfig


# ---- shared building blocks (also used by shape_tokenizer.py) -------------------------------------

class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim, in fp32."""

    def __init__(self, dim, eps=1e-5, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x):
        x = x.float()
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


def layer_norm(x, eps):
    """LayerNorm without affine parameters over the last dim."""
    return F.layer_norm(x.float(), (x.shape[-1],), eps=eps)


def attend(q, k, v, mask=None):
    """Scaled dot-product attention. q (B,H,Lq,d), k/v (B,H,Lk,d), mask bool (Lq,Lk) True = may attend."""
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def split_heads(x, n_head):
    """(B, T, C) -> (B, H, T, C/H)."""
    b, t, c = x.shape
    return x.view(b, t, n_head, c // n_head).transpose(1, 2)


def merge_heads(x):
    """(B, H, T, d) -> (B, T, H*d)."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def rope(x, pos, theta):
    """Interleaved-pair rotary embedding (GPT-J / LLaMA-Meta style): dims (2i, 2i+1) rotate by
    pos * theta^(-2i/d). x (B,H,T,d), pos (T,) integer positions. Computed in fp32."""
    d = x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos.to(torch.float32)[:, None] * freqs[None, :]
    cos, sin = ang.cos(), ang.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


class SwiGLU(nn.Module):
    def __init__(self, d, hidden, device=None):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, device=device)
        self.up_proj = nn.Linear(d, hidden, device=device)
        self.down_proj = nn.Linear(hidden, d, device=device)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# ---- GPT modules ------------------------------------------------------------------------------------

class PreAttention(nn.Module):
    """Per-stream q/k/v projection. query=False: keys/values only (c_k with bias, no q_norm)."""

    def __init__(self, cfg: GptConfig, query=True, device=None):
        super().__init__()
        d = cfg.n_embd
        self.query = query
        self.n_head = cfg.n_head
        if query:
            self.c_qk = nn.Linear(d, 2 * d, bias=False, device=device)
            self.q_norm = RMSNorm(cfg.head_dim, cfg.qk_norm_eps, device=device)
        else:
            self.c_k = nn.Linear(d, d, device=device)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.qk_norm_eps, device=device)
        self.c_v = nn.Linear(d, d, device=device)

    def forward(self, x):
        if self.query:
            q, k = self.c_qk(x).chunk(2, dim=-1)
            q = self.q_norm(split_heads(q, self.n_head))
        else:
            q, k = None, self.c_k(x)
        k = self.k_norm(split_heads(k, self.n_head))
        v = split_heads(self.c_v(x), self.n_head)
        return q, k, v


class PostAttention(nn.Module):
    def __init__(self, cfg: GptConfig, device=None):
        super().__init__()
        self.eps = cfg.eps
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, device=device)
        self.mlp = SwiGLU(cfg.n_embd, cfg.mlp_hidden, device=device)

    def forward(self, x, a):
        x = x + self.c_proj(a)
        return x + self.mlp(layer_norm(x, self.eps))


class DualAttention(nn.Module):
    def __init__(self, cfg: GptConfig, cond_pre_only, device=None):
        super().__init__()
        self.pre_x = PreAttention(cfg, query=True, device=device)
        self.pre_c = PreAttention(cfg, query=not cond_pre_only, device=device)


class LayerCache:
    """Post-RoPE keys and values of one block, (B, H, T, d), grown by concatenation."""

    def __init__(self):
        self.k = None
        self.v = None

    def set(self, k, v):
        self.k, self.v = k, v

    def append(self, k, v):
        self.k = torch.cat([self.k, k], dim=2)
        self.v = torch.cat([self.v, v], dim=2)


class DualBlock(nn.Module):
    def __init__(self, cfg: GptConfig, cond_pre_only, device=None):
        super().__init__()
        self.cfg = cfg
        self.cond_pre_only = cond_pre_only
        self.attn = DualAttention(cfg, cond_pre_only, device=device)
        self.post_1 = PostAttention(cfg, device=device)
        if not cond_pre_only:
            self.post_2 = PostAttention(cfg, device=device)

    def forward(self, x, c, pos_x, cache: Optional[LayerCache] = None):
        """Full (or prefill) pass. x (B,L,D) shape stream, c (B,S,D) condition, pos_x (L,) positions.
        Returns (x, c) with c None after a condition-pre-only block. Stores K/V in cache if given."""
        eps, theta = self.cfg.eps, self.cfg.rope_theta
        s, l = c.shape[1], x.shape[1]
        qx, kx, vx = self.attn.pre_x(layer_norm(x, eps))
        qc, kc, vc = self.attn.pre_c(layer_norm(c, eps))
        pos_c = torch.zeros(s, dtype=torch.long)
        qx, kx = rope(qx, pos_x, theta), rope(kx, pos_x, theta)
        kc = rope(kc, pos_c, theta)
        k = torch.cat([kc, kx], dim=2)
        v = torch.cat([vc, vx], dim=2)
        full_mask = torch.ones(s + l, s + l, dtype=torch.bool).tril()
        if cache is not None:
            cache.set(k, v)
        if self.cond_pre_only:
            y_x = attend(qx, k, v, full_mask[s:])
            return self.post_1(x, merge_heads(y_x)), None
        qc = rope(qc, pos_c, theta)
        y = merge_heads(attend(torch.cat([qc, qx], dim=2), k, v, full_mask))
        y_c, y_x = y[:, :s], y[:, s:]
        return self.post_1(x, y_x), self.post_2(c, y_c)

    def decode(self, x, pos_x, cache: LayerCache):
        """Cached step: x (B,n,D) new shape tokens at positions pos_x (n,), appended after the cache."""
        qx, kx, vx = self.attn.pre_x(layer_norm(x, self.cfg.eps))
        qx, kx = rope(qx, pos_x, self.cfg.rope_theta), rope(kx, pos_x, self.cfg.rope_theta)
        cache.append(kx, vx)
        n, total = x.shape[1], cache.k.shape[2]
        # new query j sits at joint index total-n+j and sees every key up to it (causal, full cache)
        mask = torch.ones(n, total, dtype=torch.bool).tril(diagonal=total - n)
        return self.post_1(x, merge_heads(attend(qx, cache.k, cache.v, mask)))


class SingleAttention(nn.Module):
    def __init__(self, cfg: GptConfig, device=None):
        super().__init__()
        d = cfg.n_embd
        self.n_head = cfg.n_head
        self.c_qk = nn.Linear(d, 2 * d, bias=False, device=device)
        self.c_v = nn.Linear(d, d, device=device)
        self.c_proj = nn.Linear(d, d, device=device)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.qk_norm_eps, device=device)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.qk_norm_eps, device=device)


class SingleBlock(nn.Module):
    def __init__(self, cfg: GptConfig, device=None):
        super().__init__()
        self.cfg = cfg
        self.attn = SingleAttention(cfg, device=device)
        self.mlp = SwiGLU(cfg.n_embd, cfg.mlp_hidden, device=device)

    def forward(self, x, pos_x, cache: Optional[LayerCache] = None, decode=False):
        a = self.attn
        q, k = a.c_qk(layer_norm(x, self.cfg.eps)).chunk(2, dim=-1)
        v = split_heads(a.c_v(layer_norm(x, self.cfg.eps)), a.n_head)
        q = rope(a.q_norm(split_heads(q, a.n_head)), pos_x, self.cfg.rope_theta)
        k = rope(a.k_norm(split_heads(k, a.n_head)), pos_x, self.cfg.rope_theta)
        if cache is not None:
            if decode:
                cache.append(k, v)
            else:
                cache.set(k, v)
            k, v = cache.k, cache.v
        n, total = q.shape[2], k.shape[2]
        mask = torch.ones(n, total, dtype=torch.bool).tril(diagonal=total - n)
        x = x + a.c_proj(merge_heads(attend(q, k, v, mask)))
        return x + self.mlp(layer_norm(x, self.cfg.eps))


class CubeGPT(nn.Module):
    def __init__(self, cfg: GptConfig, device=None):
        super().__init__()
        self.cfg = cfg
        d = cfg.n_embd
        self.text_proj = nn.Linear(cfg.text_embed_dim, d, device=device)
        self.shape_proj = nn.Linear(cfg.shape_embed_dim, d, device=device)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, d, device=device),
            dual_blocks=nn.ModuleList([DualBlock(cfg, i == cfg.n_layer - 1, device=device)
                                       for i in range(cfg.n_layer)]),
            single_blocks=nn.ModuleList([SingleBlock(cfg, device=device)
                                         for _ in range(cfg.n_single_layer)]),
        ))
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False, device=device)
        if cfg.use_bbox:
            self.bbox_proj = nn.Linear(3, d, device=device)

    # -- conditioning and embeddings --
    @torch.no_grad()
    def install_codebook(self, codebook_normalized):
        """Load-time step of the reference: wte[0:K] = shape_proj(normalized codebook [K, embed_dim])."""
        k = codebook_normalized.shape[0]
        if k != self.cfg.codebook_size:
            raise ValueError(f"codebook has {k} rows, GPT expects {self.cfg.codebook_size}")
        self.transformer.wte.weight[:k] = self.shape_proj(codebook_normalized.float())

    def encode_condition(self, clip_hidden, bbox=None):
        """clip_hidden (B,77,text_dim) last hidden state -> (B,S,D); v0.5 appends bbox_proj(bbox or 0)."""
        c = self.text_proj(clip_hidden.float())
        if self.cfg.use_bbox:
            if bbox is None:
                bbox = torch.zeros(c.shape[0], 3)
            c = torch.cat([c, self.bbox_proj(bbox.float()).unsqueeze(1)], dim=1)
        return c

    def embed(self, ids):
        return self.transformer.wte(ids)

    def _head(self, x):
        return self.lm_head(layer_norm(x, self.cfg.eps))

    # -- uncached full recompute --
    def forward(self, ids, cond, trace: Optional[dict] = None):
        """ids (B,L) with ids[:,0] = BOS, cond (B,S,D) -> logits (B,L,V). trace collects per-block
        outputs ('dual.i.x', 'dual.i.c', 'single.i.x', 'ln_f') when given."""
        x, c = self.embed(ids), cond.float()
        pos = torch.arange(ids.shape[1])
        for i, blk in enumerate(self.transformer.dual_blocks):
            x, c = blk(x, c, pos)
            if trace is not None:
                trace[f"dual.{i}.x"] = x
                if c is not None:
                    trace[f"dual.{i}.c"] = c
        for i, blk in enumerate(self.transformer.single_blocks):
            x = blk(x, pos)
            if trace is not None:
                trace[f"single.{i}.x"] = x
        if trace is not None:
            trace["ln_f"] = layer_norm(x, self.cfg.eps)
        return self._head(x)

    # -- KV cache path --
    def new_cache(self) -> List[LayerCache]:
        return [LayerCache() for _ in range(self.cfg.n_layer + self.cfg.n_single_layer)]

    def prefill(self, ids, cond, cache):
        """Runs the condition stream and the first tokens (normally just BOS) once, filling cache.
        Returns logits (B,L,V) of those tokens."""
        x, c = self.embed(ids), cond.float()
        pos = torch.arange(ids.shape[1])
        nd = self.cfg.n_layer
        for i, blk in enumerate(self.transformer.dual_blocks):
            x, c = blk(x, c, pos, cache[i])
        for i, blk in enumerate(self.transformer.single_blocks):
            x = blk(x, pos, cache[nd + i])
        return self._head(x)

    def decode_step(self, ids, start_pos, cache):
        """ids (B,n) new tokens at shape positions start_pos.. -> logits (B,n,V); appends to cache."""
        x = self.embed(ids)
        pos = torch.arange(start_pos, start_pos + ids.shape[1])
        nd = self.cfg.n_layer
        for i, blk in enumerate(self.transformer.dual_blocks):
            x = blk.decode(x, pos, cache[i])
        for i, blk in enumerate(self.transformer.single_blocks):
            x = blk(x, pos, cache[nd + i], decode=True)
        return self._head(x)

    # -- generation --
    @torch.no_grad()
    def generate(self, cond, uncond=None, num_steps=None, guidance_scale=3.0, use_cache=True,
                 top_p=None, generator=None, logits_out: Optional[list] = None):
        """Generates num_steps shape codes per batch row.

        cond (B,S,D) condition embeddings; uncond (B,S,D) the empty-prompt condition, used when
        guidance_scale > 0 with l = (1+g) l_cond - g l_uncond, g = scale * (N - i) / N.
        Logits are restricted to codes [0, codebook_size). Greedy (argmax) unless top_p is given
        (nucleus sampling with torch.multinomial on `generator`). logits_out collects the final
        (guided, restricted) logits of every step. Returns (B, num_steps) int64 ids.
        """
        n = num_steps or self.cfg.num_latents
        guided = guidance_scale > 0.0
        if guided:
            if uncond is None:
                raise ValueError("guidance_scale > 0 needs the unconditional condition")
            c_all = torch.cat([cond, uncond], dim=0)
        else:
            c_all = cond
        b = c_all.shape[0]
        ids = torch.full((b, 1), self.cfg.bos_id, dtype=torch.long)
        cache = self.new_cache() if use_cache else None
        out = []
        for i in range(n):
            if use_cache:
                logits = (self.prefill(ids, c_all, cache) if i == 0
                          else self.decode_step(ids[:, -1:], i, cache))[:, -1]
            else:
                logits = self.forward(ids, c_all)[:, -1]
            logits = logits[:, :self.cfg.codebook_size].float()
            if guided:
                lc, lu = logits.chunk(2, dim=0)
                g = guidance_scale * (n - i) / n
                logits = (1 + g) * lc - g * lu
            if logits_out is not None:
                logits_out.append(logits.clone())
            nxt = sample(logits, top_p, generator)
            out.append(nxt)
            step_ids = torch.cat([nxt, nxt], dim=0) if guided else nxt
            ids = torch.cat([ids, step_ids], dim=1)
        return torch.cat(out, dim=1)


def sample(logits, top_p=None, generator=None):
    """Argmax when top_p is None, else nucleus sampling with the reference's filter: in descending
    order, a token is dropped when the cumulative probability up to and including it exceeds top_p;
    the top token always stays. (The reference hard-codes top_p = 0.9 in process_logits; here the
    argument is honoured.) Returns (B,1) int64."""
    if top_p is None:
        return torch.argmax(logits, dim=-1, keepdim=True)
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    remove = sorted_logits.softmax(dim=-1).cumsum(dim=-1) > top_p
    remove[..., 0] = False
    mask = remove.scatter(-1, idx, remove)
    probs = torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
