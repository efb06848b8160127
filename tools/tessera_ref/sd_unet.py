"""Reference Stable Diffusion 1.x UNet (CompVis `openaimodel.UNetModel` layout) in plain fp32 PyTorch.

state_dict keys equal those of a CompVis single-file checkpoint minus the `model.diffusion_model.`
prefix (UNET_PREFIX): `time_embed.{0,2}`, `input_blocks.N.{0,1}...`, `middle_block.{0,1,2}`,
`output_blocks.N.{0,1,2}...`, `out.{0,2}`. The oracle for engine/diffusion/unet.cpp.

Structure (SD 1.x): conv_in; per level `num_res_blocks` ResBlocks (+ a SpatialTransformer when the
level has attention), a stride-2 conv downsample after every level but the last; middle ResBlock,
SpatialTransformer, ResBlock; per level in reverse `num_res_blocks + 1` ResBlocks over the
concatenation [h, skip] (+ transformer), nearest x2 + conv upsample after every level but level 0;
GroupNorm, SiLU, conv_out. GroupNorm has `groups` groups, eps 1e-5, except around transformers (1e-6).
Timestep embedding: sinusoidal of width model_channels, cos first, max period 10000, then
Linear(C0 -> 4 C0), SiLU, Linear(4 C0 -> 4 C0).
"""

import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

UNET_PREFIX = "model.diffusion_model."


@dataclass
class UNetConfig:
    in_channels: int = 4
    out_channels: int = 4
    model_channels: int = 320
    channel_mult: List[int] = field(default_factory=lambda: [1, 2, 4, 4])
    num_res_blocks: int = 2
    attention_levels: List[int] = field(default_factory=lambda: [0, 1, 2])
    num_heads: int = 8
    context_dim: int = 768
    groups: int = 32


SD15_UNET = UNetConfig()


