"""Reference ControlNet for SD 1.x (CompVis `cldm.py` ControlNet layout) in plain fp32 PyTorch: the oracle
the engine's ControlNet is to be checked against.

state_dict keys equal those of a v1.1 ControlNet file minus the `control_model.` prefix: `time_embed.{0,2}`,
`input_blocks.N...` and `middle_block.{0,1,2}` exactly as the UNet's (tools/tessera_ref/sd_unet.py), then
`input_hint_block.{0,2,...}` (3x3 convs, SiLU between them, no tensors at the odd indices),
`zero_convs.K.0` (1x1, one per input block) and `middle_block_out.0` (1x1).

Forward (x, hint, t, context) -> one residual per input block and one for the middle block (13 for SD 1.5):
h = input_blocks[0](x) + input_hint_block(hint); out_0 = zero_convs[0](h); h = input_blocks[k](h),
out_k = zero_convs[k](h); h = middle_block(h); out_last = middle_block_out(h). The UNet adds scale * out_k
to the skip saved after its input block k and scale * out_last to its middle block's output
(`controlled_unet`).
"""

from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn

from . import sd_unet

CONTROL_PREFIX = "control_model."


@dataclass
class HintConfig:
    """The hint encoder's conv widths and strides (its last conv goes to the UNet's model channels).
    SD 1.5: 16, 16, 32, 32, 96, 96, 256 with three stride-2 convs (x8, the VAE's scale)."""
    in_channels: int = 3
    channels: List[int] = field(default_factory=lambda: [16, 16, 32, 32, 96, 96, 256])
    strides: List[int] = field(default_factory=lambda: [1, 1, 2, 1, 2, 1, 2])


SD15_HINT = HintConfig()


class ControlNet(nn.Module):
    def __init__(self, cfg: sd_unet.UNetConfig, hint: HintConfig = SD15_HINT, device=None):
        super().__init__()
        self.cfg = cfg
        unet = sd_unet.UNet(cfg, device=device)  # the encoder half is the UNet's own
        self.time_embed = unet.time_embed
        self.input_blocks = unet.input_blocks
        self.middle_block = unet.middle_block
        layers, cin = [], hint.in_channels
        for c, s in zip(hint.channels, hint.strides):
            layers += [nn.Conv2d(cin, c, 3, stride=s, padding=1, device=device), nn.SiLU()]
            cin = c
        layers.append(nn.Conv2d(cin, cfg.model_channels, 3, padding=1, device=device))
        self.input_hint_block = nn.Sequential(*layers)
        widths = []
        for blk in self.input_blocks:
            widths.append(blk[0].out_channels if isinstance(blk[0], nn.Conv2d)
                          else blk[0].out_layers[-1].out_channels if isinstance(blk[0], sd_unet.ResBlock)
                          else blk[0].op.out_channels)
        self.zero_convs = nn.ModuleList([sd_unet.Seq([sd_unet.Conv(c, c, 1, device=device)]) for c in widths])
        mid = widths[-1]
        self.middle_block_out = sd_unet.Seq([sd_unet.Conv(mid, mid, 1, device=device)])

    def zero_init(self):
        """What training starts from: zero convs, middle_block_out and the hint's last conv all 0."""
        with torch.no_grad():
            for m in list(self.zero_convs) + [self.middle_block_out]:
                m[0].weight.zero_()
                m[0].bias.zero_()
            self.input_hint_block[-1].weight.zero_()
            self.input_hint_block[-1].bias.zero_()
        return self

    def forward(self, x, hint, t, ctx):
        emb = self.time_embed(sd_unet.timestep_embedding(t, self.cfg.model_channels))
        guided = self.input_hint_block(hint)
        outs, h = [], x
        for k, blk in enumerate(self.input_blocks):
            h = blk(h, emb, ctx)
            if k == 0:
                h = h + guided
            outs.append(self.zero_convs[k][0](h))
        h = self.middle_block(h, emb, ctx)
        outs.append(self.middle_block_out[0](h))
        return outs


def controlled_unet(unet, x, t, ctx, residuals, scale=1.0):
    """sd_unet.UNet.forward with a ControlNet's residuals added: scale * residuals[k] to the skip of input
    block k, scale * residuals[-1] to the middle block's output. `scale` may be a list (one per residual)."""
    scales = list(scale) if isinstance(scale, (list, tuple)) else [scale] * len(residuals)
    emb = unet.time_embed(sd_unet.timestep_embedding(t, unet.cfg.model_channels))
    hs, h = [], x
    for k, blk in enumerate(unet.input_blocks):
        h = blk(h, emb, ctx)
        hs.append(h + scales[k] * residuals[k])
    h = unet.middle_block(h, emb, ctx) + scales[-1] * residuals[-1]
    for blk in unet.output_blocks:
        h = blk(torch.cat([h, hs.pop()], dim=1), emb, ctx)
    return unet.out(h)


def guess_mode_scales(strength, count=13):
    """The original guess mode's per-residual scales: strength * 0.825^(count - 1 - i)."""
    return [strength * 0.825 ** (count - 1 - i) for i in range(count)]


_RESNET_DIFFUSERS = {"in_layers.0": "norm1", "in_layers.2": "conv1", "emb_layers.1": "time_emb_proj",
                     "out_layers.0": "norm2", "out_layers.3": "conv2", "skip_connection": "conv_shortcut"}


def diffusers_key(name, num_res_blocks, hint_convs):
    """A v1.1 ControlNet key (no `control_model.` prefix) under its diffusers ControlNetModel name, for a
    UNet with `num_res_blocks` ResBlocks per level and a hint encoder of `hint_convs` convolutions."""
    p = name.split(".")
    per = num_res_blocks + 1

    def resnet(rest):
        tail = ".".join(rest)
        for a, b in _RESNET_DIFFUSERS.items():
            if tail.startswith(a + "."):
                return b + tail[len(a):]
        raise KeyError(name)

    if p[0] == "time_embed":
        return {"0": "time_embedding.linear_1", "2": "time_embedding.linear_2"}[p[1]] + "." + ".".join(p[2:])
    if p[0] == "input_hint_block":
        i = int(p[1]) // 2
        head = ("controlnet_cond_embedding.conv_in" if i == 0 else "controlnet_cond_embedding.conv_out"
                if i == hint_convs - 1 else f"controlnet_cond_embedding.blocks.{i - 1}")
        return head + "." + ".".join(p[2:])
    if p[0] == "zero_convs":
        return f"controlnet_down_blocks.{p[1]}." + ".".join(p[3:])
    if p[0] == "middle_block_out":
        return "controlnet_mid_block." + ".".join(p[2:])
    if p[0] == "middle_block":
        if p[1] == "1":
            return "mid_block.attentions.0." + ".".join(p[2:])
        return f"mid_block.resnets.{int(p[1]) // 2}." + resnet(p[2:])
    if p[0] == "input_blocks":
        n = int(p[1])
        if n == 0:
            return "conv_in." + ".".join(p[3:])
        level, j = (n - 1) // per, (n - 1) % per
        if j == num_res_blocks:
            return f"down_blocks.{level}.downsamplers.0.conv." + ".".join(p[4:])
        if p[2] == "0":
            return f"down_blocks.{level}.resnets.{j}." + resnet(p[3:])
        return f"down_blocks.{level}.attentions.{j}." + ".".join(p[3:])
    raise KeyError(name)
