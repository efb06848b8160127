"""tessera-tiny training phases on a toy dataset (2 families, 2 shapes each, a few steps):
- train_autoencoder.py --train-decoder-only keeps the encoding side (encoder, embedder, codebook) bit for
  bit, so the token ids of every shape are unchanged, while the decoder does learn; it resumes; it
  refuses to start without a finished codebook to start from; --code-noise feeds the decoder the
  given random codes where the mask says (and nothing else changes where it does not); --consistency
  trains the encoder and refuses too few points for two disjoint samples;
- train_gpt.py --n-embd ... records the GPT size in its checkpoint, export_tiny.py exports that size (the
  config inferred from the written shapes must match), a resume with other sizes fails naming the
  checkpoint, and --text-from starts the text encoder (only) from another run;
- ship.py replaces the shipped folder only with a better model (diffusion/ carried over) and refuses a
  folder without evaluated metrics;
- the done records carry the commit the run ran at (tools/train/run_record.py).
Run: /usr/bin/python3 -m unittest tools/tests/test_train_phases.py (repo root)."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from train import common, export_tiny, run_record, ship, train_autoencoder, train_gpt  # noqa: E402
from tessera_ref import st_io  # noqa: E402


def quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


class TrainPhasesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-train-test-")
        cls.data = os.path.join(cls.tmp, "data")
        for split in ("train", "val"):
            subprocess.run([sys.executable, "-m", "tools.shapes.dataset", "generate", "--out",
                            os.path.join(cls.data, split), "--per-family", "2", "--seed", "3", "--split",
                            split, "--families", "sphere,torus", "--n-surface", "1024", "--n-occ", "512"],
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        cls.ae1 = os.path.join(cls.tmp, "ae1")
        quiet(train_autoencoder.main, ["--run-dir", cls.ae1, "--data", cls.data, "--steps", "3",
                                       "--vq-start", "1", "--batch", "2", "--warmup", "1",
                                       "--eval-every", "1000", "--n-points", "256", "--n-query", "128"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ae_args(self, run, steps):
        return ["--run-dir", run, "--data", self.data, "--steps", str(steps), "--batch", "2",
                "--warmup", "1", "--eval-every", "1000", "--n-points", "256", "--n-query", "128",
                "--lr", "1e-2", "--init-from", os.path.join(self.ae1, "ae_ckpt.pt"), "--train-decoder-only"]

    def test_decoder_only_keeps_token_ids(self):
        run = os.path.join(self.tmp, "ae-dec")
        quiet(train_autoencoder.main, self.ae_args(run, 2))
        # extend the run: the resume path rebuilds the optimizer over the decoder only
        os.remove(os.path.join(run, "ae_done.json"))
        quiet(train_autoencoder.main, self.ae_args(run, 4))
        before = torch.load(os.path.join(self.ae1, "ae_ckpt.pt"))["model"]
        after = torch.load(os.path.join(run, "ae_ckpt.pt"))
        self.assertEqual(after["step"], 4)
        changed = [k for k in before if not torch.equal(before[k], after["model"][k])]
        self.assertTrue(changed, "the decoder did not learn")
        for k in changed:
            self.assertFalse(k.startswith(train_autoencoder.ENCODING_PREFIXES), k)
        self.assertTrue(any(k.startswith("decoder.") for k in changed), changed)
        models = []
        for state in (before, after["model"]):
            m = common.TrainShapeTokenizer(common.tiny_shape_config())
            m.load_state_dict(state)
            models.append(m.eval())
        val = common.load_split(os.path.join(self.data, "val"))
        pts = torch.from_numpy(val["surface_points"][:, :256])
        nrm = torch.from_numpy(val["surface_normals"][:, :256])
        self.assertTrue(torch.equal(models[0].encode_ids(pts, nrm), models[1].encode_ids(pts, nrm)))
        self.assertTrue(torch.equal(models[0].codebook_vectors(), models[1].codebook_vectors()))

    def test_code_noise_replaces_decoder_inputs_and_trains(self):
        m = common.TrainShapeTokenizer(common.tiny_shape_config())
        m.load_state_dict(torch.load(os.path.join(self.ae1, "ae_ckpt.pt"))["model"])
        m.eval()
        val = common.load_split(os.path.join(self.data, "val"))
        pts = torch.from_numpy(val["surface_points"][:2, :256])
        nrm = torch.from_numpy(val["surface_normals"][:2, :256])
        q = torch.from_numpy(val["occ_points"][:2, :64])
        ids = m.encode_ids(pts, nrm)
        other = (ids + 1) % m.fill_id
        L = ids.shape[1]
        with torch.no_grad():
            clean, _ = m.forward_train(pts, nrm, q)
            none, _ = m.forward_train(pts, nrm, q, noise=(torch.zeros(2, L, dtype=torch.bool), other))
            swapped, _ = m.forward_train(pts, nrm, q, noise=(torch.ones(2, L, dtype=torch.bool), other))
            direct = m.occupancy_decoder(q, m.decoder(m.bottleneck.block.c_out(
                F.embedding(other, m.codebook_vectors()))))
        self.assertTrue(torch.equal(clean, none))
        self.assertTrue(torch.allclose(swapped, direct, atol=1e-5))
        self.assertFalse(torch.allclose(swapped, clean, atol=1e-3))
        run = os.path.join(self.tmp, "ae-noise")
        quiet(train_autoencoder.main, self.ae_args(run, 2) + ["--code-noise", "0.5", "--code-noise-prob", "1"])
        self.assertEqual(torch.load(os.path.join(run, "ae_ckpt.pt"))["step"], 2)
        with self.assertRaises(SystemExit):
            with contextlib.redirect_stderr(io.StringIO()):
                train_autoencoder.parse_args(["--code-noise", "1.5"])

    def test_consistency_trains_the_encoder(self):
        run = os.path.join(self.tmp, "ae-cons")
        args = ["--run-dir", run, "--data", self.data, "--steps", "2", "--batch", "2", "--warmup", "1",
                "--eval-every", "1000", "--n-points", "256", "--n-query", "128", "--lr", "1e-2",
                "--init-from", os.path.join(self.ae1, "ae_ckpt.pt"), "--consistency", "1"]
        quiet(train_autoencoder.main, args)
        before = torch.load(os.path.join(self.ae1, "ae_ckpt.pt"))["model"]
        after = torch.load(os.path.join(run, "ae_ckpt.pt"))["model"]
        self.assertTrue(any(k.startswith("encoder.") and not torch.equal(before[k], after[k]) for k in before))
        bad = os.path.join(self.tmp, "ae-cons-bad")
        with self.assertRaises(SystemExit) as cm:   # 2 x 1000 > the toy dataset's 1024 points per shape
            quiet(train_autoencoder.main, [bad if v == run else v for v in args] + ["--n-points", "1000"])
        self.assertIn("surface points per shape", str(cm.exception))
        with self.assertRaises(SystemExit):
            with contextlib.redirect_stderr(io.StringIO()):
                train_autoencoder.parse_args(["--consistency", "1", "--train-decoder-only"])

    def test_done_records_the_commit(self):
        """ae_done.json (and gpt_done.json: same helper) name the commit the run's scripts came from."""
        with open(os.path.join(self.ae1, "ae_done.json")) as f:
            done = json.load(f)
        if run_record.git_state()["git_commit"] is None:     # not a git checkout: null with the reason
            self.assertIsNone(done["git_commit"])
            self.assertTrue(done["git_commit_reason"])
        else:   # a commit of this repository (not compared with HEAD: someone may commit meanwhile)
            self.assertRegex(done["git_commit"], "^[0-9a-f]{40}$")
            subprocess.run(["git", "-C", ROOT, "cat-file", "-e", done["git_commit"] + "^{commit}"], check=True)
            self.assertIsInstance(done["git_dirty"], bool)
        self.assertEqual(done["step"], 3)

    def test_decoder_only_needs_a_codebook(self):
        run = os.path.join(self.tmp, "ae-bad")
        args = self.ae_args(run, 2)
        with self.assertRaises(SystemExit) as cm:
            quiet(train_autoencoder.main, args[:args.index("--init-from")] + ["--train-decoder-only"])
        self.assertIn("--init-from", str(cm.exception))

    def gpt_args(self, run, sizes, extra=()):
        return ["--run-dir", run, "--data", self.data, "--steps", "2", "--batch", "2", "--warmup", "1",
                "--eval-every", "1000", "--ae-ckpt", os.path.join(self.ae1, "ae_ckpt.pt"),
                "--n-embd", str(sizes[0]), "--n-layer", str(sizes[1]), "--mlp-hidden", str(sizes[2]),
                *extra]

    def test_gpt_sizes_recorded_exported_and_checked(self):
        g1 = os.path.join(self.tmp, "gpt1")
        quiet(train_gpt.main, self.gpt_args(g1, (64, 2, 96)))
        state = torch.load(os.path.join(g1, "gpt_ckpt.pt"))
        with open(os.path.join(g1, "gpt_done.json")) as f:
            self.assertIn("git_commit", json.load(f))
        self.assertEqual(state["extra"]["gpt_sizes"],
                         {"n_embd": 64, "n_layer": 2, "n_single": 1, "mlp_hidden": 96, "head_dim": 32})
        # a second size, text encoder from the first run
        g2 = os.path.join(self.tmp, "gpt2")
        shutil.copytree(os.path.join(g1, "vocab"), os.path.join(g2, "vocab"))
        shutil.copyfile(os.path.join(g1, "tokens.npz"), os.path.join(g2, "tokens.npz"))
        quiet(train_gpt.main, self.gpt_args(g2, (96, 3, 128), ["--text-from", os.path.join(g1, "gpt_ckpt.pt"),
                                                               "--freeze-text"]))
        s1 = torch.load(os.path.join(g1, "gpt_ckpt.pt"))["model"]
        s2 = torch.load(os.path.join(g2, "gpt_ckpt.pt"))["model"]
        clip_keys = [k for k in s1 if k.startswith("clip.")]
        self.assertTrue(clip_keys)
        for k in clip_keys:
            self.assertTrue(torch.equal(s1[k], s2[k]), k)
        self.assertEqual(tuple(s2["gpt.transformer.wte.weight"].shape)[1], 96)
        # resuming with other sizes names the checkpoint
        os.remove(os.path.join(g2, "gpt_done.json"))
        with self.assertRaises(SystemExit) as cm:
            quiet(train_gpt.main, self.gpt_args(g2, (64, 2, 96)))
        self.assertIn("gpt_ckpt.pt", str(cm.exception))
        self.assertIn("differ", str(cm.exception))
        quiet(train_gpt.main, self.gpt_args(g2, (96, 3, 128), ["--freeze-text"]))
        # export: the written shapes give back the trained size
        for name in ("ae_ckpt.pt", "ae_done.json"):
            shutil.copyfile(os.path.join(self.ae1, name), os.path.join(g2, name))
        out = os.path.join(self.tmp, "export")
        quiet(export_tiny.export, g2, out)
        cfg = common.C.gpt_from_shapes(st_io.shapes(os.path.join(out, "shape_gpt.safetensors")), 64)
        self.assertEqual((cfg.n_embd, cfg.n_head, cfg.n_layer, cfg.mlp_hidden), (96, 3, 3, 128))
        # the card names the data: both stages on the same shapes -> no separate GPT entry
        with open(os.path.join(out, "model.json")) as f:
            data = json.load(f)["training_data"]
        self.assertEqual((data["train"]["per_family"], data["val"]["per_family"]), (2, 2))
        self.assertNotIn("gpt_train", data)
        # a GPT trained on a larger shape set (--data elsewhere) is recorded as such
        more = os.path.join(self.tmp, "data-more", "train")
        os.makedirs(more)
        with open(os.path.join(self.data, "train", "manifest.json")) as f:
            man = json.load(f)
        man.update(per_family=5, samples=10)
        with open(os.path.join(more, "manifest.json"), "w") as f:
            json.dump(man, f)
        done = os.path.join(g2, "gpt_done.json")
        with open(done) as f:
            rec = json.load(f)
        rec["args"]["data"] = os.path.dirname(more)
        with open(done, "w") as f:
            json.dump(rec, f)
        quiet(export_tiny.export, g2, out)
        with open(os.path.join(out, "model.json")) as f:
            data = json.load(f)["training_data"]
        self.assertEqual((data["train"]["per_family"], data["gpt_train"]["per_family"]), (2, 5))
        self.assertIn("gpt_train_note", data)

    def test_focus_words_weight_the_draws_and_refuse_unknown_words(self):
        g1 = os.path.join(self.tmp, "gpt1")
        if not os.path.exists(os.path.join(g1, "tokens.npz")):
            quiet(train_gpt.main, self.gpt_args(g1, (64, 2, 96)))
        caps = [c.split("|") for c in np.load(os.path.join(g1, "tokens.npz"))["train_captions"]]
        word = next(w for row in caps for c in row for w in c.split() if w in ("small", "tiny", "big", "large"))
        n_with = sum(1 for row in caps if any(word in c.split() for c in row))
        self.assertTrue(0 < n_with < len(caps), (word, caps))
        run = os.path.join(self.tmp, "focus")
        shutil.copytree(os.path.join(g1, "vocab"), os.path.join(run, "vocab"))
        shutil.copyfile(os.path.join(g1, "tokens.npz"), os.path.join(run, "tokens.npz"))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            train_gpt.main(self.gpt_args(run, (64, 2, 96), ["--focus-words", word, "--focus-weight", "3"]))
        share = 3 * n_with / (3 * n_with + len(caps) - n_with)
        self.assertIn(f"{n_with} of {len(caps)} shapes drawn x3 ({share:.1%} of draws)", buf.getvalue())
        os.remove(os.path.join(run, "gpt_done.json"))
        os.remove(os.path.join(run, "gpt_ckpt.pt"))
        with self.assertRaises(SystemExit) as cm:
            quiet(train_gpt.main, self.gpt_args(run, (64, 2, 96), ["--focus-words", "zebra"]))
        self.assertIn("no training caption", str(cm.exception))
        with self.assertRaises(SystemExit) as cm:
            quiet(train_gpt.main, self.gpt_args(run, (64, 2, 96), ["--focus-words", word, "--focus-weight", "0.5"]))
        self.assertIn("--focus-weight", str(cm.exception))

    def test_text_from_rejects_other_checkpoints(self):
        run = os.path.join(self.tmp, "gpt-bad")
        bogus = os.path.join(self.tmp, "bogus.pt")
        torch.save({"model": {"gpt.x": torch.zeros(1)}}, bogus)
        with self.assertRaises(SystemExit) as cm:
            quiet(train_gpt.main, self.gpt_args(run, (64, 2, 96), ["--text-from", bogus]))
        self.assertIn("no clip.*", str(cm.exception))


