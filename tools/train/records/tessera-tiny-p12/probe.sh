#!/bin/sh
# Probe of phase 12's latest checkpoint (or a given gpt checkpoint): export it to $OUT (default
# /tmp/p12-probe) with the shipped vocabulary extension carried back, then the first prompts and the held-out
# "a sculpture of" metric with the Python reference (tools/train/first_prompts.py --engine python --heldout).
#   sh tools/train/records/tessera-tiny-p12/probe.sh [NAME]   -> tools/train/records/tessera-tiny-p12/probe_NAME.json / .png
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p12
OUT=${OUT:-/tmp/p12-probe}
NAME=${1:-latest}
[ -f $RUN/ae_ckpt.pt ] || cp tools/train/records/tessera-tiny-shipped/ae_ckpt.pt tools/train/records/tessera-tiny-shipped/ae_done.json $RUN/
/usr/bin/python3 - "$RUN" "$OUT" <<'PY'
import os, shutil, sys
sys.path.insert(0, "tools")
from train import export_tiny
run, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
export_tiny.export(run, out, allow_unfinished=True)
export_tiny.carry_vocab_extension(out, export_tiny.OUT_DIR)
PY
/usr/bin/python3 tools/train/first_prompts.py --engine python --heldout --model-dir $OUT \
  --out $RUN/probe_$NAME.json --sheet $RUN/probe_$NAME.png
