#!/usr/bin/python3
"""The inverse of export_tiny.py: turns an exported tessera-tiny folder (the shipped safetensors) back into
the training checkpoints a fine-tune starts from, in a run folder laid out as the training scripts write it:

  RUN_DIR/ae_ckpt.pt     shape tokenizer (TrainShapeTokenizer state dict, VQ on): train_gpt.py --ae-ckpt,
                         train_autoencoder.py --init-from (e.g. --train-decoder-only)
  RUN_DIR/gpt_ckpt.pt    text encoder + GPT (train_gpt.Joint state dict, clip.* and gpt.*, with
                         extra.gpt_sizes): train_gpt.py --init-from / --text-from
  RUN_DIR/vocab/         vocab.json + merges.txt of the BASE vocabulary (the one the text encoder was
                         trained with)
  RUN_DIR/{ae,gpt}_done.json  records saying where the weights came from (no training ran)

The vocabulary extension (text_encoder/extension.json: whole-word colour / material tokens learned with the
diffusion UNet, image-only: the shape GPT never reads them) is cut off: the text encoder's token embedding
keeps its first base_vocab_size rows and the vocabulary its base tokens and merges, so train_gpt.py builds
the same text encoder it trained. export_tiny.py carries the extension back onto a re-export whose text
encoder kept the base weights (a GPT trained with --freeze-text).

--check (default on) verifies the round trip: export_tiny of the imported checkpoints, with the extension
carried back, gives every tensor of the source folder bit for bit, and the same vocab.json / merges.txt.

  /usr/bin/python3 tools/train/import_tiny.py --run-dir tools/train/records/tessera-tiny-shipped \\
      [--model-dir assets/models/tessera-tiny] [--no-check]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common, export_tiny, train_gpt  # noqa: E402
from tessera_ref import st_io  # noqa: E402

MODEL_DIR = export_tiny.OUT_DIR
EMB = "text_model.embeddings.token_embedding.weight"
FILES = ("shape_gpt.safetensors", "shape_tokenizer.safetensors", os.path.join("text_encoder", "model.safetensors"))


def _st(path):
    arrays, _ = st_io.load(path)
    return {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}


def base_vocabulary(model_dir):
    """(vocab dict, merges text, base size): the vocabulary without the extension's tokens and merges."""
    with open(os.path.join(model_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(model_dir, "merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    ext_path = os.path.join(model_dir, "text_encoder", "extension.json")
    if not os.path.exists(ext_path):
        return vocab, "\n".join(lines), len(vocab)
    with open(ext_path) as f:
        ext = json.load(f)
    base, base_merges = int(ext["base_vocab_size"]), int(ext["base_merges"])
    cut = {t: i for t, i in vocab.items() if i < base}
    if len(cut) != base or sorted(cut.values()) != list(range(base)):
        raise SystemExit(f"{model_dir}/vocab.json: ids 0..{base - 1} are not the base vocabulary of {ext_path}")
    if any(vocab[t] < base for t in ext["tokens"]):
        raise SystemExit(f"{ext_path}: an extension token has a base id")
    header = [ln for ln in lines if ln.startswith("#version")]
    merges = [ln for ln in lines if ln and not ln.startswith("#version") and len(ln.split()) == 2]
    if len(merges) < base_merges:
        raise SystemExit(f"{model_dir}/merges.txt: {len(merges)} merges, the extension says {base_merges} base ones")
    text = "\n".join(header + merges[:base_merges]) + "\n"
    return cut, text, base


def import_folder(model_dir, run_dir):
    """Writes RUN_DIR's checkpoints, base vocabulary and done records from the exported model_dir."""
    with open(os.path.join(model_dir, "model.json")) as f:
        card = json.load(f)
    os.makedirs(os.path.join(run_dir, "vocab"), exist_ok=True)
    vocab, merges_text, base = base_vocabulary(model_dir)
    with open(os.path.join(run_dir, "vocab", "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(run_dir, "vocab", "merges.txt"), "w", encoding="utf-8") as f:
        f.write(merges_text)

    # shape tokenizer: the real keys + the training-only code_usage buffer (all codes "used")
    s_sd = _st(os.path.join(model_dir, "shape_tokenizer.safetensors"))
    _, s_meta = st_io.load(os.path.join(model_dir, "shape_tokenizer.safetensors"))
    queries = (s_meta or {}).get("encoder_queries", "fps")
    shape = common.TrainShapeTokenizer(common.shape_config_of_state(s_sd), queries=queries)
    missing, unexpected = shape.load_state_dict(s_sd, strict=False)
    if unexpected or [m for m in missing if m != "code_usage"]:
        raise SystemExit(f"{model_dir}/shape_tokenizer.safetensors: keys differ from tessera-tiny's "
                         f"(missing {missing}, unexpected {unexpected})")
    shape.code_usage.fill_(1.0)
    gen = torch.Generator().manual_seed(0)
    note = f"imported from {os.path.relpath(os.path.abspath(model_dir), common.REPO)} by tools/train/import_tiny.py"
    ae_steps = int(card.get("training", {}).get("autoencoder_steps", 0))
    torch.save({"model": shape.state_dict(), "opt": None, "step": ae_steps, "gen": gen.get_state(),
                "torch_rng": torch.get_rng_state(), "extra": {"vq_on": True, "imported_from": note,
                                                              "encoder_queries": queries}},
               os.path.join(run_dir, "ae_ckpt.pt"))

    # GPT sizes from the card's architecture (heads are not in the tensor shapes)
    arch = card["architecture"]["shape_gpt"]
    sizes = {"n_embd": int(arch["n_embd"]), "n_layer": int(arch["n_layer"]),
             "n_single": int(arch["n_single_layer"]), "mlp_hidden": int(arch["mlp_hidden"]),
             "head_dim": int(arch["n_embd"]) // int(arch["n_head"])}
    tok, clip, gpt = train_gpt.build_models(os.path.join(run_dir, "vocab"),
                                            shape.codebook_vectors().detach(), 0, sizes)
    if len(tok.encoder) != base:
        raise SystemExit(f"internal error: base vocabulary {len(tok.encoder)} != {base}")
    g_sd = _st(os.path.join(model_dir, "shape_gpt.safetensors"))
    got = common.C.gpt_from_shapes({k: tuple(v.shape) for k, v in g_sd.items()}, shape.cfg.num_latents)
    if common.C.as_dict(got) != common.C.as_dict(gpt.cfg):
        raise SystemExit(f"{model_dir}/shape_gpt.safetensors: config {common.C.as_dict(got)} differs from "
                         f"the card's sizes {sizes} ({common.C.as_dict(gpt.cfg)})")
    g_sd["codebook_normalized"] = gpt.codebook_normalized.clone()
    gpt.load_state_dict(g_sd, strict=True)
    c_sd = _st(os.path.join(model_dir, "text_encoder", "model.safetensors"))
    c_sd[EMB] = c_sd[EMB][:base].clone()
    clip.load_state_dict(c_sd, strict=True)
    joint = train_gpt.Joint(clip, gpt)
    gpt_steps = int(card.get("training", {}).get("gpt_steps", 0))
    torch.save({"model": joint.state_dict(), "opt": None, "step": gpt_steps, "gen": gen.get_state(),
                "torch_rng": torch.get_rng_state(), "extra": {"gpt_sizes": sizes, "imported_from": note}},
               os.path.join(run_dir, "gpt_ckpt.pt"))
    training = card.get("training", {})
    for stage, key, steps in (("ae", "autoencoder", ae_steps), ("gpt", "gpt", gpt_steps)):
        rec = {"step": steps, "imported_from": note, "git_commit": None,
               "git_commit_reason": "no training ran: the weights are the exported model's",
               "args": training.get(key, {})}
        if stage == "gpt" and "gpt_average" in training:
            rec["gpt_average"] = training["gpt_average"]
        with open(os.path.join(run_dir, f"{stage}_done.json"), "w") as f:
            json.dump(rec, f, indent=2)
    return {"base_vocab_size": base, "text_rows_shipped": int(_st(os.path.join(
        model_dir, "text_encoder", "model.safetensors"))[EMB].shape[0]), "gpt_sizes": sizes}


WTE = "transformer.wte.weight"
DERIVED_TOL = 1e-5


def compare_folders(a, b, notes=None):
    """[] when every tensor of the three safetensors files and vocab.json / merges.txt are identical, except
    the GPT's wte rows 0..K-1: those are derived (shape_proj(normalized codebook), recomputed at load time
    by the engine and the reference, and rewritten by export_tiny), so they only have to agree within
    DERIVED_TOL (a GPT made by average_gpt.py holds the average of two such products, not the product of
    the averaged weights: rounding-level differences). `notes` (a list) gets that difference."""
    diffs = []
    for name in FILES:
        x, _ = st_io.load(os.path.join(a, name))
        y, _ = st_io.load(os.path.join(b, name))
        if set(x) != set(y):
            diffs.append(f"{name}: tensor names differ ({sorted(set(x) ^ set(y))})")
            continue
        for k in sorted(x):
            u, v = np.asarray(x[k]), np.asarray(y[k])
            if name == "shape_gpt.safetensors" and k == WTE and u.shape == v.shape:
                k_rows = u.shape[0] - 3          # codebook rows; BOS / EOS / PAD follow
                d = float(np.abs(u[:k_rows].astype(np.float64) - v[:k_rows]).max())
                if notes is not None:
                    notes.append(f"{name}: {k} rows 0..{k_rows - 1} (derived, recomputed at load) "
                                 f"max |d| {d:.3g}; rows {k_rows}.. identical: "
                                 f"{bool(np.array_equal(u[k_rows:], v[k_rows:]))}")
                if d > DERIVED_TOL or not np.array_equal(u[k_rows:], v[k_rows:]):
                    diffs.append(f"{name}: {k} differs (derived rows max |d| {d:.3g})")
                continue
            if u.dtype != v.dtype or u.shape != v.shape or not np.array_equal(u, v):
                diffs.append(f"{name}: {k} differs ({u.dtype}{list(u.shape)} vs {v.dtype}{list(v.shape)}"
                             + (f", max |d| {float(np.abs(u.astype(np.float64) - v).max()):.3g}"
                                if u.shape == v.shape else "") + ")")
    for name in ("vocab.json", "merges.txt", os.path.join("text_encoder", "extension.json")):
        pa, pb = os.path.join(a, name), os.path.join(b, name)
        if os.path.exists(pa) != os.path.exists(pb):
            diffs.append(f"{name}: in one folder only")
        elif os.path.exists(pa):
            if name == "vocab.json":
                same = json.load(open(pa, encoding="utf-8")) == json.load(open(pb, encoding="utf-8"))
            else:
                same = open(pa, encoding="utf-8").read() == open(pb, encoding="utf-8").read()
            if not same:
                diffs.append(f"{name}: differs")
    return diffs


def round_trip(model_dir, run_dir):
    """export_tiny of RUN_DIR (+ the extension of model_dir carried back) vs model_dir."""
    with tempfile.TemporaryDirectory(prefix="tessera-import-") as tmp:
        out = os.path.join(tmp, "export")
        export_tiny.export(run_dir, out)
        if os.path.exists(os.path.join(model_dir, "text_encoder", "extension.json")):
            export_tiny.carry_vocab_extension(out, model_dir)
        notes = []
        return compare_folders(out, model_dir, notes), notes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=MODEL_DIR)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--no-check", action="store_true", help="skip the export round trip")
    a = p.parse_args(argv)
    info = import_folder(a.model_dir, a.run_dir)
    print(f"imported {a.model_dir} into {a.run_dir}: {info}")
    if not a.no_check:
        diffs, notes = round_trip(a.model_dir, a.run_dir)
        for n in notes:
            print("note:", n)
        if diffs:
            print("round trip FAILED:\n  " + "\n  ".join(diffs))
            return 1
        print("round trip: export_tiny of the imported checkpoints gives back every tensor (but the derived "
              "wte code rows, see the note), the vocabulary and the extension bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
