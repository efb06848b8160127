#!/usr/bin/python3
"""Writes tests/fixtures/diffusion/taesd/: a tiny latent decoder (TAESD architecture, width WIDTH instead
of 64 to keep it small) with random weights in both published layouts, and what PyTorch decodes with it
(tools/tessera_ref/sd_taesd.py).

- taesd_decoder.safetensors: the release layout ("1.weight" ... "19.bias"), F16.
- diffusers/diffusion_pytorch_model.safetensors: the same weights as diffusers' AutoencoderTiny
  (`decoder.layers.*`) beside an encoder tensor it does not need, F16.
- expected.safetensors: `z` [2, 5, 6, 4] latents (some beyond the clamp's knee), `image` [2, 40, 48, 3].

Usage: /usr/bin/python3 tools/make_taesd_fixtures.py [--out DIR]
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tessera_ref import st_io  # noqa: E402
from tessera_ref.sd_taesd import decode, diffusers_key, tiny_decoder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH = 8
SEED = 5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "diffusion", "taesd"))
    args = ap.parse_args()
    torch.manual_seed(SEED)
    dec = tiny_decoder(4, WIDTH).double()
    with torch.no_grad():
        for p in dec.parameters():
            p.copy_(torch.randn_like(p) * (0.9 / np.sqrt(p[0].numel() if p.dim() > 1 else 64)))
            p.copy_(p.half().double())  # F16-exact, so both files hold the same numbers
    state = {k: v.float().numpy() for k, v in dec.state_dict().items()}
    os.makedirs(os.path.join(args.out, "diffusers"), exist_ok=True)
    st_io.save(os.path.join(args.out, "taesd_decoder.safetensors"), state,
               dtypes={k: "F16" for k in state})
    renamed = {diffusers_key(k): v for k, v in state.items()}
    renamed["encoder.layers.0.weight"] = np.zeros((WIDTH, 3, 3, 3), np.float32)
    st_io.save(os.path.join(args.out, "diffusers", "diffusion_pytorch_model.safetensors"), renamed,
               dtypes={k: "F16" for k in renamed})
    z = torch.randn(2, 5, 6, 4, dtype=torch.float64) * 2.5
    z[0, 0, 0, :] = torch.tensor([9.0, -9.0, 4.0, -4.0])
    image = decode(dec, z)
    st_io.save(os.path.join(args.out, "expected.safetensors"),
               {"z": z.float().numpy(), "image": image.float().numpy()})
    print("wrote", args.out, "image range", float(image.min()), float(image.max()))


if __name__ == "__main__":
    main()
