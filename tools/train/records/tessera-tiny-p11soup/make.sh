#!/bin/sh
# The shipped tessera-tiny GPT (session 12): the 50/50 average of phase 11's and phase 6's exported GPTs
# (p11 first: its text encoder carries the shipped vocabulary extension), then the full evaluation with
# phase 4's recogniser. Needs both exports (sh tools/train/finish_run.sh tools/train/records/tessera-tiny-p11; phase
# 6's export is the previously shipped folder). Shipped by hand (tools/train/README.md, phase 11).
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p11soup
/usr/bin/python3 tools/train/average_gpt.py --out $RUN/export tools/train/records/tessera-tiny-p11/export:0.5 \
  tools/train/records/tessera-tiny-p6/export:0.5
cp tools/train/records/tessera-tiny-p4/recogniser.pt $RUN/recogniser.pt
/usr/bin/python3 tools/train/evaluate.py --run-dir $RUN --model-dir $RUN/export --threads 1 >> $RUN/eval.log 2>&1
