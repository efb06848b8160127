"""tools/train/import_tiny.py: the shipped tessera-tiny folder back into training checkpoints (ae_ckpt.pt,
gpt_ckpt.pt with clip.* / gpt.*, base vocabulary), and export_tiny of those gives back the folder: every
tensor bit for bit except the derived wte code rows (within 1e-5), the vocabulary and the extension.
About 10 s. Run: /usr/bin/python3 -m unittest tools/tests/test_import_tiny.py (repo root)."""
import json
import os
import shutil
import sys
import tempfile
import unittest

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from train import import_tiny  # noqa: E402

SHIPPED = os.path.join(ROOT, "assets", "models", "tessera-tiny")


@unittest.skipUnless(os.path.exists(os.path.join(SHIPPED, "shape_gpt.safetensors")), "no shipped model")
class ImportTinyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-import-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_round_trip(self):
        run = os.path.join(self.tmp, "run")
        info = import_tiny.import_folder(SHIPPED, run)
        gpt = torch.load(os.path.join(run, "gpt_ckpt.pt"))
        self.assertTrue(any(k.startswith("clip.") for k in gpt["model"]))
        self.assertTrue(any(k.startswith("gpt.") for k in gpt["model"]))
        emb = gpt["model"]["clip.text_model.embeddings.token_embedding.weight"]
        self.assertEqual(emb.shape[0], info["base_vocab_size"])      # extension rows cut off
        with open(os.path.join(run, "vocab", "vocab.json")) as f:
            self.assertEqual(len(json.load(f)), info["base_vocab_size"])
        ae = torch.load(os.path.join(run, "ae_ckpt.pt"))
        self.assertTrue(ae["extra"]["vq_on"])
        diffs, notes = import_tiny.round_trip(SHIPPED, run)
        self.assertEqual(diffs, [])
        self.assertTrue(any("wte" in n for n in notes))

    def test_differences_are_found(self):
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        shutil.copytree(SHIPPED, a, ignore=shutil.ignore_patterns("diffusion"))
        shutil.copytree(a, b)
        with open(os.path.join(b, "merges.txt"), "a") as f:
            f.write("x y\n")
        self.assertEqual(import_tiny.compare_folders(a, a), [])
        self.assertEqual(import_tiny.compare_folders(a, b), ["merges.txt: differs"])


if __name__ == "__main__":
    unittest.main()
