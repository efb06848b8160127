"""Reference tiny latent decoder (TAESD) in plain fp32 PyTorch, the oracle for
engine/diffusion/tiny_decoder.cpp.

Written from the published architecture: the decoder is one nn.Sequential, so its state_dict keys are
the module indices of the release file (taesd_decoder.safetensors):
  0 soft clamp 3 * tanh(z / 3) (no weights), 1 conv 3x3 latent -> W, 2 ReLU,
  3-5 blocks, 6 nearest x2, 7 conv 3x3 without bias, 8-10 blocks, 11 x2, 12 conv, 13-15 blocks,
  16 x2, 17 conv, 18 block, 19 conv 3x3 W -> 3.
A block: relu(conv.4(relu(conv.2(relu(conv.0(x))))) + x) (`N.conv.0`, `N.conv.2`, `N.conv.4`).
The output is about [0, 1]; decode() returns 2 * out - 1 (the engine's image convention).
diffusers' AutoencoderTiny stores the same layers as `decoder.layers.{i - 1}` (the clamp is in its
forward, not a module): diffusers_key() renames.
"""

import torch
import torch.nn as nn


class Clamp(nn.Module):
    def forward(self, x):
        return torch.tanh(x / 3) * 3


def conv(n_in, n_out, bias=True):
    return nn.Conv2d(n_in, n_out, 3, padding=1, bias=bias)


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.conv = nn.Sequential(conv(n, n), nn.ReLU(), conv(n, n), nn.ReLU(), conv(n, n))

    def forward(self, x):
        return torch.relu(self.conv(x) + x)


def tiny_decoder(latent_channels=4, width=64):
    w = width
    return nn.Sequential(
        Clamp(), conv(latent_channels, w), nn.ReLU(),
        Block(w), Block(w), Block(w), nn.Upsample(scale_factor=2), conv(w, w, bias=False),
        Block(w), Block(w), Block(w), nn.Upsample(scale_factor=2), conv(w, w, bias=False),
        Block(w), Block(w), Block(w), nn.Upsample(scale_factor=2), conv(w, w, bias=False),
        Block(w), conv(w, 3),
    )


def decode(decoder, z_nhwc):
    """z [B, H, W, C] (the UNet's latents) -> image [B, 8H, 8W, 3] in about [-1, 1]."""
    with torch.no_grad():
        out = decoder(z_nhwc.permute(0, 3, 1, 2))
    return (2 * out - 1).permute(0, 2, 3, 1).contiguous()


def diffusers_key(name):
    """A release key ("3.conv.0.weight") under diffusers' AutoencoderTiny name."""
    index, rest = name.split(".", 1)
    return f"decoder.layers.{int(index) - 1}.{rest}"
