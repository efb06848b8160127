#!/bin/sh
# Probe of the v2 GPT's latest checkpoint: export it with the v2 autoencoder's decoder and codebook to
# $OUT (default /tmp/v2-probe), the shipped vocabulary extension carried back, then the first prompts
# and the held-out "a sculpture of" metric with the Python reference, as phase 12's probe did.
#   sh tools/train/records/tessera-tiny-v2-gpt/probe.sh [NAME]   -> probe_NAME.json / .png here
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-v2-gpt
AE=tools/train/records/tessera-tiny-v2-ae
OUT=${OUT:-/tmp/v2-probe}
NAME=${1:-latest}
[ -f $RUN/ae_ckpt.pt ] || cp $AE/ae_ckpt.pt $AE/ae_done.json $RUN/
rm -rf "$OUT"
/usr/bin/python3 tools/train/export_tiny.py --run-dir $RUN --out "$OUT" --allow-unfinished > /dev/null
/usr/bin/python3 tools/train/first_prompts.py --engine python --heldout --model-dir $OUT \
  --out $RUN/probe_$NAME.json --sheet $RUN/probe_$NAME.png
