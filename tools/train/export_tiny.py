#!/usr/bin/python3
"""Stage 3 of tessera-tiny: writes the shipped model folder from the training checkpoints.

  assets/models/tessera-tiny/
    shape_gpt.safetensors            Cube GPT (v0.5 layout: bbox_proj present), real key names, F32
    shape_tokenizer.safetensors      shape tokenizer (OneDAutoEncoder keys incl. the encoder), F32
    text_encoder/model.safetensors   CLIP text model (HF keys text_model.*), F32
    text_encoder/config.json         HF CLIPTextConfig (num_attention_heads: heads are not in shapes)
    vocab.json, merges.txt           the tiny CLIP-format BPE vocabulary
    model.json                       model card: families, sizes, special ids, training data, seed;
                                     evaluate.py adds the metrics

Every file is checked after writing: the configs inferred from the tensor shapes (tessera_ref.config)
must equal the training configs. Usage: /usr/bin/python3 tools/train/export_tiny.py [--allow-unfinished]
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common  # noqa: E402
from train import train_gpt  # noqa: E402
from tessera_ref import st_io  # noqa: E402

OUT_DIR = os.path.join(common.REPO, "assets", "models", "tessera-tiny")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default=common.RUN_DIR)
    p.add_argument("--out", default=OUT_DIR)
    p.add_argument("--allow-unfinished", action="store_true",
                   help="export the latest checkpoints even if a stage has not finished")
    return p.parse_args(argv)


def _load_state(path):
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: checkpoint missing")
    return torch.load(path, map_location="cpu")


def export(run_dir, out, allow_unfinished=False):
    for stage in ("ae", "gpt"):
        if not allow_unfinished and not os.path.exists(os.path.join(run_dir, f"{stage}_done.json")):
            raise RuntimeError(f"{run_dir}/{stage}_done.json missing: stage '{stage}' has not finished "
                               "(--allow-unfinished exports the latest checkpoint)")
    ae_state = _load_state(os.path.join(run_dir, "ae_ckpt.pt"))
    # The shape tokenizer's config comes from its tensor shapes (the v2 recipe has 64 Fourier
    # frequencies per axis, the earlier runs 32), its encoder query mode from the checkpoint.
    shape = common.shape_tokenizer_from_checkpoint(ae_state)
    shape_cfg = shape.cfg
    vocab_dir = os.path.join(run_dir, "vocab")
    gpt_state = _load_state(os.path.join(run_dir, "gpt_ckpt.pt"))
    # The GPT's size is recorded in its checkpoint (train_gpt.py --n-embd ...; older runs: the default).
    sizes = (gpt_state.get("extra") or {}).get("gpt_sizes")
    tok, clip, gpt = train_gpt.build_models(vocab_dir, shape.codebook_vectors().detach(), 0, sizes)
    joint = train_gpt.Joint(clip, gpt)
    joint.load_state_dict(gpt_state["model"])

    os.makedirs(os.path.join(out, "text_encoder"), exist_ok=True)
    meta = {"format": "pt", "model": "tessera-tiny"}
    shape_sd = common.strip_training_buffers(shape.state_dict())
    st_io.save_torch_state_dict(os.path.join(out, "shape_tokenizer.safetensors"), shape_sd,
                                shape_tokenizer_metadata(shape, meta))
    st_io.save_torch_state_dict(os.path.join(out, "shape_gpt.safetensors"), gpt.export_state_dict(), meta)
    st_io.save_torch_state_dict(os.path.join(out, "text_encoder", "model.safetensors"),
                                clip.state_dict(), meta)
    with open(os.path.join(out, "text_encoder", "config.json"), "w") as f:
        json.dump(common.C.clip_hf_config_json(clip.cfg), f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(vocab_dir, name), os.path.join(out, name))

    # Round trip: configs inferred from the written shapes must equal the training configs.
    got_shape = common.C.shape_from_shapes(st_io.shapes(os.path.join(out, "shape_tokenizer.safetensors")))
    got_gpt = common.C.gpt_from_shapes(st_io.shapes(os.path.join(out, "shape_gpt.safetensors")),
                                       num_latents=got_shape.num_latents)
    got_clip = common.C.clip_from_shapes(st_io.shapes(os.path.join(out, "text_encoder", "model.safetensors")),
                                         os.path.join(out, "text_encoder", "config.json"))
    for what, a, b in (("shape tokenizer", got_shape, shape_cfg), ("GPT", got_gpt, gpt.cfg),
                       ("text encoder", got_clip, clip.cfg)):
        if common.C.as_dict(a) != common.C.as_dict(b):
            raise RuntimeError(f"{what}: config inferred from the exported shapes {common.C.as_dict(a)} "
                               f"differs from the trained one {common.C.as_dict(b)}")

    ae_args = _done_args(run_dir, "ae")
    gpt_args = _done_args(run_dir, "gpt")
    data_man = {}
    def manifest(folder):
        p = os.path.join(folder, "manifest.json")
        if not os.path.exists(p):
            return None
        with open(p) as f:
            m = json.load(f)
        data_man.setdefault("families", m["families"])
        return {k: m[k] for k in ("seed", "split", "per_family", "samples", "n_surface", "n_occ",
                                  "near_fraction", "sigmas") if k in m}
    # each stage's recorded --data (absolute or relative to the repository root)
    ae_rec = ae_args.get("data") or common.DATA_DIR
    gpt_rec = gpt_args.get("data") or common.DATA_DIR
    ae_data = ae_rec if os.path.isdir(ae_rec) else common.DATA_DIR
    for split in ("train", "val"):
        m = manifest(os.path.join(ae_data, split))
        if m:
            data_man[split] = m
    if gpt_rec != ae_rec and os.path.realpath(gpt_rec) != os.path.realpath(ae_data):
        # the GPT was trained on other shapes than the autoencoder
        data_man["gpt_train"] = manifest(os.path.join(gpt_rec, "train")) or {
            "folder": gpt_rec, "note": "manifest not found at export"}
    if "gpt_train" in data_man:
        data_man["gpt_train_note"] = ("the GPT's training shapes (encoded with the shape tokenizer's "
                                      "encoder); the autoencoder was trained on 'train'")
    card_path = os.path.join(out, "model.json")
    old = {}
    if os.path.exists(card_path):
        with open(card_path) as f:
            old = json.load(f)
    n_params = {"shape_tokenizer": sum(int(np.prod(v.shape)) for v in shape_sd.values()),
                "shape_gpt": sum(int(np.prod(v.shape)) for v in gpt.export_state_dict().values()),
                "text_encoder": sum(p.numel() for p in clip.parameters())}
    card = {
        "name": "tessera-tiny",
        "description": "Tiny text-to-shape model with the exact Cube 3D architecture and tensor names "
                       "(DualStreamRoformer GPT v0.5 style with a bounding-box token, OneDAutoEncoder "
                       "shape tokenizer, CLIP text encoder), trained on Tessera's procedural shape "
                       "families on a CPU.",
        "families": data_man.get("families", []),
        "architecture": {
            "shape_gpt": common.C.as_dict(gpt.cfg),
            "shape_tokenizer": common.C.as_dict(shape_cfg),
            "text_encoder": common.C.as_dict(clip.cfg),
        },
        "parameters": n_params,
        "tokens": {
            "num_latents": shape_cfg.num_latents,
            "codebook_size": shape_cfg.num_codes,
            "fill_token_id": common.fill_code_id(shape_cfg),
            "fill_token_note": "the last codebook entry is a learned 'fill' code, never produced by the "
                               "encoder: a prefix of k generated tokens followed by fill_token_id up to "
                               "num_latents decodes to a coarse version of the shape (live preview)",
            "bos_id": gpt.cfg.bos_id, "eos_id": gpt.cfg.eos_id, "pad_id": gpt.cfg.pad_id,
        },
        "defaults": {
            "resolution": 65,
            "resolution_note": "final-mesh lattice used when the user does not choose one: the model was "
                               "trained on occupancy at the scale of a 64^3 grid, so finer lattices "
                               "only cost time (any 2^k+1 still works)",
            # The coarse-to-fine extraction's first lattice and its near-surface margin (logits of
            # this model): on the 91 first prompts every mesh keeps the dense lattice's triangle
            # count at 65 and 33 with 2-4x fewer queries (engine/shape/pipeline.h, MeshOptions).
            "coarse_resolution": 17,
            "near_surface_logit": 1.0,
        },
        "conditioning": {
            "text": "CLIP text encoder over 77 positions, padded with EOS, attention mask on the padding "
                    "(as Cube 3D); the empty prompt is the unconditional branch",
            "bbox": "v0.5 bbox token: bbox_xyz = the shape's extents (x, y, z; +Y up) divided by the "
                    "largest one, i.e. proportions only; (0, 0, 0) = no box (the default and the "
                    "unconditional branch)",
            "guidance": "classifier-free guidance as Cube 3D: l = (1+g) l_cond - g l_uncond, "
                        "g = scale * (N - i) / N, default scale 3.0; greedy decoding",
        },
        "encoder_queries": ENCODER_QUERIES_NOTE[shape.queries],
        "coordinates": "+Y up, shapes centred in [-0.95, 0.95]^3, occupancy queried in [-1.05, 1.05]^3",
        "training_data": data_man,
        "training": {"seed": 0, "autoencoder": ae_args, "gpt": gpt_args,
                     "autoencoder_steps": int(ae_state["step"]), "gpt_steps": int(gpt_state["step"]),
                     "pipeline": "tools/train (README.md there)",
                     "heldout_prompt_template": train_gpt.HELDOUT_TEMPLATE.strip() + " {np}"},
        "metrics": old.get("metrics", {}),
    }
    with open(card_path, "w") as f:
        json.dump(card, f, indent=2, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print(f"exported {out}: {total / 1e6:.1f} MB; parameters {n_params}")
    return card


ENCODER_QUERIES_NOTE = {
    "fps": "latent query l = encoder.query[1 + l] + feat_in(p_l) where p_l is the l-th farthest-point sample "
           "of the input surface points (first: the highest point); Cube 3D uses encoder.query alone. Only the "
           "Python tools run the encoder.",
    "lattice": "latent query l = encoder.query[1 + l] + feat_in(Fourier(q_l), normal 0) where q_l is the l-th "
               "point of a fixed 4x4x4 lattice in coarse-to-fine order scaled to the input points' bounds "
               "(tools/train/common.py query_lattice; v2 recipe); Cube 3D uses encoder.query alone. Only the "
               "Python tools run the encoder.",
    "learned": "learned latent queries encoder.query, as Cube 3D. Only the Python tools run the encoder.",
}


def shape_tokenizer_metadata(shape, meta):
    """The safetensors metadata of shape_tokenizer.safetensors: `meta` plus the encoder's query mode
    (encoder_queries; tools/train/evaluate.load_exported reads it back; absent = fps). The engine reads
    no metadata: it decodes token ids and never runs the encoder."""
    return {**meta, "encoder_queries": shape.queries}


def _done_args(run_dir, stage):
    p = os.path.join(run_dir, f"{stage}_done.json")
    if os.path.exists(p):
        with open(p) as f:
            return json.load(f).get("args", {})
    return {"unfinished": True}


def stash_vocab_extension(out, keep, shipped=OUT_DIR):
    """Copies the vocabulary extension that a re-export to `out` should keep (tools/train/diffusion/
    extend_vocab.py: whole-word colour/material tokens learned with the diffusion UNet) into `keep`:
    out's own when it has one (re-exporting over the shipped model), else the shipped model's.
    Returns the folder to carry it from, or None."""
    for src in (out, shipped):
        if os.path.exists(os.path.join(src, "text_encoder", "extension.json")):
            os.makedirs(os.path.join(keep, "text_encoder"), exist_ok=True)
            for name in ("vocab.json", "merges.txt", "text_encoder/model.safetensors",
                         "text_encoder/config.json", "text_encoder/extension.json"):
                shutil.copyfile(os.path.join(src, name), os.path.join(keep, name))
            return keep
    return None


def carry_vocab_extension(out, src):
    """The extension of `src` into the re-export `out` when out's text encoder has the same base
    weights (a GPT trained with --freeze-text); otherwise left out, with a note (the diffusion model
    was conditioned on the old text encoder: retrain it for the new one)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "diffusion"))
    import extend_vocab  # noqa: E402
    try:
        extend_vocab.copy_rows(out, src)
    except SystemExit as e:
        print(f"note: the vocabulary extension is not carried to {out}: {e}")


def main(argv=None):
    import tempfile
    a = parse_args(argv)
    with tempfile.TemporaryDirectory() as keep:
        src = stash_vocab_extension(a.out, keep)
        export(a.run_dir, a.out, a.allow_unfinished)
        if src is not None:
            carry_vocab_extension(a.out, src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
