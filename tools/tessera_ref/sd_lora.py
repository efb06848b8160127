"""Reference LoRA merge for SD 1.x (fp32 PyTorch): the oracle for engine/diffusion/lora.cpp.

A module changes one weight W [out, ...] by multiplier * alpha / rank * (up x down), rank = down's rows,
alpha absent -> alpha = rank. Linear: up [out, r] @ down [r, in]. 1x1 convolution: the same with the
trailing 1 x 1. 3x3 convolution (down [r, in, 3, 3], up [out, r, 1, 1]): computed as kohya's merge does,
conv2d(down^T, up)^T, an independent route to the same product.
"""

import torch
import torch.nn.functional as F


def lora_delta(down, up, alpha, multiplier):
    """The change a module makes, shaped as the weight it changes ([out, in] or [out, in, k, k])."""
    down = torch.as_tensor(down, dtype=torch.float32)
    up = torch.as_tensor(up, dtype=torch.float32)
    rank = down.shape[0]
    scale = multiplier * ((alpha / rank) if alpha else 1.0)
    if down.dim() == 4 and down.shape[2:] != (1, 1):
        return F.conv2d(down.permute(1, 0, 2, 3), up).permute(1, 0, 2, 3) * scale
    d = up.reshape(up.shape[0], rank) @ down.reshape(rank, -1)
    if down.dim() == 4:
        d = d[:, :, None, None]
    return d * scale