def timestep_embedding(t, dim, max_period=10000.0):
    """[B] timesteps -> [B, dim]: cat(cos(t f), sin(t f)), f_i = max_period^(-i / (dim/2))."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, emb_dim, groups, device=None):
        super().__init__()
        self.in_layers = nn.Sequential(nn.GroupNorm(groups, cin, eps=1e-5, device=device), nn.SiLU(),
                                       nn.Conv2d(cin, cout, 3, padding=1, device=device))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_dim, cout, device=device))
        self.out_layers = nn.Sequential(nn.GroupNorm(groups, cout, eps=1e-5, device=device), nn.SiLU(),
                                        nn.Dropout(0.0), nn.Conv2d(cout, cout, 3, padding=1, device=device))
        self.skip_connection = (nn.Identity() if cin == cout
                                else nn.Conv2d(cin, cout, 1, device=device))

    def forward(self, x, emb):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb)[:, :, None, None]
        return self.skip_connection(x) + self.out_layers(h)


class CrossAttention(nn.Module):
    def __init__(self, dim, ctx_dim, heads, device=None):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim, bias=False, device=device)
        self.to_k = nn.Linear(ctx_dim, dim, bias=False, device=device)
        self.to_v = nn.Linear(ctx_dim, dim, bias=False, device=device)
        self.to_out = nn.Sequential(nn.Linear(dim, dim, device=device), nn.Dropout(0.0))

    def forward(self, x, ctx=None):
        ctx = x if ctx is None else ctx
        b, n, c = x.shape
        h = self.heads
        q = self.to_q(x).view(b, n, h, c // h).transpose(1, 2)
        k = self.to_k(ctx).view(b, ctx.shape[1], h, c // h).transpose(1, 2)
        v = self.to_v(ctx).view(b, ctx.shape[1], h, c // h).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-1, -2) * (c // h) ** -0.5, dim=-1)
        return self.to_out((w @ v).transpose(1, 2).reshape(b, n, c))


class GEGLU(nn.Module):
    def __init__(self, dim, inner, device=None):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * inner, device=device)

    def forward(self, x):
        value, gate = self.proj(x).chunk(2, dim=-1)
        return value * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim, device=None):
        super().__init__()
        self.net = nn.Sequential(GEGLU(dim, 4 * dim, device=device), nn.Dropout(0.0),
                                 nn.Linear(4 * dim, dim, device=device))

    def forward(self, x):
        return self.net(x)


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, ctx_dim, heads, device=None):
        super().__init__()
        self.attn1 = CrossAttention(dim, dim, heads, device=device)
        self.ff = FeedForward(dim, device=device)
        self.attn2 = CrossAttention(dim, ctx_dim, heads, device=device)
        self.norm1 = nn.LayerNorm(dim, device=device)
        self.norm2 = nn.LayerNorm(dim, device=device)
        self.norm3 = nn.LayerNorm(dim, device=device)

    def forward(self, x, ctx):
        x = self.attn1(self.norm1(x)) + x
        x = self.attn2(self.norm2(x), ctx) + x
        return self.ff(self.norm3(x)) + x


class SpatialTransformer(nn.Module):
    def __init__(self, ch, ctx_dim, heads, groups, device=None):
        super().__init__()
        self.norm = nn.GroupNorm(groups, ch, eps=1e-6, device=device)
        self.proj_in = nn.Conv2d(ch, ch, 1, device=device)
        self.transformer_blocks = nn.ModuleList([BasicTransformerBlock(ch, ctx_dim, heads, device=device)])
        self.proj_out = nn.Conv2d(ch, ch, 1, device=device)

    def forward(self, x, ctx):
        b, c, hh, ww = x.shape
        h = self.proj_in(self.norm(x)).flatten(2).transpose(1, 2)
        for blk in self.transformer_blocks:
            h = blk(h, ctx)
        h = h.transpose(1, 2).reshape(b, c, hh, ww)
        return x + self.proj_out(h)


class Downsample(nn.Module):
    def __init__(self, ch, device=None):
        super().__init__()
        self.op = nn.Conv2d(ch, ch, 3, stride=2, padding=1, device=device)

    def forward(self, x, *_):
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, ch, device=None):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1, device=device)

    def forward(self, x, *_):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Conv(nn.Conv2d):
    def forward(self, x, *_):
        return super().forward(x)


class Seq(nn.ModuleList):
    """TimestepEmbedSequential: passes emb to ResBlocks and the context to transformers."""

    def forward(self, x, emb, ctx):
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb)
            elif isinstance(layer, SpatialTransformer):
                x = layer(x, ctx)
            else:
                x = layer(x)
        return x


class UNet(nn.Module):
    def __init__(self, cfg: UNetConfig, device=None):
        super().__init__()
        self.cfg = cfg
        c0 = cfg.model_channels
        emb = 4 * c0
        g = cfg.groups
        self.time_embed = nn.Sequential(nn.Linear(c0, emb, device=device), nn.SiLU(),
                                        nn.Linear(emb, emb, device=device))
        self.input_blocks = nn.ModuleList([Seq([Conv(cfg.in_channels, c0, 3, padding=1, device=device)])])
        chans = [c0]
        ch = c0
        levels = len(cfg.channel_mult)
        for level, mult in enumerate(cfg.channel_mult):
            for _ in range(cfg.num_res_blocks):
                layers = [ResBlock(ch, mult * c0, emb, g, device=device)]
                ch = mult * c0
                if level in cfg.attention_levels:
                    layers.append(SpatialTransformer(ch, cfg.context_dim, cfg.num_heads, g, device=device))
                self.input_blocks.append(Seq(layers))
                chans.append(ch)
            if level != levels - 1:
                self.input_blocks.append(Seq([Downsample(ch, device=device)]))
                chans.append(ch)
        self.middle_block = Seq([ResBlock(ch, ch, emb, g, device=device),
                                 SpatialTransformer(ch, cfg.context_dim, cfg.num_heads, g, device=device),
                                 ResBlock(ch, ch, emb, g, device=device)])
        self.output_blocks = nn.ModuleList()
        for level, mult in reversed(list(enumerate(cfg.channel_mult))):
            for i in range(cfg.num_res_blocks + 1):
                layers = [ResBlock(ch + chans.pop(), mult * c0, emb, g, device=device)]
                ch = mult * c0
                if level in cfg.attention_levels:
                    layers.append(SpatialTransformer(ch, cfg.context_dim, cfg.num_heads, g, device=device))
                if level != 0 and i == cfg.num_res_blocks:
                    layers.append(Upsample(ch, device=device))
                self.output_blocks.append(Seq(layers))
        self.out = nn.Sequential(nn.GroupNorm(g, ch, eps=1e-5, device=device), nn.SiLU(),
                                 nn.Conv2d(ch, cfg.out_channels, 3, padding=1, device=device))

    def forward(self, x, t, ctx, taps=None):
        """x [B, in, H, W], t [B] (float timesteps), ctx [B, L, context_dim] -> eps [B, out, H, W].
        taps: optional dict that receives named intermediate activations (NCHW)."""
        emb = self.time_embed(timestep_embedding(t, self.cfg.model_channels))
        hs = []
        h = x
        for n, blk in enumerate(self.input_blocks):
            h = blk(h, emb, ctx)
            hs.append(h)
            if taps is not None:
                taps[f"input_blocks.{n}"] = h
        h = self.middle_block(h, emb, ctx)
        if taps is not None:
            taps["time_embed"] = emb
            taps["middle_block"] = h
        for n, blk in enumerate(self.output_blocks):
            h = blk(torch.cat([h, hs.pop()], dim=1), emb, ctx)
            if taps is not None:
                taps[f"output_blocks.{n}"] = h
        return self.out(h)
