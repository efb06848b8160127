#!/usr/bin/python3
"""Which layers of tessera-tiny's GPT tolerate 8-bit weights (issue 25): a sensitivity study on the PyTorch
reference, with the C++ engine's int8 arithmetic emulated exactly enough to rank the choices.

Every nn.Linear of the GPT is replaced by a fake-quantized one: the weight rounded to symmetric int8 with an
f32 scale per group along the input (kernels/int8.h: 128, else 64, else 32), and, for "A8", the input rounded
the same way per row and group (what kernels/cpu/linear_int8*.cpp do at each call). Variants leave chosen
layers in float. For each variant, evaluate.py's 57 held-out prompts are generated greedily with guidance 3
(one batch) and compared with the f32 model: token agreement (share of positions), identical sequences,
family match and property checks by the phase-4 recogniser.

  /usr/bin/python3 tools/train/int8_sensitivity.py [--out FILE.json]
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common  # noqa: E402
from train import evaluate  # noqa: E402
from train import first_prompts as fp  # noqa: E402


def group_for(cols):
    for g in (128, 64, 32):
        if cols % g == 0:
            return g
    return cols


def fake_quant(t, group, bits=8):
    qmax = 2 ** (bits - 1) - 1
    shape = t.shape
    g = t.reshape(*shape[:-1], shape[-1] // group, group)
    scale = g.abs().amax(-1, keepdim=True) / qmax
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return (torch.clamp(torch.round(g / scale), -qmax, qmax) * scale).reshape(shape)


class FakeQuantLinear(nn.Module):
    def __init__(self, lin, act, act_group=None):
        super().__init__()
        cols = lin.weight.shape[1]
        self.group = group_for(cols)
        self.act_group = act_group or self.group
        self.weight = nn.Parameter(fake_quant(lin.weight.detach(), self.group), requires_grad=False)
        self.bias = lin.bias
        self.act = act

    def forward(self, x):
        if self.act:
            x = fake_quant(x, self.act_group)
        return F.linear(x, self.weight, self.bias)


def quantize(gpt, keep=(), act=True, act_group=None):
    for name, mod in list(gpt.named_modules()):
        for child_name, child in list(mod.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not isinstance(child, nn.Linear) or child.weight.shape[1] % 32 != 0:
                continue
            if any(k in full for k in keep):
                continue
            setattr(mod, child_name, FakeQuantLinear(child, act, act_group))
    return gpt


VARIANTS = {
    "W8A8 (the engine's int8)": dict(keep=()),
    "W8 only (activations f32)": dict(keep=(), act=False),
    "W8A8, activations per 32": dict(keep=(), act_group=32),
    "W8A8, lm_head float": dict(keep=("lm_head",)),
    "W8A8, MLP down_proj float": dict(keep=("down_proj",)),
    "W8A8, attention q/k/v float": dict(keep=("c_qk", "c_k", "c_v")),
    "W8A8, text/shape proj float": dict(keep=("text_proj", "shape_proj")),
    "W8A8, single blocks float": dict(keep=("single_blocks",)),
    "W8A8, first dual block float": dict(keep=("dual_blocks.0.",)),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=fp.MODEL_DIR)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    common.set_threads(a.threads)
    t0 = time.time()
    rec, families = fp.load_judge(fp.JUDGE)
    plist = evaluate._prompt_list(families)
    rows = [{"family": f, "prompt": t, "check": c, "group": "held-out"} for f, t, c in plist]
    prompts = [t for _, t, _ in plist]

    def run(gpt, clip, tok):
        codes = evaluate.generate(gpt, clip, tok, prompts, guidance=fp.GUIDANCE)
        tokens = [[int(v) for v in row] for row in codes]
        res = fp.judge(rows, fp.decode_grids(a.model_dir, tokens), rec, families)
        checks = [r["check_ok"] for r in res if r["check"]]
        return tokens, {"family_match": sum(r["match"] for r in res), "checks": f"{sum(map(bool, checks))}/{len(checks)}"}

    _, _, gpt, clip, tok, _ = evaluate.load_exported(a.model_dir)
    ref_tokens, ref = run(gpt, clip, tok)
    out = {"f32": ref}
    print(f"{'variant':34s} {'agree':>6s} {'same':>5s} {'family':>6s} checks")
    print(f"{'f32 reference':34s} {1:6.3f} {len(prompts):5d} {ref['family_match']:6d} {ref['checks']}")
    for name, kw in VARIANTS.items():
        _, _, gpt, clip, tok, _ = evaluate.load_exported(a.model_dir)
        tokens, fig = run(quantize(gpt, **kw), clip, tok)
        pos = sum(len(r) for r in ref_tokens)
        agree = sum(sum(u == v for u, v in zip(x, y)) for x, y in zip(tokens, ref_tokens)) / pos
        same = sum(x == y for x, y in zip(tokens, ref_tokens))
        fig.update(agreement=round(agree, 4), identical=same)
        out[name] = fig
        print(f"{name:34s} {agree:6.3f} {same:5d} {fig['family_match']:6d} {fig['checks']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
