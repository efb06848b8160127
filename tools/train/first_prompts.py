#!/usr/bin/python3
"""The first prompts a newcomer types (issue 22), on a tessera-tiny model folder: tools/train/first_prompts.tsv
(family, prompt, check, group) -> shape tokens -> 32^3 occupancy grid -> recognised family + property check.

Tokens come from the defaults of `tessera generate` (greedy decoding, guidance 3, no bbox), either
- --engine cli (default): the C++ engine, `build/app/cli/tessera generate --prompt P --tokens-out F -o F.obj
  -r 17` once per prompt (the lattice only affects the mesh, not the tokens; --threads as given), or
- --engine python: the plain PyTorch reference loader of evaluate.py (all prompts in one batch; fast,
  for probes during training), or
- --engine both: the two, compared token for token (the figures are the CLI's).
Decoding and judging are evaluate.py's: the exported shape tokenizer decodes the tokens to a 32^3 grid
over [-1.05, 1.05]^3, the recogniser of phase 4 (tools/train/records/tessera-tiny-p4/recogniser.safetensors, the judge of
every shipped model; never retrained here) names the family, and the checks are
  hole  Euler characteristic <= 0          tall  height / max(width, depth) >= 1.6
  flat  height / max(width, depth) <= 0.4  cube  largest / smallest extent <= 1.5

  /usr/bin/python3 tools/train/first_prompts.py [--engine cli|python|both] [--model-dir DIR]
      [--out FILE.json] [--sheet FILE.png] [--threads 1]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TSV = os.path.join(HERE, "first_prompts.tsv")
JUDGE = os.path.join(common.REPO, "tools/train/records", "tessera-tiny-p4", "recogniser.safetensors")
# the CLI of the build tree (build/app/cli/tessera in the CMake layout; build/app/tessera accepted too)
CLI = next((c for c in (os.path.join(common.REPO, "build", "app", "cli", "tessera"),
                        os.path.join(common.REPO, "build", "app", "tessera")) if os.path.exists(c)),
           os.path.join(common.REPO, "build", "app", "cli", "tessera"))
MODEL_DIR = os.path.join(common.REPO, "assets", "models", "tessera-tiny")
CHECKS = ("hole", "tall", "flat", "cube")
GROUPS = ("a-family", "bare", "synonym", "size")
GUIDANCE = 3.0          # tessera generate's default
CLI_RESOLUTION = 17     # mesh lattice of the CLI runs (tokens do not depend on it)


def load_prompts(path=TSV):
    """[{family, prompt, check (None or one of CHECKS), group}] in file order; raises ValueError on a
    malformed row, an unknown family / check / group, or a repeated prompt."""
    from shapes.families import FAMILIES
    rows, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 4:
                raise ValueError(f"{path}:{n}: expected 4 tab-separated fields, got {len(parts)}")
            fam, prompt, check, group = (p.strip() for p in parts)
            if fam not in FAMILIES:
                raise ValueError(f"{path}:{n}: unknown family {fam!r}")
            if check != "-" and check not in CHECKS:
                raise ValueError(f"{path}:{n}: unknown check {check!r} (known: {', '.join(CHECKS)}, -)")
            if group not in GROUPS:
                raise ValueError(f"{path}:{n}: unknown group {group!r} (known: {', '.join(GROUPS)})")
            if not prompt or prompt in seen:
                raise ValueError(f"{path}:{n}: empty or repeated prompt {prompt!r}")
            seen.add(prompt)
            rows.append({"family": fam, "prompt": prompt, "check": None if check == "-" else check,
                         "group": group})
    return rows


def check_ok(check, info):
    """The property check on grid_features' info (None when the row has no check)."""
    if check is None:
        return None
    if info["empty"]:
        return False
    w, h, d = info["extents"]
    if check == "hole":
        return info["euler"] <= 0
    if check in ("tall", "flat"):
        ratio = h / max(w, d, 1e-6)
        return ratio >= 1.6 if check == "tall" else ratio <= 0.4
    if check == "cube":
        return max(w, h, d) / max(min(w, h, d), 1e-6) <= 1.5
    raise ValueError(f"unknown check {check!r}")


def load_judge(path=JUDGE):
    if not os.path.exists(path):
        raise SystemExit(f"{path}: the judge (phase 4's recogniser) is missing; it is in git")
    from train.evaluate import load_recogniser
    rec, families, _ = load_recogniser(path)
    return rec, families


