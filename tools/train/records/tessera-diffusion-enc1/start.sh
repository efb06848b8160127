#!/bin/sh
# tessera-tiny diffusion: an SD-layout VAE encoder for the shipped decoder and UNet (both frozen), so that
# image-to-image and inpainting work on the embedded model. The encoder the decoder was trained with was
# never exported and its checkpoint is gone. Exported into assets/models/tessera-tiny/diffusion/ (the
# encoder tensors are added; every shipped tensor stays as it is). Resumable.
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-enc1
[ -f .cache/tessera-diffusion-data/meta.json ] || /usr/bin/python3 tools/train/diffusion/render.py >> $R/render.log 2>&1
/usr/bin/python3 tools/train/diffusion/train_encoder.py --run-dir $R --threads 1 --steps 2500 --samples 1536 \
  --export >> $R/encoder.log 2>&1
echo "$(date '+%F %T') encoder done" >> $R/encoder.log
