#!/bin/sh
# tessera-tiny diffusion v2: the UNet fine-tuned from v1 with whole-word colour/material/background
# tokens (tools/train/diffusion/extend_vocab.py) learned alongside; resumable (re-run this script).
set -eu
cd "$(dirname "$0")/../../../.."
R=tools/train/records/tessera-diffusion-v2
/usr/bin/python3 tools/train/diffusion/train_unet.py --run-dir $R --threads 1 --steps 3200 --batch 32 \
  --init-from tools/train/records/tessera-diffusion/unet_ckpt.pt --train-new-tokens --lr 5e-4 --warmup 100 \
  --token-lr 5e-3 --sample-every 1000 >> $R/unet.log 2>&1
/usr/bin/python3 tools/train/diffusion/export.py --run-dir $R >> $R/export.log 2>&1
echo "$(date '+%F %T') v2 done" >> $R/unet.log
