#!/bin/sh
# tessera-tiny diffusion: a depth ControlNet (ControlNet v1.1 layout, hint encoder for the VAE's factor 4)
# for the shipped UNet, which stays frozen with the VAE and the text encoder. Depth hints re-traced from
# the render cache's geometries (render.py --depth; every re-shaded image checked equal to images.npy).
# Evaluated on 128 held-out geometries (silhouette IoU with / without control); exported as
# assets/models/tessera-tiny/diffusion/controlnet-depth.safetensors + model.json's "controlnet_depth"
# (every shipped tensor and card field unchanged). Resumable (controlnet_ckpt.pt).
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-cn1
[ -f .cache/tessera-diffusion-data/meta.json ] || /usr/bin/python3 tools/train/diffusion/render.py >> $R/render.log 2>&1
[ -f .cache/tessera-diffusion-depth/meta.json ] || /usr/bin/python3 tools/train/diffusion/render.py --depth >> $R/render.log 2>&1
/usr/bin/python3 tools/train/diffusion/train_controlnet.py --run-dir $R --threads 1 --steps 6000 --batch 32 \
  --lr 3e-4 --budget-minutes 42 --export >> $R/controlnet.log 2>&1
echo "$(date '+%F %T') controlnet done" >> $R/controlnet.log
