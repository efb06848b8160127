#!/bin/sh
# tessera-tiny diffusion v4 (session 9): v3's UNet and extension-token rows trained further on a fresh
# cosine schedule (peak LR 2e-4, token LR 1e-3), steps capped to fit 72 minutes of one core
# (--budget-minutes), to lift the colour match (v3: object 50 %, background 58 %; green and pink fail).
# Exported into this folder only; nothing shipped changes unless the colour check is better.
# Resumable (re-run this script).
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-v4
[ -d .cache/tessera-diffusion-data ] || /usr/bin/python3 tools/train/diffusion/render.py --geometries 10000 --seed 0 >> $R/render.log 2>&1
[ -f $R/vae_done.json ] || cp tools/train/records/tessera-diffusion-v3/vae_done.json tools/train/records/tessera-diffusion-v3/vae_ckpt.pt $R/
# The UNet trains on the VAE's latents of the renders (a fresh machine has none): the finished VAE
# only encodes them.
[ -f .cache/tessera-diffusion-data/latents.npy ] || /usr/bin/python3 tools/train/diffusion/train_vae.py \
  --run-dir $R --threads 1 --steps 995 >> $R/vae.log 2>&1
/usr/bin/python3 tools/train/diffusion/train_unet.py --run-dir $R --threads 1 --steps 9000 --batch 32 \
  --init-from tools/train/records/tessera-diffusion-v3/unet_ckpt.pt --train-new-tokens --lr 2e-4 --warmup 100 \
  --token-lr 1e-3 --sample-every 3000 --budget-minutes 72 >> $R/unet.log 2>&1
rm -rf /tmp/tt-v4 && mkdir -p /tmp/tt-v4 && cp -r assets/models/tessera-tiny/. /tmp/tt-v4/
/usr/bin/python3 tools/train/diffusion/export.py --run-dir $R --out $R/export --model-dir /tmp/tt-v4 >> $R/export.log 2>&1
echo "$(date '+%F %T') v4 done" >> $R/unet.log
