"""tools/train/average_gpt.py: a weighted average of two exported GPT folders, the first folder's other
files kept, and clear refusals (mismatched tensors, a different text encoder, a missing file).
Run: /usr/bin/python3 -m unittest tools/tests/test_average_gpt.py (repo root)."""
import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from tessera_ref import st_io  # noqa: E402
from train import average_gpt  # noqa: E402


def make(folder, gpt, emb):
    os.makedirs(os.path.join(folder, "text_encoder"))
    st_io.save(os.path.join(folder, "shape_gpt.safetensors"), gpt)
    st_io.save(os.path.join(folder, "shape_tokenizer.safetensors"), {"t": np.ones(3, np.float32)})
    st_io.save(os.path.join(folder, "text_encoder", "model.safetensors"),
               {average_gpt.EMB: emb, "w": np.zeros(2, np.float32)})
    with open(os.path.join(folder, "text_encoder", "config.json"), "w") as f:
        json.dump({"eos_token_id": 2}, f)
    for name in ("vocab.json", "merges.txt"):
        with open(os.path.join(folder, name), "w") as f:
            f.write("x")


class AverageGptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-avg-")
        rng = np.random.default_rng(0)
        self.g1 = {"a": rng.standard_normal((4, 3)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
        self.g2 = {"a": rng.standard_normal((4, 3)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
        emb = rng.standard_normal((5, 2)).astype(np.float32)
        emb2 = emb.copy()
        emb2[3:] += 1                       # extension rows (past eos id 2) may differ
        self.d1, self.d2 = os.path.join(self.tmp, "one"), os.path.join(self.tmp, "two")
        make(self.d1, self.g1, emb)
        make(self.d2, self.g2, emb2)
        self.emb = emb

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_weighted_average_keeps_first_folder(self):
        out = os.path.join(self.tmp, "out")
        average_gpt.average([(self.d1, 3.0), (self.d2, 1.0)], out)
        got, _ = st_io.load(os.path.join(out, "shape_gpt.safetensors"))
        for k in self.g1:
            np.testing.assert_allclose(got[k], 0.75 * self.g1[k] + 0.25 * self.g2[k], rtol=1e-6, atol=1e-6)
        te, _ = st_io.load(os.path.join(out, "text_encoder", "model.safetensors"))
        np.testing.assert_array_equal(te[average_gpt.EMB], self.emb)
        self.assertFalse(os.path.exists(out + ".tmp"))

    def test_refusals_name_the_file(self):
        out = os.path.join(self.tmp, "out")
        bad = dict(self.g2, a=np.zeros((3, 3), np.float32))
        st_io.save(os.path.join(self.d2, "shape_gpt.safetensors"), bad)
        with self.assertRaisesRegex(ValueError, "two/shape_gpt.safetensors: a has shape"):
            average_gpt.average([(self.d1, 1), (self.d2, 1)], out)
        te, _ = st_io.load(os.path.join(self.d2, "text_encoder", "model.safetensors"))
        te[average_gpt.EMB] = te[average_gpt.EMB] + 1   # a base-vocabulary row differs
        st_io.save(os.path.join(self.d2, "text_encoder", "model.safetensors"), te)
        with self.assertRaisesRegex(ValueError, "do not share one text encoder"):
            average_gpt.average([(self.d1, 1), (self.d2, 1)], out)
        os.remove(os.path.join(self.d2, "merges.txt"))
        with self.assertRaisesRegex(FileNotFoundError, "two/merges.txt: missing"):
            average_gpt.average([(self.d1, 1), (self.d2, 1)], out)
        self.assertFalse(os.path.exists(out))
        with self.assertRaisesRegex(ValueError, "at least two"):
            average_gpt.average([(self.d1, 1)], out)


if __name__ == "__main__":
    unittest.main()
