#!/usr/bin/python3
"""Writes the deterministic parity fixtures under tests/fixtures/parity/ (see the README.md written there).

Tiny random-weight checkpoints with the real key names (Cube GPT v0.5-style with bbox and v0.1-style
without, shape tokenizer, CLIP text model) plus expected.safetensors: inputs and per-layer outputs of the
fp32 reference (tools/tessera_ref). Single-threaded, fixed seeds: two runs give byte-identical files.

Usage: /usr/bin/python3 tools/make_fixtures.py [--out DIR]      (a few seconds)
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tessera_ref import config as C  # noqa: E402
from tessera_ref import randomize_, st_io  # noqa: E402
from tessera_ref.clip_text import ClipTextModel, tokens_for_ids  # noqa: E402
from tessera_ref.cube_gpt import CubeGPT  # noqa: E402
from tessera_ref.shape_tokenizer import ShapeTokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDANCE = 3.0
TEACHER_STEPS = 8
N_POINTS = 256
N_FOURIER_POINTS = 32
N_SURFACE_POINTS = 128
BBOX = [0.5, 1.0, 0.25]

EXPECTED_DOC = [
    ("clip.input_ids", "I32 [2,77]", "row 0: [BOS 998, 5, 17, 42, 311, 7, 996, EOS 999] padded with EOS; "
     "row 1: the empty prompt [BOS, EOS, EOS...] (the unconditional branch)"),
    ("clip.attention_mask", "I32 [2,77]", "1 on BOS..first EOS, 0 on padding"),
    ("clip.hidden_states.N", "F32 [2,77,32]", "N=0: embeddings output; N=1..2: output of layer N-1 "
     "(before final_layer_norm), with the causal + key padding mask"),
    ("clip.last_hidden_state", "F32 [2,77,32]", "after final_layer_norm, with the attention mask (what "
     "Cube uses)"),
    ("clip.last_hidden_state_nomask", "F32 [2,77,32]", "same without the padding mask (causal only)"),
    ("shape.codebook_normalized", "F32 [64,8]", "RMSNorm(codebook*cb_weight+cb_bias)*norm.weight"),
    ("gpt.bbox", "F32 [2,3]", f"row 0 {BBOX} (cond), row 1 zeros (uncond)"),
    ("gpt.cond", "F32 [2,78,64]", "text_proj(clip.last_hidden_state) ++ bbox_proj(gpt.bbox): rows "
     "[cond ; uncond]"),
    ("gpt.wte_installed", "F32 [67,64]", "wte after the load-time step wte[0:64] = "
     "shape_proj(shape.codebook_normalized); rows 64..66 (BOS/EOS/PAD) from the file"),
    ("gpt.teacher_ids", "I32 [2,9]", "BOS 64 then 8 fixed codes (same in both rows)"),
    ("gpt.full_logits", "F32 [2,9,67]", "uncached forward over gpt.teacher_ids with gpt.cond"),
    ("gpt.full.dual.I.x / gpt.full.dual.I.c / gpt.full.single.0.x / gpt.full.ln_f", "F32",
     "per-block outputs of that forward: shape stream [2,9,64], condition stream [2,78,64] (no .c after "
     "the last, condition-pre-only dual block 1), ln_f output"),
    ("gpt.prefill_logits", "F32 [2,1,67]", "KV-cache prefill of condition + BOS"),
    ("gpt.decode_logits_cached", "F32 [2,8,67]", "then one token per step (teacher ids 1..8) through "
     "the KV cache"),
    ("gpt.decode_logits_nocache", "F32 [2,8,67]", "the same steps by full recompute of the prefix "
     "(equal to the cached ones up to rounding)"),
    ("gpt.guidance_scale", "F32 [1]", f"{GUIDANCE}"),
    ("gpt.greedy_tokens", "I32 [1,16]", "greedy generation, 16 steps, guidance g = 3*(16-i)/16 "
     "applied as (1+g) l_cond - g l_uncond on logits restricted to codes 0..63"),
    ("gpt.greedy_logits", "F32 [16,1,64]", "the guided, restricted logits of each step"),
    ("gpt.greedy_tokens_noguidance", "I32 [1,16]", "greedy, cond row only, no guidance"),
    ("gpt_v01.cond", "F32 [2,77,64]", "v0.1-style GPT (no bbox_proj): text_proj(clip.last_hidden_state)"),
    ("gpt_v01.wte_installed", "F32 [67,64]", "as gpt.wte_installed for the v0.1-style GPT"),
    ("gpt_v01.full_logits", "F32 [2,9,67]", "uncached forward over gpt.teacher_ids"),
    ("gpt_v01.greedy_tokens", "I32 [1,16]", "greedy with guidance 3.0"),
    ("shape.ids", "I32 [1,16]", "= gpt.greedy_tokens"),
    ("shape.decoder.z", "F32 [1,16,64]", "c_out(shape.codebook_normalized[ids])"),
    ("shape.decoder.input", "F32 [1,16,64]", "z + decoder.positional_encodings"),
    ("shape.decoder.blocks.I", "F32 [1,16,64]", "output of decoder block I (I=0,1)"),
    ("shape.latents", "F32 [1,16,64]", "decode_tokens(shape.ids) (= last block output)"),
    ("shape.points", "F32 [1,256,3]", "query points: the 8 corners of [-1.05,1.05]^3, the origin, then "
     "uniform random in the cube"),
    ("shape.fourier_embedding", "F32 [1,32,771]", "Fourier embedding of the first 32 points "
     "(fixed carrier + learned weight)"),
    ("shape.occupancy_logits", "F32 [1,256]", "occupancy(shape.latents, shape.points)"),
    ("shape.encoder.points / shape.encoder.normals", "F32 [1,128,3]", "encoder input: points on a "
     "unit sphere and their normals"),
    ("shape.encoder.output", "F32 [1,17,64]", "encoder output after ln_f (row 0 = class token)"),
    ("shape.encoder.ids", "I32 [1,16]", "codes of rows 1..16 (nearest normalized code)"),
]


def np32(t):
    return t.detach().cpu().contiguous().to(torch.float32).numpy()


def npi(t):
    return t.detach().cpu().contiguous().to(torch.int32).numpy()


def build_models():
    clip_cfg, shape_cfg = C.clip_tiny(), C.shape_tiny()
    gpt_cfg, gpt01_cfg = C.gpt_tiny(use_bbox=True), C.gpt_tiny(use_bbox=False)
    clip = randomize_(ClipTextModel(clip_cfg), 11).eval()
    shape = randomize_(ShapeTokenizer(shape_cfg), 12).eval()
    gpt = randomize_(CubeGPT(gpt_cfg), 13, weight_gain=2.0).eval()
    gpt01 = randomize_(CubeGPT(gpt01_cfg), 14, weight_gain=2.0).eval()
    return clip, shape, gpt, gpt01


def save_checkpoints(out, clip, shape, gpt, gpt01):
    os.makedirs(os.path.join(out, "text_encoder"), exist_ok=True)
    os.makedirs(os.path.join(out, "gpt_v05"), exist_ok=True)
    os.makedirs(os.path.join(out, "gpt_v01"), exist_ok=True)
    meta = {"format": "pt"}
    st_io.save_torch_state_dict(os.path.join(out, "text_encoder", "model.safetensors"),
                                clip.state_dict(), meta)
    with open(os.path.join(out, "text_encoder", "config.json"), "w") as f:
        json.dump(C.clip_hf_config_json(clip.cfg), f, indent=2, sort_keys=True)
        f.write("\n")
    st_io.save_torch_state_dict(os.path.join(out, "shape_tokenizer.safetensors"),
                                shape.state_dict(), meta)
    # GPT files hold the raw wte (the codebook rows are replaced at load time, not in the file)
    st_io.save_torch_state_dict(os.path.join(out, "gpt_v05", "shape_gpt.safetensors"),
                                gpt.state_dict(), meta)
    st_io.save_torch_state_dict(os.path.join(out, "gpt_v01", "shape_gpt.safetensors"),
                                gpt01.state_dict(), meta)


@torch.no_grad()
def compute_expected(clip, shape, gpt, gpt01):
    e = {}
    cc = clip.cfg
    ids0, m0 = tokens_for_ids(cc, [5, 17, 42, 311, 7, 996])
    ids1, m1 = tokens_for_ids(cc, [])
    ids, mask = torch.stack([ids0, ids1]), torch.stack([m0, m1])
    e["clip.input_ids"], e["clip.attention_mask"] = npi(ids), npi(mask)
    hs = []
    hidden = clip(ids, mask, hidden_states=hs)
    for i, h in enumerate(hs):
        e[f"clip.hidden_states.{i}"] = np32(h)
    e["clip.last_hidden_state"] = np32(hidden)
    e["clip.last_hidden_state_nomask"] = np32(clip(ids))

    cb = shape.normalized_codebook()
    e["shape.codebook_normalized"] = np32(cb)

    gpt.install_codebook(cb)
    gpt01.install_codebook(cb)
    cfg = gpt.cfg
    bbox = torch.tensor([BBOX, [0.0, 0.0, 0.0]])
    cond = gpt.encode_condition(hidden, bbox)
    e["gpt.bbox"], e["gpt.cond"] = np32(bbox), np32(cond)
    e["gpt.wte_installed"] = np32(gpt.transformer.wte.weight)

    g = torch.Generator().manual_seed(21)
    codes = torch.randint(0, cfg.codebook_size, (1, TEACHER_STEPS), generator=g).repeat(2, 1)
    teacher = torch.cat([torch.full((2, 1), cfg.bos_id), codes], dim=1)
    e["gpt.teacher_ids"] = npi(teacher)
    trace = {}
    e["gpt.full_logits"] = np32(gpt(teacher, cond, trace=trace))
    for k, v in trace.items():
        e[f"gpt.full.{k}"] = np32(v)
    cache = gpt.new_cache()
    e["gpt.prefill_logits"] = np32(gpt.prefill(teacher[:, :1], cond, cache))
    steps = [gpt.decode_step(teacher[:, t:t + 1], t, cache) for t in range(1, TEACHER_STEPS + 1)]
    e["gpt.decode_logits_cached"] = np32(torch.cat(steps, dim=1))
    recompute = [gpt(teacher[:, :t + 1], cond)[:, -1:] for t in range(1, TEACHER_STEPS + 1)]
    e["gpt.decode_logits_nocache"] = np32(torch.cat(recompute, dim=1))

    e["gpt.guidance_scale"] = np.array([GUIDANCE], dtype=np.float32)
    step_logits = []
    tokens = gpt.generate(cond[:1], cond[1:], guidance_scale=GUIDANCE, logits_out=step_logits)
    e["gpt.greedy_tokens"] = npi(tokens)
    e["gpt.greedy_logits"] = np32(torch.stack(step_logits))
    plain_logits = []
    e["gpt.greedy_tokens_noguidance"] = npi(gpt.generate(cond[:1], guidance_scale=0.0,
                                                         logits_out=plain_logits))

    cond01 = gpt01.encode_condition(hidden)
    e["gpt_v01.cond"] = np32(cond01)
    e["gpt_v01.wte_installed"] = np32(gpt01.transformer.wte.weight)
    e["gpt_v01.full_logits"] = np32(gpt01(teacher, cond01))
    v01_logits = []
    e["gpt_v01.greedy_tokens"] = npi(gpt01.generate(cond01[:1], cond01[1:], guidance_scale=GUIDANCE,
                                                    logits_out=v01_logits))
    # greedy fixtures are only useful if an fp32 engine cannot flip an argmax by rounding
    for what, ls in (("guided", step_logits), ("unguided", plain_logits), ("v01", v01_logits)):
        top2 = torch.stack(ls).topk(2, dim=-1).values
        margin = (top2[..., 0] - top2[..., 1]).min().item()
        if margin < 1e-3:
            raise SystemExit(f"{what} greedy fixture has an argmax margin of {margin:.2e}: "
                             "change a seed")

    e["shape.ids"] = npi(tokens)
    trace = {}
    latents = shape.decode_tokens(tokens, trace=trace)
    for k, v in trace.items():
        e[f"shape.{k}"] = np32(v)
    e["shape.latents"] = np32(latents)
    g = torch.Generator().manual_seed(22)
    corners = torch.tensor([[x, y, z] for x in (-1.05, 1.05) for y in (-1.05, 1.05)
                            for z in (-1.05, 1.05)] + [[0.0, 0.0, 0.0]])
    rand = (torch.rand(N_POINTS - corners.shape[0], 3, generator=g) * 2 - 1) * 1.05
    pts = torch.cat([corners, rand])[None]
    e["shape.points"] = np32(pts)
    e["shape.fourier_embedding"] = np32(shape.embedder(pts[:, :N_FOURIER_POINTS]))
    e["shape.occupancy_logits"] = np32(shape.occupancy(latents, pts))

    d = torch.randn(1, N_SURFACE_POINTS, 3, generator=g)
    normals = d / d.norm(dim=-1, keepdim=True)
    e["shape.encoder.points"], e["shape.encoder.normals"] = np32(normals), np32(normals)
    enc_ids, enc_out = shape.encode(normals, normals)
    e["shape.encoder.output"] = np32(enc_out)
    e["shape.encoder.ids"] = npi(enc_ids)
    return e


def write_readme(out, clip, shape, gpt, expected):
    def cfg_line(c):
        return ", ".join(f"{k}={v}" for k, v in C.as_dict(c).items())

    lines = [
        "# Parity fixtures (generated: do not edit)",
        "",
        "Written by `/usr/bin/python3 tools/make_fixtures.py` from the fp32 PyTorch reference in",
        "`tools/tessera_ref/` (Debian python3-torch, one thread, fixed seeds; two runs give identical",
        "bytes). Weights are random; the key names are those of the real checkpoints, so the C++",
        "loaders, config inference and kernels can be compared value by value. All tensors are",
        "little-endian F32 except the I32 token ids.",
        "",
        "## Checkpoints",
        "- `gpt_v05/shape_gpt.safetensors`: Cube GPT, v0.5 layout (with `bbox_proj`). The file holds the",
        "  raw `transformer.wte.weight`; rows 0..63 must be replaced at load by",
        "  `shape_proj(normalized codebook)` (see `gpt.wte_installed`).",
        "- `gpt_v01/shape_gpt.safetensors`: the same architecture without `bbox_proj` (different seed).",
        "- `shape_tokenizer.safetensors`: shape tokenizer incl. encoder; `embedder.weight`,",
        "  `encoder.embedder.weight`, `occupancy_decoder.embedder.weight` hold the same tensor.",
        "- `text_encoder/model.safetensors` + `config.json`: CLIP text model, HF names; the head count",
        "  (4, head_dim 8) is only in config.json (shapes cannot show it). Tiny vocabulary: BOS = 998,",
        "  EOS = pad = 999.",
        "",
        "## Configs (everything else as in docs/cube3d.md: LN eps 1e-6, q/k RMSNorm eps 1e-5, VQ RMSNorm",
        "eps 1e-5, RoPE theta 10000 interleaved pairs, condition positions 0, CLIP LN eps 1e-5, quick_gelu)",
        f"- GPT v0.5: {cfg_line(gpt.cfg)}",
        "- GPT v0.1: the same with use_bbox=False",
        f"- Shape tokenizer: {cfg_line(shape.cfg)}",
        f"- CLIP: {cfg_line(clip.cfg)}",
        "",
        "## expected.safetensors",
        "| name | dtype, shape | meaning |",
        "|---|---|---|",
    ]
    for name, shp, meaning in EXPECTED_DOC:
        lines.append(f"| `{name}` | {shp} | {meaning} |")
    lines += ["", f"{len(expected)} tensors in total.", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))


def check_doc_covers(expected):
    """Every stored tensor must be described in the README table (patterns with I / N accepted)."""
    import re
    pats = []
    for name, _, _ in EXPECTED_DOC:
        for part in name.split(" / "):
            pats.append(re.compile("^" + re.escape(part).replace("I", r"\d+").replace("N", r"\d+")
                                   + "$"))
    missing = [k for k in expected if not any(p.match(k) for p in pats)]
    if missing:
        raise SystemExit(f"README table misses tensors: {missing}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "parity"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)
    clip, shape, gpt, gpt01 = build_models()
    save_checkpoints(args.out, clip, shape, gpt, gpt01)
    expected = compute_expected(clip, shape, gpt, gpt01)
    check_doc_covers(expected)
    st_io.save(os.path.join(args.out, "expected.safetensors"), expected,
               metadata={"generator": "tools/make_fixtures.py", "gpt_config": json.dumps(
                   C.as_dict(gpt.cfg), sort_keys=True), "shape_config": json.dumps(
                   C.as_dict(shape.cfg), sort_keys=True), "clip_config": json.dumps(
                   C.as_dict(clip.cfg), sort_keys=True)})
    write_readme(args.out, clip, shape, gpt, expected)
    total = 0
    for dirpath, _, files in os.walk(args.out):
        for fn in sorted(files):
            p = os.path.join(dirpath, fn)
            total += os.path.getsize(p)
            print(f"{os.path.relpath(p, args.out):40s} {os.path.getsize(p):>10,d} bytes")
    print(f"{'total':40s} {total:>10,d} bytes")


if __name__ == "__main__":
    main()
