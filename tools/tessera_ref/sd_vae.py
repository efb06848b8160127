"""Reference Stable Diffusion 1.x VAE decoder (CompVis `first_stage_model` layout) in plain fp32 PyTorch.

state_dict keys equal those of a CompVis checkpoint minus the `first_stage_model.` prefix (VAE_PREFIX):
`post_quant_conv`, `decoder.conv_in`, `decoder.mid.{block_1,attn_1,block_2}`,
`decoder.up.L.block.J`, `decoder.up.L.upsample.conv` (L > 0), `decoder.norm_out`, `decoder.conv_out`.
Up levels are indexed by resolution level (up.0 is the full-resolution, narrowest level) and run from
the last to the first. GroupNorm `groups` groups, eps 1e-6 throughout; SiLU; the middle attention is a
single head over all channels with q/k/v/proj_out as 1x1 convolutions. decode(z) = decoder(
post_quant_conv(z / scale)), output nominally in [-1, 1] (not clamped). The oracle for
engine/diffusion/vae_decoder.cpp.
"""

from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

VAE_PREFIX = "first_stage_model."
SD_LATENT_SCALE = 0.18215


@dataclass
class VaeConfig:
    z_channels: int = 4
    out_channels: int = 3
    ch: int = 128
    ch_mult: List[int] = field(default_factory=lambda: [1, 2, 4, 4])
    num_res_blocks: int = 2  # the decoder runs num_res_blocks + 1 per level
    groups: int = 32


SD15_VAE = VaeConfig()


def norm(groups, c, device):
    return nn.GroupNorm(groups, c, eps=1e-6, device=device)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout, groups, device=None):
        super().__init__()
        self.norm1 = norm(groups, cin, device)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, device=device)
        self.norm2 = norm(groups, cout, device)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, device=device)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1, device=device)
        else:
            self.nin_shortcut = None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    def __init__(self, c, groups, device=None):
        super().__init__()
        self.norm = norm(groups, c, device)
        self.q = nn.Conv2d(c, c, 1, device=device)
        self.k = nn.Conv2d(c, c, 1, device=device)
        self.v = nn.Conv2d(c, c, 1, device=device)
        self.proj_out = nn.Conv2d(c, c, 1, device=device)

    def forward(self, x):
        b, c, hh, ww = x.shape
        h = self.norm(x)
        q = self.q(h).flatten(2).transpose(1, 2)  # [B, HW, C]
        k = self.k(h).flatten(2)                  # [B, C, HW]
        v = self.v(h).flatten(2).transpose(1, 2)
        w = torch.softmax(q @ k * c ** -0.5, dim=-1)
        o = (w @ v).transpose(1, 2).reshape(b, c, hh, ww)
        return x + self.proj_out(o)


class Upsample(nn.Module):
    def __init__(self, c, device=None):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, device=device)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Mid(nn.Module):
    def __init__(self, c, groups, device=None):
        super().__init__()
        self.block_1 = ResnetBlock(c, c, groups, device)
        self.attn_1 = AttnBlock(c, groups, device)
        self.block_2 = ResnetBlock(c, c, groups, device)


class Up(nn.Module):
    def __init__(self, blocks, upsample):
        super().__init__()
        self.block = nn.ModuleList(blocks)
        if upsample is not None:
            self.upsample = upsample


class Decoder(nn.Module):
    def __init__(self, cfg: VaeConfig, device=None):
        super().__init__()
        g = cfg.groups
        block_in = cfg.ch * cfg.ch_mult[-1]
        self.conv_in = nn.Conv2d(cfg.z_channels, block_in, 3, padding=1, device=device)
        self.mid = Mid(block_in, g, device)
        ups = [None] * len(cfg.ch_mult)
        for level in reversed(range(len(cfg.ch_mult))):
            block_out = cfg.ch * cfg.ch_mult[level]
            blocks = []
            for _ in range(cfg.num_res_blocks + 1):
                blocks.append(ResnetBlock(block_in, block_out, g, device))
                block_in = block_out
            ups[level] = Up(blocks, Upsample(block_in, device) if level != 0 else None)
        self.up = nn.ModuleList(ups)
        self.norm_out = norm(g, block_in, device)
        self.conv_out = nn.Conv2d(block_in, cfg.out_channels, 3, padding=1, device=device)

    def forward(self, z, taps=None):
        h = self.conv_in(z)
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        if taps is not None:
            taps["mid"] = h
        for level in reversed(range(len(self.up))):
            for blk in self.up[level].block:
                h = blk(h)
            if hasattr(self.up[level], "upsample"):
                h = self.up[level].upsample(h)
            if taps is not None:
                taps[f"up.{level}"] = h
        return self.conv_out(F.silu(self.norm_out(h)))


