#!/bin/sh
# tessera-tiny diffusion v5 (session 10): v4's UNet and extension-token rows trained on with OFFSET NOISE
# (--offset-noise 0.15). Why: with SD's scaled-linear schedule the image's mean colour survives in x_t at
# high t (at t=999 the per-channel latent mean of the signal has std 0.036-0.075 against 0.062 for the
# noise's mean over 16x16 latents; at t=900 the signal is 1.0-2.1x the noise), so the UNet learned to take
# the colour from the noise's mean rather than from the prompt, and at sampling (pure noise, random mean)
# the colour follows the seed: v3/v4's colour check stayed at object 50 %, background 58 % while the
# eps-MSE fell. Offset noise hides that mean, so the colour must come from the text; sampling is unchanged
# (the C++ engine and the SD schedule stay as they are). Exported into this folder only; shipped when the
# colour check is better. Resumable (re-run this script).
set -eu
export OPENBLAS_NUM_THREADS=1
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-v5
[ -d .cache/tessera-diffusion-data ] || /usr/bin/python3 tools/train/diffusion/render.py --geometries 10000 --seed 0 >> $R/render.log 2>&1
[ -f $R/vae_done.json ] || cp tools/train/records/tessera-diffusion-v3/vae_done.json tools/train/records/tessera-diffusion-v3/vae_ckpt.pt $R/
[ -f .cache/tessera-diffusion-data/latents.npy ] || /usr/bin/python3 tools/train/diffusion/train_vae.py \
  --run-dir $R --threads 1 --steps 995 >> $R/vae.log 2>&1
/usr/bin/python3 tools/train/diffusion/train_unet.py --run-dir $R --threads 1 --steps 9000 --batch 32 \
  --init-from tools/train/records/tessera-diffusion-v4/unet_ckpt.pt --train-new-tokens --lr 2e-4 --warmup 50 \
  --token-lr 1e-3 --offset-noise 0.15 --sample-every 2000 --budget-minutes 75 >> $R/unet.log 2>&1
rm -rf /tmp/tt-v5 && mkdir -p /tmp/tt-v5 && cp -r assets/models/tessera-tiny/. /tmp/tt-v5/
/usr/bin/python3 tools/train/diffusion/export.py --run-dir $R --out $R/export --model-dir /tmp/tt-v5 >> $R/export.log 2>&1
echo "$(date '+%F %T') v5 done" >> $R/unet.log
