#!/bin/sh
set -eu
cd /work/main
DATA=.cache/tessera-data
mkdir -p "$DATA"
if [ ! -f "$DATA/train/manifest.json" ]; then
  echo "$(date '+%F %T') p4: generating the training set (seed 1)"
  /usr/bin/python3 -m tools.shapes.dataset generate --out "$DATA/train" --per-family 300 --seed 1 --split train --shard-size 950
fi
if [ ! -f "$DATA/val/manifest.json" ]; then
  echo "$(date '+%F %T') p4: generating the held-out set (seed 1)"
  /usr/bin/python3 -m tools.shapes.dataset generate --out "$DATA/val" --per-family 16 --seed 1 --split val --shard-size 1000
fi
exec tools/train/run_finetune.sh --threads 1 --prev tools/train/records/tessera-tiny-p3 --run tools/train/records/tessera-tiny-p4 \
  --ae-steps 4000 --ae-lr 2e-4 --gpt-steps 1500 --gpt-lr 3e-4 --freeze-text
