#!/bin/sh
# tessera-tiny diffusion v3: v2's UNet and extension-token rows trained 4000 more steps on a fresh
# cosine schedule (lower LR); exported into this folder only (a copy of the tessera-tiny text
# encoder receives the rows), so nothing shipped changes until the colour check says it is better.
# Resumable (re-run this script).
set -eu
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-v3
[ -f $R/vae_done.json ] || cp tools/train/records/tessera-diffusion-v2/vae_done.json tools/train/records/tessera-diffusion-v2/vae_ckpt.pt $R/
/usr/bin/python3 tools/train/diffusion/train_unet.py --run-dir $R --threads 1 --steps 4000 --batch 32 \
  --init-from tools/train/records/tessera-diffusion-v2/unet_ckpt.pt --train-new-tokens --lr 3e-4 --warmup 100 \
  --token-lr 2e-3 --sample-every 2000 >> $R/unet.log 2>&1
rm -rf /tmp/tt-v3 && mkdir -p /tmp/tt-v3 && cp -r assets/models/tessera-tiny/text_encoder assets/models/tessera-tiny/vocab.json assets/models/tessera-tiny/merges.txt /tmp/tt-v3/ 2>/dev/null || cp -r assets/models/tessera-tiny/. /tmp/tt-v3/
/usr/bin/python3 tools/train/diffusion/export.py --run-dir $R --out $R/export --model-dir /tmp/tt-v3 >> $R/export.log 2>&1
echo "$(date '+%F %T') v3 done" >> $R/unet.log