def tokens_python(model_dir, prompts, guidance=GUIDANCE):
    from train import evaluate
    _, _, gpt, clip, tok, _ = evaluate.load_exported(model_dir)
    codes = evaluate.generate(gpt, clip, tok, prompts, guidance=guidance)
    return [[int(v) for v in row] for row in codes]


def tokens_cli(model_dir, prompts, cli=CLI, threads=1, log=print, extra_args=()):
    if not os.path.exists(cli):
        raise SystemExit(f"{cli}: not built (build the CLI, or use --engine python)")
    env = dict(os.environ)
    out = []
    with tempfile.TemporaryDirectory(prefix="tessera-first-") as tmp:
        # a private copy: a build relinking the CLI meanwhile neither breaks nor mixes the run
        exe = os.path.join(tmp, "tessera")
        shutil.copy2(cli, exe)
        for i, p in enumerate(prompts):
            tf, mesh = os.path.join(tmp, f"{i}.tokens"), os.path.join(tmp, f"{i}.obj")
            cmd = [exe, "--threads", str(threads), "generate", "--prompt", p, "--tokens-out", tf, "-o", mesh,
                   "-r", str(CLI_RESOLUTION), "--model", model_dir, *extra_args]
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
            with open(tf) as f:
                out.append([int(v) for v in f.read().split()])
            if (i + 1) % 10 == 0:
                log(f"  cli: {i + 1}/{len(prompts)} prompts")
    return out


@torch.no_grad()
def decode_grids(model_dir, token_rows):
    from train import evaluate
    shape, _, _, _, _, card = evaluate.load_exported(model_dir)
    n_lat = int(card["tokens"]["num_latents"])
    grids = []
    for row in token_rows:
        ids = torch.tensor([row[:n_lat]], dtype=torch.long)
        if ids.shape[1] != n_lat:
            raise SystemExit(f"a token row has {ids.shape[1]} ids, the model has {n_lat} latents")
        grids.append(common.occupancy_grid_from_latents(shape, shape.decode_tokens(ids), evaluate.REC_RES))
    return grids


def judge(rows, grids, rec, families):
    from train import evaluate
    pred = evaluate.recognise(rec, grids)
    out = []
    for row, g, p in zip(rows, grids, pred):
        _, _, info = evaluate.grid_features(g)
        ok = check_ok(row["check"], info)
        out.append({**row, "recognised": families[int(p)], "match": families[int(p)] == row["family"],
                    "check_ok": ok, **info})
    return out


def heldout_metric(model_dir, rec, families):
    """evaluate.py's prompt metric (its prompt list, checks and greedy guidance-3 generation)."""
    from train import evaluate
    _, _, gpt, clip, tok, _ = evaluate.load_exported(model_dir)
    plist = evaluate._prompt_list(families)
    codes = evaluate.generate(gpt, clip, tok, [t for _, t, _ in plist], guidance=GUIDANCE)
    grids = decode_grids(model_dir, [[int(v) for v in row] for row in codes])
    pred = evaluate.recognise(rec, grids)
    match, checks, misses = 0, [], []
    for (fam, text, check), g, pr in zip(plist, grids, pred):
        _, _, info = evaluate.grid_features(g)
        ok = families[int(pr)] == fam
        match += ok
        if not ok:
            misses.append(f"{text[len('a sculpture of '):]} ({families[int(pr)]})")
        if check:
            checks.append(bool(check_ok(check, info)))
            if not checks[-1]:
                misses.append(f"{text[len('a sculpture of '):]} [{check} fails]")
    return {"prompts": len(plist), "family_match": int(match), "family_match_rate": round(match / len(plist), 4),
            "checks_passed": f"{sum(checks)}/{len(checks)}", "misses": misses}


def summarise(results):
    def fig(rs):
        checks = [r["check_ok"] for r in rs if r["check"]]
        return {"prompts": len(rs), "family_match": sum(r["match"] for r in rs),
                "family_match_rate": round(sum(r["match"] for r in rs) / max(1, len(rs)), 4),
                "checks_passed": f"{sum(checks)}/{len(checks)}",
                "all_ok": sum(r["match"] and r["check_ok"] is not False for r in rs)}
    groups = {g: fig([r for r in results if r["group"] == g]) for g in GROUPS}
    return {"all": fig(results), "groups": groups,
            "failures": [r["prompt"] for r in results if not r["match"] or r["check_ok"] is False]}


