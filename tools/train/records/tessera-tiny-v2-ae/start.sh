#!/bin/sh
# tessera-tiny v2 autoencoder, the full run (issue 38): pilot 4's recipe
# (tools/train/records/tessera-tiny-v2-pilot4/start.sh) with ONE change, a schedule three times as long
# (--steps 18000; evaluations every 1000 steps instead of 500 to keep their cost the same share).
#
# Why: of the five pilots, pilot 4 (lattice queries, phase 1's Fourier features, fresh occupancy draws,
# no consistency loss) is the best: held-out IoU 0.7048 at phase 1's 6000 steps (phase 1: 0.7234) with
# token agreement 0.846 (target 0.6; the shipped model 0.23). Pilot 5 (fixed samples) reached 0.6833, so
# the fresh draws stay. Pilot 4's curve was still rising at its end (0.65 -> 0.66 -> 0.67 over the last
# 1500 steps) while phase 1 was flat there; the shipped model's autoencoder reached 0.8455 over four
# full-model phases (20000 steps: 6000, 4000, 6000, 4000, each its own schedule). Decision: the recipe
# is not changed again on a 0.019 gap at a schedule the shipped model also outgrew; this run is one
# schedule from scratch, as the issue asks of the full run, and is judged against phase 4's 0.8455 as
# well as the 0.6 agreement.
#
# Start (from the repository root; one thread, low priority beside the C++ builds):
#   setsid nohup nice -n 5 sh tools/train/records/tessera-tiny-v2-ae/start.sh > tools/train/records/tessera-tiny-v2-ae/start.log 2>&1 &
# Resume after an interruption: the same command (ae_ckpt.pt every 5 minutes). At the end:
# ae_eval.json / ae_eval.log (IoU; phase 4: 0.8455) and code_stability.log (target >= 0.6).
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
PY=/usr/bin/python3
RUN=tools/train/records/tessera-tiny-v2-ae
DATA=.cache/tessera-data
stamp() { echo "$(date '+%Y-%m-%d %H:%M:%S') v2-ae: $*"; }
# phase 1's dataset (run_all.sh's commands: seed 1, 300 train / 16 held-out shapes per family)
if [ ! -f "$DATA/train/manifest.json" ]; then
  stamp "generating the training set"
  $PY -m tools.shapes.dataset generate --out "$DATA/train" --per-family 300 --seed 1 --split train --shard-size 950
fi
if [ ! -f "$DATA/val/manifest.json" ]; then
  stamp "generating the held-out set"
  $PY -m tools.shapes.dataset generate --out "$DATA/val" --per-family 16 --seed 1 --split val --shard-size 1000
fi
stamp "autoencoder (log $RUN/ae.log)"
$PY tools/train/train_autoencoder.py --run-dir $RUN --data $DATA --threads 1 --seed 0 --steps 18000 --batch 16 \
  --n-points 512 --n-query 512 --lr 1e-3 --warmup 200 --vq-start 2500 --tail-prob 0.3 --eval-every 1000 \
  --encoder-queries lattice --num-freqs 32 --fourier-std 4 --fourier-max 0 \
  --online-occupancy --occ-mix 0.5,0.35,0.15 --band-sigmas 0.01,0.04 --edge-sigmas 0.01,0.04 \
  --edge-weight 1 --consistency 0 >> $RUN/ae.log 2>&1
[ -f $RUN/ae_done.json ] || { stamp "autoencoder not finished (see ae.log)"; exit 1; }
# phase 4's recogniser: the judge of every recorded tessera-tiny IoU (finish_run.sh copies it the same way)
[ -f $RUN/recogniser.safetensors ] || cp tools/train/records/tessera-tiny-p4/recogniser.safetensors $RUN/recogniser.safetensors
if [ ! -f $RUN/ae_eval.json ]; then
  stamp "held-out autoencoder IoU (log $RUN/ae_eval.log)"
  $PY tools/train/evaluate.py --ae-ckpt $RUN/ae_ckpt.pt --run-dir $RUN --data $DATA --threads 1 >> $RUN/ae_eval.log 2>&1
fi
if [ ! -s $RUN/code_stability.log ]; then
  stamp "code stability (log $RUN/code_stability.log)"
  $PY tools/train/code_stability.py --ae-ckpt $RUN/ae_ckpt.pt --data $DATA --threads 1 > $RUN/code_stability.log.tmp 2>&1
  mv $RUN/code_stability.log.tmp $RUN/code_stability.log
fi
stamp "done: $RUN/ae_eval.json (phase 1: 0.7234), $RUN/code_stability.log (target >= 0.6)"