class ShipRuleTest(unittest.TestCase):
    def card(self, folder, iou, fam, checks, extra_file=None):
        os.makedirs(folder, exist_ok=True)
        metrics = {} if iou is None else {"autoencoder_iou_heldout": iou, "prompt_family_match_rate": fam,
                                          "prompt_property_checks_passed": checks}
        with open(os.path.join(folder, "model.json"), "w") as f:
            json.dump({"metrics": metrics}, f)
        if extra_file:
            os.makedirs(os.path.join(folder, os.path.dirname(extra_file)), exist_ok=True)
            open(os.path.join(folder, extra_file), "w").close()

    def test_rule(self):
        old = {"autoencoder_iou_heldout": 0.76, "prompt_family_match_rate": 0.61,
               "prompt_property_checks_passed": "5/6"}
        better = dict(old, autoencoder_iou_heldout=0.86)
        self.assertTrue(ship.is_better(better, old))
        self.assertFalse(ship.is_better(old, old))                                    # nothing better
        self.assertFalse(ship.is_better(dict(better, prompt_family_match_rate=0.6), old))
        self.assertFalse(ship.is_better(dict(better, prompt_property_checks_passed="4/6"), old))
        self.assertTrue(ship.is_better(dict(old, prompt_property_checks_passed="6/6"), old))  # a check more
        self.assertFalse(ship.is_better(dict(old, prompt_property_checks_passed="6/6",
                                             prompt_family_match_rate=0.6), old))

    def test_replace_carries_diffusion_and_refuses_unevaluated(self):
        with tempfile.TemporaryDirectory() as tmp:
            stage, shipped = os.path.join(tmp, "stage"), os.path.join(tmp, "shipped")
            self.card(stage, 0.86, 0.70, "5/6", "shape_gpt.safetensors")
            self.card(shipped, 0.76, 0.61, "5/6", "diffusion/model.safetensors")
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(ship.main(["--stage", stage, "--shipped", shipped]), 0)
                self.assertTrue(os.path.exists(os.path.join(shipped, "shape_gpt.safetensors")))
                self.assertTrue(os.path.exists(os.path.join(shipped, "diffusion", "model.safetensors")))
                self.assertEqual(sorted(os.listdir(tmp)), ["shipped", "stage"])  # no .tmp / .old left
                self.assertEqual(ship.main(["--stage", stage, "--shipped", shipped]), 1)  # equal: kept
            self.card(stage, None, None, None)
            with contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(ship.main(["--stage", stage, "--shipped", shipped]), 2)
            self.assertIn("model.json", err.getvalue())


if __name__ == "__main__":
    unittest.main()
