#!/usr/bin/python3
"""Weight-averages ("model soup") the shape GPTs of exported tessera-tiny folders that share one
lineage (one fine-tuned from the other: same sizes, same frozen text encoder and codes). The output
folder is a copy of the first input with shape_gpt.safetensors replaced by sum_i w_i * GPT_i (weights
normalised). The shape tokenizer and vocabulary must be identical in every input, and so must the text
encoder except for the token-embedding rows past the end-of-text id (the diffusion vocabulary extension, which
the shape GPT never reads): the output keeps the first input's.

  /usr/bin/python3 tools/train/average_gpt.py --out DIR IN1:W1 IN2:W2 [...]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tessera_ref import st_io  # noqa: E402

SHARED = ("shape_tokenizer.safetensors", "vocab.json", "merges.txt")
TEXT = os.path.join("text_encoder", "model.safetensors")
EMB = "text_model.embeddings.token_embedding.weight"


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _check_text(first, other):
    # the base vocabulary ends with CLIP's special tokens; the extension rows follow the end-of-text id
    with open(os.path.join(first, "text_encoder", "config.json")) as f:
        n_vocab = int(json.load(f)["eos_token_id"]) + 1
    a, _ = st_io.load(os.path.join(first, TEXT))
    b, _ = st_io.load(os.path.join(other, TEXT))
    if set(a) != set(b):
        raise ValueError(f"{os.path.join(other, TEXT)}: tensor names differ from {os.path.join(first, TEXT)}'s")
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if k == EMB:
            x, y = x[:n_vocab], y[:n_vocab]
        if x.shape != y.shape or not np.array_equal(x, y):
            raise ValueError(f"{os.path.join(other, TEXT)}: {k} differs from {os.path.join(first, TEXT)}: the "
                             "GPTs do not share one text encoder and cannot be averaged")


def average(inputs, out):
    """inputs: [(folder, weight)]; writes out (replaced if it exists)."""
    if len(inputs) < 2:
        raise ValueError("need at least two folders to average")
    if any(w < 0 for _, w in inputs) or sum(w for _, w in inputs) <= 0:
        raise ValueError("weights must be >= 0 with a positive sum")
    first = inputs[0][0]
    for d, _ in inputs:
        for name in ("shape_gpt.safetensors", TEXT) + SHARED:
            if not os.path.exists(os.path.join(d, name)):
                raise FileNotFoundError(f"{os.path.join(d, name)}: missing (not an exported tessera-tiny folder)")
        for name in SHARED:
            if _digest(os.path.join(d, name)) != _digest(os.path.join(first, name)):
                raise ValueError(f"{os.path.join(d, name)} differs from {os.path.join(first, name)}: the GPTs "
                                 "do not share one shape tokenizer / vocabulary and cannot be averaged")
        _check_text(first, d)
    total = sum(w for _, w in inputs)
    acc, meta = None, None
    for d, w in inputs:
        t, m = st_io.load(os.path.join(d, "shape_gpt.safetensors"))
        if acc is None:
            acc, meta, ref = {k: np.asarray(v, np.float64) * (w / total) for k, v in t.items()}, m, d
            continue
        if set(t) != set(acc):
            raise ValueError(f"{d}/shape_gpt.safetensors: tensor names differ from {ref}'s")
        for k, v in t.items():
            if tuple(v.shape) != acc[k].shape:
                raise ValueError(f"{d}/shape_gpt.safetensors: {k} has shape {tuple(v.shape)}, "
                                 f"{ref} has {acc[k].shape}")
            acc[k] += np.asarray(v, np.float64) * (w / total)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(first, tmp)
    st_io.save(os.path.join(tmp, "shape_gpt.safetensors"), {k: v.astype(np.float32) for k, v in acc.items()},
               metadata=meta)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("inputs", nargs="+", help="FOLDER:WEIGHT")
    a = p.parse_args(argv)
    inputs = []
    for s in a.inputs:
        d, _, w = s.rpartition(":")
        try:
            inputs.append((d, float(w)))
        except ValueError:
            p.error(f"{s!r}: expected FOLDER:WEIGHT")
    try:
        average(inputs, a.out)
    except (OSError, ValueError) as e:
        sys.exit(f"average_gpt: {e}")
    print(f"wrote {a.out}: " + " + ".join(f"{w:g} x {d}" for d, w in inputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
