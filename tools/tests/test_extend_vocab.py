"""tools/train/diffusion/extend_vocab.py on the shipped tessera-tiny model: the colour / material /
background words are whole tokens, every word of the base vocabulary still tokenizes to itself (so the
shape engine's text features are unchanged), the embedding has a row per token, and extending again
changes nothing. Run: /usr/bin/python3 -m unittest tools/tests/test_extend_vocab.py (repo root)."""

import filecmp
import json
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train", "diffusion"))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import extend_vocab  # noqa: E402
import safetensors_io  # noqa: E402
from common import BpeTokenizer  # noqa: E402

MODEL = os.path.join(ROOT, "assets", "models", "tessera-tiny")


class ExtendVocabTest(unittest.TestCase):
    def setUp(self):
        self.tok = BpeTokenizer(os.path.join(MODEL, "vocab.json"), os.path.join(MODEL, "merges.txt"))
        with open(os.path.join(MODEL, "text_encoder", "extension.json")) as f:
            self.ext = json.load(f)

    def test_caption_words_are_whole_tokens(self):
        for word in extend_vocab.caption_words():
            ids = self.tok.encode(word)
            self.assertEqual(len(ids), 1, f"{word!r} -> {ids}")
        for word, i in self.ext["words"].items():
            self.assertEqual(self.tok.encode(word), [i])
            self.assertGreaterEqual(i, self.ext["base_vocab_size"])

    def test_shape_prompts_leave_the_image_only_words_out(self):
        drop = tuple(self.ext["words"].values())
        plain = self.tok.shape_body("a torus", drop)
        self.assertEqual(plain, self.tok.encode("a torus"))
        self.assertEqual(self.tok.shape_body("a shiny red torus on a dark background", drop), plain)
        self.assertEqual(self.tok.shape_body("a big blue table", drop), self.tok.encode("a big table"))
        self.assertEqual(self.tok.shape_body("red", drop), [])
        self.assertEqual(self.tok.shape_body("a torus a", drop), self.tok.encode("a torus a"))  # untouched
        self.assertEqual(self.tok.pad77("a red torus", drop=drop), self.tok.pad77("a torus"))

    def test_base_words_and_specials_keep_their_ids(self):
        base = self.ext["base_vocab_size"]
        self.assertLess(self.tok.bos_id, base)
        self.assertLess(self.tok.eos_id, base)
        for t, i in self.tok.encoder.items():
            if i < base and t.endswith("</w>") and len(t) > 5:
                self.assertEqual(self.tok.encode(t[:-4]), [i], t)

    def test_one_embedding_row_per_token_and_idempotent(self):
        w, _ = safetensors_io.load(os.path.join(MODEL, "text_encoder", "model.safetensors"))
        self.assertEqual(w[extend_vocab.EMB].shape[0], len(self.tok.encoder))
        with open(os.path.join(MODEL, "text_encoder", "config.json")) as f:
            self.assertEqual(json.load(f)["vocab_size"], len(self.tok.encoder))
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "m")
            shutil.copytree(MODEL, copy, ignore=shutil.ignore_patterns("diffusion"))
            extend_vocab.extend(copy, extend_vocab.caption_words())
            for name in ("vocab.json", "merges.txt", "text_encoder/model.safetensors"):
                self.assertTrue(filecmp.cmp(os.path.join(MODEL, name), os.path.join(copy, name), shallow=False),
                                name)


if __name__ == "__main__":
    unittest.main()
