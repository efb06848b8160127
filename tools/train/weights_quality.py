#!/usr/bin/python3
"""What 8-bit weights cost in quality (issue 25), measured through the C++ engine on tessera-tiny.

For each prompt of evaluate.py's held-out list (57 "a sculpture of ..." prompts, 19 families x 3, six of
them with a property check) and, with --first-prompts, of tools/train/first_prompts.tsv, the CLI makes
shape tokens with its defaults (greedy, guidance 3) once per weight format (--weights f32, bf16, int8);
the tokens are decoded to 32^3 occupancy grids by the exported shape tokenizer and judged by the
recogniser of phase 4 (first_prompts.py's judge). Reported per format: family match and property checks;
and int8 against bf16 (and f32 against bf16, the scale of what any rounding does):
  tokens     share of positions with the same token; prompts whose sequences are identical; the median
             first position where they differ (a greedy sequence that flips a near-tie at position k
             continues differently, so positions after k measure the model, not the weights)
  IoU        of the two occupancy grids per prompt (mean, 10th percentile, min): how different the shapes
             are, which is what an artist sees.

  /usr/bin/python3 tools/train/weights_quality.py [--first-prompts] [--out bench/int8_quality.json]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common  # noqa: E402
from train import first_prompts as fp  # noqa: E402

FORMATS = ("f32", "bf16", "int8")


def iou(a, b):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    union = np.count_nonzero(a | b)
    return 1.0 if union == 0 else np.count_nonzero(a & b) / union


def compare(x_rows, y_rows, x_grids, y_grids):
    pos = sum(len(x) for x in x_rows)
    same_pos = sum(sum(u == v for u, v in zip(x, y)) for x, y in zip(x_rows, y_rows))
    first = [next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), len(x)) for x, y in zip(x_rows, y_rows)]
    ious = np.array([iou(a, b) for a, b in zip(x_grids, y_grids)])
    return {"token_agreement": round(same_pos / max(1, pos), 4),
            "identical_prompts": int(sum(x == y for x, y in zip(x_rows, y_rows))),
            "prompts": len(x_rows),
            "median_first_difference": float(np.median(first)),
            "iou_mean": round(float(ious.mean()), 4), "iou_p10": round(float(np.percentile(ious, 10)), 4),
            "iou_min": round(float(ious.min()), 4)}


def judge_set(name, rows, tokens, grids, rec, families):
    results = fp.judge(rows, grids, rec, families)
    checks = [r["check_ok"] for r in results if r["check"]]
    return {"set": name, "prompts": len(results), "family_match": int(sum(r["match"] for r in results)),
            "family_match_rate": round(sum(r["match"] for r in results) / len(results), 4),
            "checks_passed": int(sum(bool(c) for c in checks)), "checks": len(checks),
            "failures": [r["prompt"] for r in results if not r["match"] or r["check_ok"] is False]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=fp.MODEL_DIR)
    p.add_argument("--cli", default=fp.CLI)
    p.add_argument("--judge", default=fp.JUDGE)
    p.add_argument("--first-prompts", action="store_true", help="also the first-prompts set (issue 22)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    common.set_threads(a.threads)
    t0 = time.time()
    from train import evaluate
    rec, families = fp.load_judge(a.judge)
    sets = [("held-out", [{"family": f, "prompt": t, "check": c, "group": "held-out"}
                          for f, t, c in evaluate._prompt_list(families)])]
    if a.first_prompts:
        sets.append(("first-prompts", fp.load_prompts()))
    model_dir = os.path.abspath(a.model_dir)
    report = {"model_dir": os.path.relpath(model_dir, common.REPO), "decoding": "greedy, guidance 3",
              "engine": "tessera generate (C++ CLI)", "evaluated": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "sets": {}}
    for name, rows in sets:
        prompts = [r["prompt"] for r in rows]
        tokens, grids, figures = {}, {}, {}
        for w in FORMATS:
            print(f"{name}: {len(prompts)} prompts, --weights {w}")
            tokens[w] = fp.tokens_cli(model_dir, prompts, a.cli, a.threads, extra_args=("--weights", w))
            grids[w] = fp.decode_grids(model_dir, tokens[w])
            figures[w] = judge_set(name, rows, tokens[w], grids[w], rec, families)
        entry = {"formats": figures,
                 "int8_vs_bf16": compare(tokens["int8"], tokens["bf16"], grids["int8"], grids["bf16"]),
                 "f32_vs_bf16": compare(tokens["f32"], tokens["bf16"], grids["f32"], grids["bf16"])}
        report["sets"][name] = entry
        print(f"\n{name} ({len(prompts)} prompts)")
        print(f"{'weights':8s} {'family match':>14s} {'checks':>8s}")
        for w in FORMATS:
            f = figures[w]
            print(f"{w:8s} {f['family_match']:4d} ({f['family_match_rate']:.3f}) {f['checks_passed']:4d}/{f['checks']}")
        for k in ("int8_vs_bf16", "f32_vs_bf16"):
            c = entry[k]
            print(f"{k}: tokens agree {c['token_agreement']:.3f} of positions, {c['identical_prompts']}/"
                  f"{c['prompts']} prompts identical, median first difference {c['median_first_difference']:.0f}; "
                  f"IoU mean {c['iou_mean']:.3f} p10 {c['iou_p10']:.3f} min {c['iou_min']:.3f}")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {a.out}")
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
