#!/bin/sh
# tessera-tiny fine-tune phases. Fine-tunes the autoencoder of a previous run (--prev) in a new run
# folder (--run) with its own cosine schedule, more surface points and occupancy queries per shape and
# the weak families sampled more often (weights 1 + 2 * (1 - IoU) from the previous run's last
# evaluation), then re-encodes the dataset and fine-tunes the previous text encoder + GPT on the new
# tokens (--freeze-text keeps the text encoder bit for bit: the embedded diffusion model is
# conditioned on it), exports to a staging folder ($RUN/export), evaluates it there, and replaces
# assets/models/tessera-tiny only when the new model beats the shipped one (autoencoder IoU and
# prompt -> family match both at least as good, one strictly better, and no fewer property checks
# passed: the holes of the torus and the mug, tall, flat). Resumable like run_all.sh
# (re-run the same command after an interruption).
#
# Phase 2 (the defaults):
#   setsid nohup tools/train/run_finetune.sh --threads 1 >> tools/train/records/tessera-tiny-p2/run.log 2>&1 &
# Phase 3 (from phase 2, text encoder frozen):
#   setsid nohup tools/train/run_finetune.sh --threads 1 --prev tools/train/records/tessera-tiny-p2 \
#     --run tools/train/records/tessera-tiny-p3 --ae-steps 6000 --ae-lr 3e-4 --gpt-steps 2000 --gpt-lr 4e-4 \
#     --freeze-text >> tools/train/records/tessera-tiny-p3/run.log 2>&1 &
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
THREADS=1
P1=tools/train/records/tessera-tiny
RUN=tools/train/records/tessera-tiny-p2
AE_STEPS=4000
AE_LR=4e-4
GPT_STEPS=1500
GPT_LR=6e-4
FREEZE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --prev) P1="$2"; shift 2 ;;
    --run) RUN="$2"; shift 2 ;;
    --ae-steps) AE_STEPS="$2"; shift 2 ;;
    --ae-lr) AE_LR="$2"; shift 2 ;;
    --gpt-steps) GPT_STEPS="$2"; shift 2 ;;
    --gpt-lr) GPT_LR="$2"; shift 2 ;;
    --freeze-text) FREEZE="--freeze-text"; shift ;;
    *) echo "run_finetune.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for f in "$P1/ae_ckpt.pt" "$P1/gpt_ckpt.pt"; do
  if [ ! -f "$f" ]; then echo "run_finetune.sh: --prev $P1 has no $f" >&2; exit 2; fi
done
DATA=.cache/tessera-data
mkdir -p "$RUN"
stamp() { echo "$(date '+%Y-%m-%d %H:%M:%S') run_finetune: $*"; }
if [ ! -f "$DATA/train/manifest.json" ] || [ ! -f "$DATA/val/manifest.json" ]; then
  stamp "dataset missing: run tools/train/run_all.sh first (it regenerates it from the seed)"; exit 1
fi
stamp "stage 1b: autoencoder fine-tune (log $RUN/ae.log)"
$PY tools/train/train_autoencoder.py --run-dir "$RUN" --threads "$THREADS" --init-from "$P1/ae_ckpt.pt" \
  --family-weights auto --steps "$AE_STEPS" --lr "$AE_LR" --warmup 100 --n-points 1024 --n-query 1024 \
  --tail-prob 0.3 >> "$RUN/ae.log" 2>&1
stamp "stage 2b: encode dataset + GPT fine-tune (log $RUN/gpt.log)"
$PY tools/train/train_gpt.py --run-dir "$RUN" --threads "$THREADS" --init-from "$P1/gpt_ckpt.pt" \
  --steps "$GPT_STEPS" --lr "$GPT_LR" --warmup 100 $FREEZE >> "$RUN/gpt.log" 2>&1
STAGE="$RUN/export"
SHIPPED=assets/models/tessera-tiny
stamp "stage 3: export to $STAGE"
rm -rf "$STAGE"
$PY tools/train/export_tiny.py --run-dir "$RUN" --out "$STAGE"
stamp "stage 4: evaluate $STAGE (log $RUN/eval.log)"
$PY tools/train/evaluate.py --run-dir "$RUN" --model-dir "$STAGE" --threads "$THREADS" >> "$RUN/eval.log" 2>&1
if $PY tools/train/ship.py --stage "$STAGE" --shipped "$SHIPPED"; then
  stamp "the model of $RUN is better: $SHIPPED replaced"
else
  stamp "the model of $RUN is not better than the shipped one: $SHIPPED kept ($STAGE has the new one)"
fi
stamp "done; metrics in $RUN/eval.json and $STAGE/model.json"
