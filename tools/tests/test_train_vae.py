"""tools/train/diffusion/train_vae.py on a toy dataset (64 random-blob images, a few steps):
- a full run encodes latents.npy and records their scale and the commit it ran at;
- --decoder-only (from that run) keeps the encoder bit for bit, leaves latents.npy untouched, copies the
  init run's latent statistics into its vae_done.json, and does train the decoder;
- --decoder-only without --init-from, or without the init run's vae_done.json, is refused.
Run: /usr/bin/python3 -m unittest tools/tests/test_train_vae.py (repo root)."""

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "train", "diffusion"))

import train_vae  # noqa: E402
from train import run_record  # noqa: E402


def quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


class DecoderOnlyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-vae-test-")
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        rng = np.random.default_rng(0)
        imgs = np.full((64, 64, 64, 3), 140, np.uint8)
        yy, xx = np.mgrid[:64, :64]
        for i in range(64):  # a coloured disc on grey
            cy, cx, r = rng.integers(20, 44, 2).tolist() + [int(rng.integers(6, 16))]
            imgs[i][(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.integers(0, 256, 3)
        np.save(os.path.join(cls.data, "images.npy"), imgs)
        with open(os.path.join(cls.data, "captions.json"), "w") as f:
            json.dump(["a disc"] * 64, f)
        with open(os.path.join(cls.data, "meta.json"), "w") as f:
            json.dump({"seed": 0, "images": 64}, f)
        cls.base = os.path.join(cls.tmp, "base")
        quiet(train_vae.main, cls.args(cls.base, ["--steps", "4"]))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def args(cls, run, extra):
        return ["--run-dir", run, "--data", cls.data, "--batch", "4", "--crop", "32", "--warmup", "1",
                "--eval-every", "1000", "--log-every", "1000"] + extra

    def test_full_run_encodes_latents(self):
        lat = np.load(os.path.join(self.data, "latents.npy"))
        self.assertEqual(lat.shape, (64, 4, 16, 16))
        with open(os.path.join(self.base, "vae_done.json")) as f:
            done = json.load(f)
        self.assertAlmostEqual(done["latent_scale"], 1.0 / float(lat.astype(np.float32).std()), places=3)
        # tools/train/run_record.py: the commit (null outside a checkout) and whether tools/ differed from it
        self.assertEqual(done["git_commit"] is None, run_record.git_state()["git_commit"] is None)
        self.assertIn("git_dirty", done)

    def test_decoder_only_keeps_encoder_and_latents(self):
        lat_path = os.path.join(self.data, "latents.npy")
        before = sha(lat_path)
        run = os.path.join(self.tmp, "dec")
        init = os.path.join(self.base, "vae_ckpt.pt")
        quiet(train_vae.main, self.args(run, ["--steps", "3", "--lr", "1e-2", "--init-from", init,
                                              "--decoder-only"]))
        self.assertEqual(sha(lat_path), before)  # not re-encoded
        a = torch.load(init, map_location="cpu")["model"]
        b = torch.load(os.path.join(run, "vae_ckpt.pt"), map_location="cpu")["model"]
        enc = [k for k in a if k.startswith("encoder.")]
        dec = [k for k in a if k.startswith("first_stage.")]
        self.assertTrue(enc and dec)
        for k in enc:
            self.assertTrue(torch.equal(a[k], b[k]), k)
        self.assertTrue(any(not torch.equal(a[k], b[k]) for k in dec))
        with open(os.path.join(self.base, "vae_done.json")) as f:
            base_done = json.load(f)
        with open(os.path.join(run, "vae_done.json")) as f:
            done = json.load(f)
        for k in ("latent_scale", "latent_std", "latent_mean", "latent_std_per_channel"):
            self.assertEqual(done[k], base_done[k], k)
        self.assertEqual(done["encoder_from"], init)
        self.assertTrue(done["args"]["decoder_only"])

    def test_decoder_only_refusals(self):
        with self.assertRaises(SystemExit):
            quiet(train_vae.main, self.args(os.path.join(self.tmp, "x"), ["--decoder-only"]))
        lone = os.path.join(self.tmp, "lone")
        os.makedirs(lone)
        shutil.copyfile(os.path.join(self.base, "vae_ckpt.pt"), os.path.join(lone, "vae_ckpt.pt"))
        with self.assertRaises(SystemExit) as cm:
            quiet(train_vae.main, self.args(os.path.join(self.tmp, "y"), [
                "--init-from", os.path.join(lone, "vae_ckpt.pt"), "--decoder-only", "--steps", "2"]))
        self.assertIn("vae_done.json", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
