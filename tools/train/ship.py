#!/usr/bin/python3
"""The ship rule of tessera-tiny: replaces the shipped model folder with an evaluated staging export only
when it is better. Better = autoencoder held-out IoU, prompt -> family match and property checks passed (a
torus and a mug with a hole, a tall cylinder tall, a flat box flat) all at least as good as the shipped
model's, and one of the three strictly better. The embedded diffusion model lives under the
shape model's folder and is carried over. Exit status 0 = shipped, 1 = kept the shipped model, 2 = bad
arguments (a folder without evaluated metrics).

  /usr/bin/python3 tools/train/ship.py --stage tools/train/records/RUN/export [--shipped assets/models/tessera-tiny]
"""

import argparse
import json
import os
import shutil
import sys

KEYS = ("autoencoder_iou_heldout", "prompt_family_match_rate")


def checks_passed(metrics):
    text = str(metrics.get("prompt_property_checks_passed", "0/0"))
    return int(text.split("/")[0]) if "/" in text else 0


def is_better(new, old):
    """new / old: the 'metrics' objects of two model cards."""
    if not all(new[k] >= old.get(k, 0) for k in KEYS) or checks_passed(new) < checks_passed(old):
        return False
    return any(new[k] > old.get(k, 0) for k in KEYS) or checks_passed(new) > checks_passed(old)


def load_metrics(folder):
    path = os.path.join(folder, "model.json")
    try:
        with open(path) as f:
            metrics = json.load(f).get("metrics", {})
    except (OSError, ValueError) as e:
        raise SystemExit(f"ship.py: {path}: {e}")
    missing = [k for k in KEYS if k not in metrics]
    if missing:
        raise SystemExit(f"ship.py: {path}: metrics {missing} missing (run evaluate.py on it first)")
    return metrics


def replace(stage, shipped):
    tmp = shipped.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(stage, tmp)
    if os.path.isdir(os.path.join(shipped, "diffusion")):
        shutil.rmtree(os.path.join(tmp, "diffusion"), ignore_errors=True)
        shutil.copytree(os.path.join(shipped, "diffusion"), os.path.join(tmp, "diffusion"))
    # Two renames: the shipped folder is missing only between them (not for a whole rmtree), so a
    # test or studio reading it meanwhile is unlikely to see it gone; the old copy goes last.
    old = shipped.rstrip("/") + ".old"
    shutil.rmtree(old, ignore_errors=True)
    os.replace(shipped, old)
    os.replace(tmp, shipped)
    shutil.rmtree(old)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stage", required=True)
    p.add_argument("--shipped", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                     "assets", "models", "tessera-tiny"))
    a = p.parse_args(argv)
    try:
        new, old = load_metrics(a.stage), load_metrics(a.shipped)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print("new", {k: new[k] for k in KEYS}, new.get("prompt_property_checks_passed"),
          "shipped", {k: old.get(k) for k in KEYS}, old.get("prompt_property_checks_passed"))
    if not is_better(new, old):
        print(f"not better: {a.shipped} kept ({a.stage} has the new model)")
        return 1
    replace(a.stage, a.shipped)
    print(f"better: {a.shipped} replaced by {a.stage}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
