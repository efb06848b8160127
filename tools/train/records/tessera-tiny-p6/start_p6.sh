#!/bin/sh
# tessera-tiny phase 6 (session 9): phase 5's GPT trained on (init-from its weights, fresh cosine at a
# lower peak LR: 4e-4, 2000 steps) over the same frozen text encoder and the same codes (phase 5's
# autoencoder, tokens.npz copied). One core; the other stays free for builds. Resume: run this again.
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p6
P5=tools/train/records/tessera-tiny-p5
# The same codes as phase 5: its autoencoder, tokens and vocabulary (copies, not committed here).
for f in ae_ckpt.pt ae_done.json tokens.npz vocab; do [ -e $RUN/$f ] || cp -r $P5/$f $RUN/; done
/usr/bin/python3 tools/train/train_gpt.py --run-dir $RUN --threads 1 --ae-ckpt $RUN/ae_ckpt.pt \
  --init-from $P5/gpt_ckpt.pt --freeze-text --n-embd 192 --n-layer 6 --mlp-hidden 512 \
  --steps 2000 --lr 4e-4 --warmup 50 --max-minutes 100 >> $RUN/gpt.log 2>&1
