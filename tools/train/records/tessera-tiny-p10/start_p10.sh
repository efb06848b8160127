#!/bin/sh
# tessera-tiny phase 10 (session 11): phase 6's shipped GPT trained on over the whole caption set (no focus
# words) on a fresh cosine schedule (peak 2e-4, 60 minutes): phase 6's held-out loss was still falling
# (2.7116 -> 2.6848 over its last 1000 steps), and the focused fine-tunes p7-p9 traded the mug's hole for the
# flat box. Same frozen text encoder and codes (phase 5's autoencoder, tokens and vocabulary: copies, not
# committed). Resume: run this again. Then: sh tools/train/finish_run.sh tools/train/records/tessera-tiny-p10
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-p10
P5=tools/train/records/tessera-tiny-p5
for f in ae_ckpt.pt ae_done.json tokens.npz vocab; do [ -e $RUN/$f ] || cp -r $P5/$f $RUN/; done
/usr/bin/python3 tools/train/train_gpt.py --run-dir $RUN --threads 1 --ae-ckpt $RUN/ae_ckpt.pt \
  --init-from tools/train/records/tessera-tiny-p6/gpt_weights_step1639.pt --freeze-text --n-embd 192 --n-layer 6 \
  --mlp-hidden 512 --steps 1000 --lr 2e-4 --warmup 20 --eval-every 500 --max-minutes 60 >> $RUN/gpt.log 2>&1
