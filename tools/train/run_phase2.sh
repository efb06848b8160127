#!/bin/sh
# tessera-tiny phase 2: fine-tunes the phase-1 autoencoder (train_runs/tessera-tiny) in a new run
# folder with its own cosine schedule, more surface points and occupancy queries per shape and the
# weak families sampled more often (weights 1 + 2 * (1 - IoU) from phase 1's last evaluation), then
# re-encodes the dataset and fine-tunes the phase-1 text encoder + GPT on the new tokens, exports to
# a staging folder ($RUN/export), evaluates it there, and replaces assets/models/tessera-tiny only when
# the new model beats the shipped one (autoencoder IoU and prompt -> family match both at least as
# good, one strictly better). Resumable like run_all.sh (re-run after an interruption).
#
#   setsid nohup tools/train/run_phase2.sh --threads 1 >> train_runs/tessera-tiny-p2/run.log 2>&1 &
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
THREADS=1
if [ "${1:-}" = "--threads" ]; then THREADS="$2"; fi
P1=train_runs/tessera-tiny
RUN=train_runs/tessera-tiny-p2
DATA=.cache/tessera-data
mkdir -p "$RUN"
stamp() { echo "$(date '+%Y-%m-%d %H:%M:%S') run_phase2: $*"; }
if [ ! -f "$DATA/train/manifest.json" ] || [ ! -f "$DATA/val/manifest.json" ]; then
  stamp "dataset missing: run tools/train/run_all.sh first (it regenerates it from the seed)"; exit 1
fi
stamp "stage 1b: autoencoder fine-tune (log $RUN/ae.log)"
$PY tools/train/train_autoencoder.py --run-dir "$RUN" --threads "$THREADS" --init-from "$P1/ae_ckpt.pt" \
  --family-weights auto --steps 4000 --lr 4e-4 --warmup 100 --n-points 1024 --n-query 1024 \
  --tail-prob 0.3 >> "$RUN/ae.log" 2>&1
stamp "stage 2b: encode dataset + GPT fine-tune (log $RUN/gpt.log)"
$PY tools/train/train_gpt.py --run-dir "$RUN" --threads "$THREADS" --init-from "$P1/gpt_ckpt.pt" \
  --steps 1500 --lr 6e-4 --warmup 100 >> "$RUN/gpt.log" 2>&1
STAGE="$RUN/export"
SHIPPED=assets/models/tessera-tiny
stamp "stage 3: export to $STAGE"
rm -rf "$STAGE"
$PY tools/train/export_tiny.py --run-dir "$RUN" --out "$STAGE"
stamp "stage 4: evaluate $STAGE (log $RUN/eval.log)"
$PY tools/train/evaluate.py --run-dir "$RUN" --model-dir "$STAGE" --threads "$THREADS" >> "$RUN/eval.log" 2>&1
if $PY - "$STAGE/model.json" "$SHIPPED/model.json" <<'PYEOF'
import json, sys
new, old = (json.load(open(p))["metrics"] for p in sys.argv[1:3])
keys = ("autoencoder_iou_heldout", "prompt_family_match_rate")
better = all(new[k] >= old.get(k, 0) for k in keys) and any(new[k] > old.get(k, 0) for k in keys)
print("new", {k: new[k] for k in keys}, "shipped", {k: old.get(k) for k in keys})
sys.exit(0 if better else 1)
PYEOF
then
  stamp "the phase-2 model is better: replacing $SHIPPED"
  rm -rf "$SHIPPED.tmp" && cp -r "$STAGE" "$SHIPPED.tmp" && rm -rf "$SHIPPED" && mv "$SHIPPED.tmp" "$SHIPPED"
else
  stamp "the phase-2 model is not better than the shipped one: $SHIPPED kept ($STAGE has the new one)"
fi
stamp "done; metrics in $RUN/eval.json and $STAGE/model.json"