class VaeDecoder(nn.Module):
    """post_quant_conv + decoder: the part of the first stage that turns latents into images."""

    def __init__(self, cfg: VaeConfig, device=None):
        super().__init__()
        self.post_quant_conv = nn.Conv2d(cfg.z_channels, cfg.z_channels, 1, device=device)
        self.decoder = Decoder(cfg, device)

    def forward(self, z, scale=SD_LATENT_SCALE, taps=None):
        """z [B, 4, h, w] (scaled latents as the UNet sees them) -> image [B, 3, 8h', 8w'] (2^(levels-1))."""
        return self.decoder(self.post_quant_conv(z / scale), taps)


# ---- encoder (img2img, inpainting) -------------------------------------------------------------------------

@dataclass
class VaeEncoderConfig:
    """SD's encoder: conv_in 3 -> ch, level i runs num_res_blocks ResnetBlocks from ch * in_mult[i] to
    ch * ch_mult[i] (in_mult = (1,) + ch_mult) and, below the last level, a Downsample; then the middle
    block (ResnetBlock, single-head attention, ResnetBlock), GroupNorm + SiLU, conv_out to 2 * z channels
    (mean | log-variance) and the 1x1 quant_conv. SD 1.x: ch 128, ch_mult 1,2,4,4, 2 blocks per level."""
    in_channels: int = 3
    z_channels: int = 4
    ch: int = 128
    ch_mult: List[int] = field(default_factory=lambda: [1, 2, 4, 4])
    num_res_blocks: int = 2
    groups: int = 32


SD15_VAE_ENCODER = VaeEncoderConfig()


class Downsample(nn.Module):
    """torch pad (0, 1, 0, 1) (one zero column on the right, one zero row at the bottom), then a 3x3
    convolution with stride 2 and no padding."""

    def __init__(self, c, device=None):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=0, device=device)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Down(nn.Module):
    def __init__(self, blocks, downsample):
        super().__init__()
        self.block = nn.ModuleList(blocks)
        if downsample is not None:
            self.downsample = downsample


class Encoder(nn.Module):
    def __init__(self, cfg: VaeEncoderConfig, device=None):
        super().__init__()
        g = cfg.groups
        self.conv_in = nn.Conv2d(cfg.in_channels, cfg.ch, 3, padding=1, device=device)
        in_mult = [1] + list(cfg.ch_mult)
        downs = []
        block_in = cfg.ch
        for level, mult in enumerate(cfg.ch_mult):
            block_in = cfg.ch * in_mult[level]
            block_out = cfg.ch * mult
            blocks = []
            for _ in range(cfg.num_res_blocks):
                blocks.append(ResnetBlock(block_in, block_out, g, device))
                block_in = block_out
            last = level == len(cfg.ch_mult) - 1
            downs.append(Down(blocks, None if last else Downsample(block_in, device)))
        self.down = nn.ModuleList(downs)
        self.mid = Mid(block_in, g, device)
        self.norm_out = norm(g, block_in, device)
        self.conv_out = nn.Conv2d(block_in, 2 * cfg.z_channels, 3, padding=1, device=device)

    def forward(self, x, taps=None):
        h = self.conv_in(x)
        for level, d in enumerate(self.down):
            for blk in d.block:
                h = blk(h)
            if hasattr(d, "downsample"):
                h = d.downsample(h)
            if taps is not None:
                taps[f"down.{level}"] = h
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        if taps is not None:
            taps["mid"] = h
        return self.conv_out(F.silu(self.norm_out(h)))


class VaeEncoder(nn.Module):
    """encoder + quant_conv: image in [-1, 1] -> the posterior's mean and clamped log-variance."""

    def __init__(self, cfg: VaeEncoderConfig, device=None):
        super().__init__()
        self.encoder = Encoder(cfg, device)
        self.quant_conv = nn.Conv2d(2 * cfg.z_channels, 2 * cfg.z_channels, 1, device=device)

    def moments(self, x, taps=None):
        """x [B, 3, H, W] -> (mean, logvar) [B, z, H/f, W/f], logvar clamped to [-30, 20]."""
        h = self.quant_conv(self.encoder(x, taps))
        mean, logvar = h.chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def forward(self, x, noise=None, scale=SD_LATENT_SCALE, taps=None):
        """The UNet's latents: scale * (mean + exp(logvar / 2) * noise), or scale * mean without noise
        (the posterior's mode)."""
        mean, logvar = self.moments(x, taps)
        z = mean if noise is None else mean + torch.exp(0.5 * logvar) * noise
        return scale * z
