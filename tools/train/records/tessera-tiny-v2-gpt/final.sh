#!/bin/sh
# The v2 model's evaluation once its GPT is done, and the shipped model's in the same run (the
# machine is shared: compare figures measured together): export the v2 GPT with the v2
# autoencoder's decoder and codebook (the shipped vocabulary extension carried back) to $OUT
# (default /tmp/v2-final), then tools/train/first_prompts.py through the C++ engine with the CLI's
# defaults (--engine cli) and the held-out "a sculpture of" metric, for both models.
#   sh tools/train/records/tessera-tiny-v2-gpt/final.sh   -> final_cli.* and shipped_cli.* here
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
RUN=tools/train/records/tessera-tiny-v2-gpt
AE=tools/train/records/tessera-tiny-v2-ae
OUT=${OUT:-/tmp/v2-final}
[ -f $RUN/gpt_done.json ] || { echo "$RUN: the GPT is not done" >&2; exit 1; }
[ -f $RUN/ae_ckpt.pt ] || cp $AE/ae_ckpt.pt $AE/ae_done.json $RUN/
rm -rf "$OUT"
/usr/bin/python3 tools/train/export_tiny.py --run-dir $RUN --out "$OUT" > /dev/null
/usr/bin/python3 tools/train/first_prompts.py --engine cli --heldout --model-dir $OUT \
  --out $RUN/final_cli.json --sheet $RUN/final_cli.png > $RUN/final_cli.log 2>&1
/usr/bin/python3 tools/train/first_prompts.py --engine cli --heldout --model-dir assets/models/tessera-tiny \
  --out $RUN/shipped_cli.json --sheet $RUN/shipped_cli.png > $RUN/shipped_cli.log 2>&1
echo "final: $(grep '^all' $RUN/final_cli.log)"
echo "shipped: $(grep '^all' $RUN/shipped_cli.log)"
