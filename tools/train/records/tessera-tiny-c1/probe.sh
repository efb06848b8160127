#!/bin/sh
# Probe (session 9) for the next phase of tessera-tiny: does --consistency make the codes stable?
# Phase 5's autoencoder, whole (encoder included), 500 steps with --consistency 1 at lr 1e-4; then
# tools/train/code_stability.py on an export of it (with phase 5's GPT, not evaluated for prompts:
# the codes changed, the GPT would need retraining on them). One core, ~10 minutes.
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-c1
P5=tools/train/records/tessera-tiny-p5
/usr/bin/python3 tools/train/train_autoencoder.py --run-dir $RUN --threads 1 --init-from $P5/ae_ckpt.pt \
  --family-weights auto --steps 500 --lr 1e-4 --warmup 20 --n-points 1024 --n-query 1024 --tail-prob 0.3 \
  --consistency 1 --eval-every 500 >> $RUN/ae.log 2>&1
M=/tmp/tessera-c1-export
rm -rf $M && mkdir -p $M
cp $RUN/ae_ckpt.pt $RUN/ae_done.json $P5/gpt_ckpt.pt $P5/gpt_done.json $M/ && cp -r $P5/vocab $M/
/usr/bin/python3 tools/train/export_tiny.py --run-dir $M --out $M/export > /dev/null
/usr/bin/python3 tools/train/code_stability.py --model-dir $M/export --shapes 30 >> $RUN/stability.log 2>&1
