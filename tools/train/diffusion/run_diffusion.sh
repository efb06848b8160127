#!/bin/sh
# The tessera-tiny diffusion model, whole pipeline, resumable (re-run after an interruption: every stage
# continues from its checkpoint or skips when done): render the training images (cached in
# .cache/tessera-diffusion-data, regenerated from the seed), train the VAE, wait for the tessera-tiny
# phase-2 run to finish (it may replace the text encoder the UNet is conditioned on; polled, at most
# 60 minutes), train the UNet, export to assets/models/tessera-tiny/diffusion (+ samples.png).
# Sized for ~60-70 minutes of one CPU core (--budget-minutes per stage measure the speed early).
#
#   mkdir -p tools/train/records/tessera-diffusion
#   setsid nohup tools/train/diffusion/run_diffusion.sh --threads 1 >> tools/train/records/tessera-diffusion/run.log 2>&1 < /dev/null &
set -eu
cd "$(dirname "$0")/../../.."
PY=/usr/bin/python3
THREADS=1
if [ "${1:-}" = "--threads" ]; then THREADS="$2"; fi
D=tools/train/diffusion
RUN=tools/train/records/tessera-diffusion
P2LOG=tools/train/records/tessera-tiny-p2/run.log
mkdir -p "$RUN"
stamp() { echo "$(date '+%Y-%m-%d %H:%M:%S') run_diffusion: $*"; }
stamp "pid $$, threads $THREADS"
stamp "stage 0: render (log $RUN/render.log)"
$PY $D/render.py --geometries 10000 --seed 0 >> "$RUN/render.log" 2>&1
stamp "stage 1: VAE (log $RUN/vae.log)"
$PY $D/train_vae.py --run-dir "$RUN" --threads "$THREADS" --steps 2500 --budget-minutes 18 >> "$RUN/vae.log" 2>&1
if [ -f "$P2LOG" ]; then
  waited=0
  until grep -E 'run_(phase2|finetune):' "$P2LOG" | tail -1 | grep -qE 'run_(phase2|finetune): done'; do
    if [ "$waited" -eq 0 ]; then stamp "waiting for the tessera-tiny phase-2 run to print 'done' in $P2LOG"; fi
    if [ "$waited" -ge 3600 ]; then
      stamp "phase 2 not done after 60 minutes: going on with the current text encoder"; break
    fi
    sleep 30
    waited=$((waited + 30))
  done
  stamp "phase 2 wait over after ${waited} s"
fi
stamp "stage 2: UNet (log $RUN/unet.log)"
$PY $D/train_unet.py --run-dir "$RUN" --threads "$THREADS" --steps 4000 --batch 32 --budget-minutes 38 \
  >> "$RUN/unet.log" 2>&1
stamp "stage 3: export (log $RUN/export.log)"
$PY $D/export.py --run-dir "$RUN" --threads "$THREADS" >> "$RUN/export.log" 2>&1
stamp "done; model in assets/models/tessera-tiny/diffusion (model.json, samples.png)"
