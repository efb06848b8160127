#!/bin/sh
# tessera-tiny pipeline, one command: dataset -> autoencoder -> (encode dataset +) GPT -> export ->
# evaluate. Every stage skips itself when its output exists and resumes from its checkpoint otherwise,
# so this script can be re-run after an interruption (the dataset is regenerated from its seed, the
# checkpoints an earlier session left in tools/train/records/tessera-tiny/ are resumed; they are not in git).
#
#   tools/train/run_all.sh [--threads N]      (default 1: the machine is shared with C++ builds)
#   nohup tools/train/run_all.sh > tools/train/records/tessera-tiny/run_all.log 2>&1 &
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
THREADS=1
if [ "${1:-}" = "--threads" ]; then THREADS="$2"; fi
RUN=tools/train/records/tessera-tiny
DATA=.cache/tessera-data
mkdir -p "$RUN" "$DATA"

stamp() { echo "$(date '+%Y-%m-%d %H:%M:%S') run_all: $*"; }

if [ ! -f "$DATA/train/manifest.json" ]; then
  stamp "generating the training set (seed 1, 300 per family)"
  $PY -m tools.shapes.dataset generate --out "$DATA/train" --per-family 300 --seed 1 --split train --shard-size 950
fi
if [ ! -f "$DATA/val/manifest.json" ]; then
  stamp "generating the held-out set (seed 1, 16 per family)"
  $PY -m tools.shapes.dataset generate --out "$DATA/val" --per-family 16 --seed 1 --split val --shard-size 1000
fi

stamp "stage 1: autoencoder (log $RUN/ae.log)"
$PY tools/train/train_autoencoder.py --threads "$THREADS" >> "$RUN/ae.log" 2>&1
stamp "stage 2: encode dataset + text encoder + GPT (log $RUN/gpt.log)"
$PY tools/train/train_gpt.py --threads "$THREADS" >> "$RUN/gpt.log" 2>&1
stamp "stage 3: export assets/models/tessera-tiny"
$PY tools/train/export_tiny.py
stamp "stage 4: evaluate (log $RUN/eval.log)"
$PY tools/train/evaluate.py --threads "$THREADS" >> "$RUN/eval.log" 2>&1
stamp "done; metrics in $RUN/eval.json and assets/models/tessera-tiny/model.json"
