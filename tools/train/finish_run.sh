#!/bin/sh
# After a tessera-tiny training run: export RUN's checkpoints to RUN/export, evaluate the export with
# phase 4's recogniser (the judge every shipped model was measured with), then the ship rule
# (tools/train/ship.py: replaces assets/models/tessera-tiny only when better). Re-runnable.
#   sh tools/train/finish_run.sh tools/train/records/tessera-tiny-pN
set -eu
[ $# -eq 1 ] || { echo "usage: $0 RUN_DIR" >&2; exit 2; }
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
cd "$(dirname "$0")/../.."
RUN=$1
STAGE=$RUN/export
[ -d "$RUN" ] || { echo "$0: $RUN: no such run folder" >&2; exit 2; }
cp tools/train/records/tessera-tiny-p4/recogniser.safetensors "$RUN/recogniser.safetensors"
rm -rf "$STAGE"
/usr/bin/python3 tools/train/export_tiny.py --run-dir "$RUN" --out "$STAGE"
/usr/bin/python3 tools/train/evaluate.py --run-dir "$RUN" --model-dir "$STAGE" --threads 1 >> "$RUN/eval.log" 2>&1
/usr/bin/python3 tools/train/ship.py --stage "$STAGE"