def contact_sheet(path, grids, cols=7):
    from train.evaluate import depth_views
    from shapes.dataset import write_png
    tiles = [depth_views(g, scale=2) for g in grids]
    h, w = tiles[0].shape
    rows_img = []
    for i in range(0, len(tiles), cols):
        row = tiles[i:i + cols] + [np.full((h, w), 255, np.uint8)] * (cols - len(tiles[i:i + cols]))
        rows_img.append(np.concatenate([np.pad(t, 3, constant_values=200) for t in row], axis=1))
    write_png(path, np.concatenate(rows_img, axis=0))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", choices=("cli", "python", "both"), default="cli")
    p.add_argument("--model-dir", default=MODEL_DIR)
    p.add_argument("--prompts", default=TSV)
    p.add_argument("--cli", default=CLI)
    p.add_argument("--judge", default=JUDGE)
    p.add_argument("--out", default="", help="write the results as JSON here")
    p.add_argument("--sheet", default="", help="contact sheet PNG (front / side / top depth views, "
                                               "7 prompts per row in file order)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--heldout", action="store_true",
                   help="also evaluate.py's held-out prompt metric (57 'a sculpture of ...' prompts, family "
                        "match and its 6 property checks) with the Python reference and the same judge")
    a = p.parse_args(argv)
    common.set_threads(a.threads)
    t0 = time.time()
    rows = load_prompts(a.prompts)
    prompts = [r["prompt"] for r in rows]
    rec, families = load_judge(a.judge)
    agreement = None
    if a.engine in ("python", "both"):
        py = tokens_python(a.model_dir, prompts)
    if a.engine in ("cli", "both"):
        cli = tokens_cli(os.path.abspath(a.model_dir), prompts, a.cli, a.threads)
    if a.engine == "both":
        same = [x == y for x, y in zip(py, cli)]
        first_diff = [next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None) for x, y in zip(py, cli)]
        agreement = {"identical": sum(same), "prompts": len(same),
                     "differ": [{"prompt": pr, "first_position": fd}
                                for pr, s, fd in zip(prompts, same, first_diff) if not s]}
        print(f"python vs cli: {sum(same)}/{len(same)} prompts give identical tokens")
        for d in agreement["differ"]:
            print(f"  differs: {d['prompt']!r} from position {d['first_position']}")
    tokens = py if a.engine == "python" else cli
    grids = decode_grids(a.model_dir, tokens)
    results = judge(rows, grids, rec, families)
    summary = summarise(results)
    print(f"{'group':9s} {'prompt':22s} {'wanted':9s} {'recognised':10s} check")
    for r in results:
        chk = "" if r["check"] is None else f"{r['check']}: {'ok' if r['check_ok'] else 'FAIL'}"
        print(f"{r['group']:9s} {r['prompt']:22s} {r['family']:9s} {r['recognised']:10s} "
              f"{'' if r['match'] else 'MISMATCH '}{chk}")
    print(f"\n{'group':9s} prompts family-match  checks")
    for g, f in list(summary["groups"].items()) + [("all", summary["all"])]:
        print(f"{g:9s} {f['prompts']:7d} {f['family_match']:3d} ({f['family_match_rate']:.3f})  "
              f"{f['checks_passed']}")
    print(f"failing ({len(summary['failures'])}): {', '.join(summary['failures'])}")
    heldout = heldout_metric(a.model_dir, rec, families) if a.heldout else None
    if heldout:
        print(f"held-out 'a sculpture of' prompts: family match {heldout['family_match_rate']:.3f} "
              f"({heldout['family_match']}/{heldout['prompts']}), checks {heldout['checks_passed']}; "
              f"misses: {', '.join(heldout['misses'])}")
    out = {"heldout": heldout, "model_dir": os.path.relpath(os.path.abspath(a.model_dir), common.REPO), "engine": a.engine,
           "guidance": GUIDANCE, "decoding": "greedy", "judge": os.path.relpath(a.judge, common.REPO),
           "prompts_file": os.path.relpath(a.prompts, common.REPO), "summary": summary,
           "engine_agreement": agreement, "evaluated": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "results": [{**r, "tokens": t} for r, t in zip(results, tokens)]}
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {a.out}")
    if a.sheet:
        contact_sheet(a.sheet, grids)
        print(f"wrote {a.sheet}")
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
