"""The ControlNet reference (tools/tessera_ref/sd_controlnet.py): key names of the v1.1 layout, one
residual per input block plus the middle, a zero-initialised ControlNet leaves the UNet's output exactly as
it was, a trained-looking one changes it, and the SD 1.5 configuration's parameter count."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tessera_ref import sd_controlnet, sd_unet  # noqa: E402

TINY = sd_unet.UNetConfig(in_channels=4, out_channels=4, model_channels=32, channel_mult=[1, 2],
                          num_res_blocks=1, attention_levels=[0], num_heads=2, context_dim=32, groups=32)
TINY_HINT = sd_controlnet.HintConfig(channels=[16, 32], strides=[1, 2])  # x2, the tiny VAE's scale


class ControlNetReference(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.unet = sd_unet.UNet(TINY).eval()
        self.cn = sd_controlnet.ControlNet(TINY, TINY_HINT).eval()
        self.x = torch.randn(1, 4, 16, 16)
        self.hint = torch.rand(1, 3, 32, 32)
        self.t = torch.tensor([500.0])
        self.ctx = torch.randn(1, 77, 32)

    def test_keys_follow_the_v11_layout(self):
        keys = set(self.cn.state_dict())
        for k in ("time_embed.0.weight", "input_blocks.1.0.in_layers.2.weight", "input_blocks.0.0.weight",
                  "input_hint_block.0.weight", "input_hint_block.4.weight", "zero_convs.0.0.weight",
                  "zero_convs.3.0.bias", "middle_block_out.0.weight", "middle_block.1.proj_in.weight"):
            self.assertIn(k, keys)
        self.assertFalse(any(k.startswith(("output_blocks", "out.")) for k in keys))
        # The encoder half is named and shaped as the UNet's, so tool_add_control's copy works.
        unet_sd = self.unet.state_dict()
        for k, v in self.cn.state_dict().items():
            if k.startswith(("time_embed", "input_blocks", "middle_block.")):
                self.assertEqual(tuple(unet_sd[k].shape), tuple(v.shape), k)

    @torch.no_grad()
    def test_residuals_match_the_skips(self):
        outs = self.cn(self.x, self.hint, self.t, self.ctx)
        taps = {}
        self.unet(self.x, self.t, self.ctx, taps)
        self.assertEqual(len(outs), len(self.unet.input_blocks) + 1)
        for k in range(len(self.unet.input_blocks)):
            self.assertEqual(outs[k].shape, taps[f"input_blocks.{k}"].shape)
        self.assertEqual(outs[-1].shape, taps["middle_block"].shape)

    @torch.no_grad()
    def test_zero_initialised_changes_nothing_and_trained_does(self):
        self.cn.load_state_dict({**self.cn.state_dict(),
                                 **{k: v for k, v in self.unet.state_dict().items()
                                    if k in self.cn.state_dict()}})
        self.cn.zero_init()
        plain = self.unet(self.x, self.t, self.ctx)
        outs = self.cn(self.x, self.hint, self.t, self.ctx)
        self.assertTrue(torch.equal(sd_controlnet.controlled_unet(self.unet, self.x, self.t, self.ctx, outs), plain))
        for m in self.cn.zero_convs:
            torch.nn.init.normal_(m[0].weight, std=0.1)
        outs = self.cn(self.x, self.hint, self.t, self.ctx)
        controlled = sd_controlnet.controlled_unet(self.unet, self.x, self.t, self.ctx, outs)
        self.assertGreater(float((controlled - plain).abs().max()), 1e-3)
        # Scale 0 is the plain UNet again.
        zero = sd_controlnet.controlled_unet(self.unet, self.x, self.t, self.ctx, outs, scale=0.0)
        self.assertTrue(torch.allclose(zero, plain, atol=1e-6))

    def test_guess_mode_scales(self):
        s = sd_controlnet.guess_mode_scales(1.0)
        self.assertEqual(len(s), 13)
        self.assertAlmostEqual(s[-1], 1.0)
        self.assertAlmostEqual(s[0], 0.825 ** 12)

    def test_sd15_counts(self):
        cn = sd_controlnet.ControlNet(sd_unet.SD15_UNET, device="meta")
        self.assertEqual(len(cn.zero_convs), 12)
        hint = sum(p.numel() for n, p in cn.named_parameters() if n.startswith("input_hint_block"))
        # 16*3*9+16 + 16*16*9+16 + 32*16*9+32 + 32*32*9+32 + 96*32*9+96 + 96*96*9+96 + 256*96*9+256
        # + 320*256*9+320
        self.assertEqual(hint, 1_086_480)


if __name__ == "__main__":
    unittest.main()
