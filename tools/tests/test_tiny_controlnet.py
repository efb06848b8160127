"""The shipped depth ControlNet of tessera-tiny diffusion (assets/models/tessera-tiny/diffusion/
controlnet-depth.safetensors, tools/train/diffusion/train_controlnet.py): every key has the v1.1 file's
`control_model.` prefix and the shape the reference ControlNet (tools/tessera_ref/sd_controlnet.py) built
from the card expects, no UNet tensor is stored in it, the hint encoder's strides follow the engine's rule
(a conv that changes the channel count and is neither the first nor the last has stride 2), the card's
hint section agrees with the file, the net is trained (zero convs no longer zero; a rendered depth hint
moves the UNet's prediction, the empty hint much less), and the UNet it was trained for is still the one in
model.safetensors (the card's unet_sha256). A few seconds.
Run: /usr/bin/python3 -m unittest tools/tests/test_tiny_controlnet.py (repo root)."""
import json
import os
import sys
import unittest

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "train", "diffusion"))
import render  # noqa: E402
import sample as S  # noqa: E402
import train_controlnet as T  # noqa: E402
from tessera_ref import sd_controlnet, st_io  # noqa: E402

MODEL_DIR = os.path.join(ROOT, "assets", "models", "tessera-tiny", "diffusion")
FILE = os.path.join(MODEL_DIR, T.EXPORT_NAME)


@unittest.skipUnless(os.path.exists(FILE), "no shipped depth ControlNet")
class TinyControlNetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.tensors, _ = st_io.load(FILE)
        with open(os.path.join(MODEL_DIR, "model.json")) as f:
            cls.card = json.load(f)
        cls.section = cls.card["controlnet_depth"]
        cls.unet, _, _ = S.load_exported(MODEL_DIR)
        hint = cls.section["hint_channels"]
        cfg = sd_controlnet.HintConfig(in_channels=hint[0], channels=hint[1:-1], strides=cls.section["hint_strides"][:-1])
        cls.cn = sd_controlnet.ControlNet(cls.unet.cfg, cfg).eval()

    def test_keys_prefix_and_shapes(self):
        p = sd_controlnet.CONTROL_PREFIX
        self.assertTrue(all(k.startswith(p) for k in self.tensors))
        expected = {p + k: tuple(v.shape) for k, v in self.cn.state_dict().items()}
        self.assertEqual(set(self.tensors), set(expected))
        for k, v in self.tensors.items():
            self.assertEqual(tuple(v.shape), expected[k], k)
            self.assertEqual(v.dtype, np.float32, k)
        self.assertFalse(any(k[len(p):].startswith(("output_blocks.", "out.")) for k in self.tensors))
        self.assertEqual(self.section["file"], T.EXPORT_NAME)
        self.assertEqual(self.section["parameters"], sum(int(v.size) for v in self.tensors.values()))

    def test_hint_strides_follow_the_engine_rule(self):
        p = sd_controlnet.CONTROL_PREFIX + "input_hint_block."
        idx = sorted(int(k[len(p):].split(".")[0]) for k in self.tensors if k.startswith(p) and k.endswith(".weight"))
        self.assertEqual(idx, list(range(0, 2 * len(idx), 2)))  # convs at the even indices, SiLU between
        shapes = [self.tensors[f"{p}{i}.weight"].shape for i in idx]
        cin, outs = shapes[0][1], [s[0] for s in shapes]
        self.assertEqual(cin, 3)
        self.assertEqual(outs[-1], self.unet.cfg.model_channels)
        rule = T.hint_strides_by_rule(cin, outs)
        self.assertEqual(rule, self.section["hint_strides"])
        self.assertEqual([cin] + outs, self.section["hint_channels"])
        # The strides bring the 64x64 hint to the latent's 16x16 (the VAE's factor 4).
        self.assertEqual(64 // int(np.prod(rule)), self.card["latent_size"])

    def test_trained_residuals_follow_the_depth_hint(self):
        sd = {k[len(sd_controlnet.CONTROL_PREFIX):]: torch.from_numpy(np.array(v)) for k, v in self.tensors.items()}
        self.cn.load_state_dict(sd, strict=True)
        for k in range(len(self.cn.zero_convs)):
            self.assertGreater(float(self.cn.zero_convs[k][0].weight.abs().max()), 0.0, f"zero_convs.{k}")
        self.assertGreater(float(self.cn.middle_block_out[0].weight.abs().max()), 0.0)
        # A depth hint the way the engine renders it (render.py's convention): one held-out geometry.
        _, d = render.sample(0, 3, 526, with_depth=True)
        self.assertEqual(d.max(), 255)
        hint = T.hint_of(d[None])
        g = torch.Generator().manual_seed(0)
        x = torch.randn(1, 4, 16, 16, generator=g)
        t = torch.tensor([700.0])
        ctx = torch.zeros(1, 77, self.unet.cfg.context_dim)
        with torch.no_grad():
            res = self.cn(x, hint, t, ctx)
            res0 = self.cn(x, torch.zeros_like(hint), t, ctx)
            plain = self.unet(x, t, ctx)
            ctl = sd_controlnet.controlled_unet(self.unet, x, t, ctx, res)
        self.assertEqual(len(res), len(self.unet.input_blocks) + 1)
        self.assertTrue(all(float(r.abs().max()) > 0 for r in res))
        moved = float((ctl - plain).pow(2).mean().sqrt())
        self.assertGreater(moved, 0.02)  # a real change of the epsilon prediction (std ~1)
        # The hint matters: the residuals differ between this depth map and an empty one.
        diff = sum(float((a - b).pow(2).sum()) for a, b in zip(res, res0))
        self.assertGreater(diff, 1e-3)

    def test_the_unet_is_the_one_it_was_trained_for(self):
        self.assertEqual(T.unet_sha256(MODEL_DIR), self.section["unet_sha256"])


if __name__ == "__main__":
    unittest.main()
