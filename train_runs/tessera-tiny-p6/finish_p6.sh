#!/bin/sh
# Phase 6, after start_p6.sh: export (phase 5's autoencoder, unchanged, + phase 6's GPT) to the staging folder,
# evaluate it with phase 4's recogniser (the same judge as phase 4 and the shipped model), then the ship
# rule (tools/train/ship.py). Re-runnable.
set -eu
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
cd "$(dirname "$0")/../.."
RUN=train_runs/tessera-tiny-p6
STAGE=$RUN/export
cp train_runs/tessera-tiny-p4/recogniser.pt $RUN/recogniser.pt
rm -rf "$STAGE"
/usr/bin/python3 tools/train/export_tiny.py --run-dir $RUN --out "$STAGE"
/usr/bin/python3 tools/train/evaluate.py --run-dir $RUN --model-dir "$STAGE" --threads 1 >> $RUN/eval.log 2>&1
/usr/bin/python3 tools/train/ship.py --stage "$STAGE"
